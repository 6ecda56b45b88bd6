// Package hook is the OCI hook that applies a claim's swap limit to a
// container: it reads its arguments (internal/hookargs) and the OCI state
// from stdin, finds the container's cgroup, records the claim's share for
// that container and writes the sum of the container's shares with
// internal/cgroupswap. Every value taken from the state is validated before
// it reaches a path. Only cmd/dra-swap-hook links it.
package hook

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookargs"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// The runtime kills a hook that outlives its timeout (hookargs.TimeoutSeconds, which
// internal/kubeletplugin/cdi writes into its specs) with SIGKILL, before the hook can say
// why. So the hook keeps its own time, well under the runtime's: it waits
// for the state's lock at most LockWait, and once Deadline has passed,
// whatever it is still doing (a cgroup write that the kernel's reclaim
// holds up on a thrashing node), it writes its record, naming the step it
// was at, and fails the container.
const (
	// Deadline is half of the runtime's timeout.
	Deadline = hookargs.TimeoutSeconds * time.Second / 2
	// LockWait bounds the wait for the state's lock: readers hold it for
	// a few file reads and cgroup writes, other hooks for their own.
	LockWait = 3 * time.Second
)

// runLimits are a run's Deadline and LockWait (tests shorten them), and
// how long ago the runtime started the hook (age: zero in Apply).
type runLimits struct {
	deadline, lockWait time.Duration
	age                time.Duration
}

// Run is the whole hook: parse args and stdin, then apply or clean up,
// within Deadline, shortened by a late start (started.go).
func Run(args []string, stdin io.Reader) error {
	// Unknown (0, with an error): the deadline stays whole.
	age, _ := startedAgo()
	return run(args, stdin, runLimits{deadline: budget(Deadline, age), lockWait: LockWait, age: age})
}

func run(args []string, stdin io.Reader, lim runLimits) error {
	cfg, req, err := hookargs.ParseArgs(args)
	if err != nil {
		// Arguments this hook does not understand (a newer release's spec
		// after a downgrade) still leave the outcome where the plugin
		// reads it, when the arguments name the state directory.
		if dir, ok := argValue(args, "--state-dir"); ok && filepath.IsAbs(dir) && filepath.Clean(dir) == dir {
			if state, serr := ParseState(stdin); serr == nil {
				var known hookargs.Request // the claim, for its status
				if uid, ok := argValue(args, "--claim-uid"); ok && limits.IsUID(uid) {
					known.ClaimUID = uid
				}
				writeRecord(hookargs.Config{StateDir: dir}, known, state, swapsettings.Settings{}, nil, 0, fmt.Errorf("container %s: %w", ContainerName(state), err))
			}
		}
		return err
	}
	state, err := ParseState(stdin)
	if err != nil {
		return err
	}
	if req.Cleanup {
		err, timedOut := within(lim, func(step *progress) error { return cleanup(cfg, state, lim.lockWait, step) })
		if timedOut {
			err = fmt.Errorf("container %s: %w", ContainerName(state), err)
		}
		return err
	}
	return applyWithin(cfg, req, state, lim)
}

// argValue is the value of the argument --name=VALUE among args.
func argValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// progress is the step a run is at, for the message of a run that gave up.
type progress struct{ step atomic.Pointer[string] }

func (p *progress) set(step string) { p.step.Store(&step) }

func (p *progress) String() string {
	if s := p.step.Load(); s != nil {
		return *s
	}
	return "starting"
}

// within runs f and returns its error; when f has not returned after
// lim.deadline, an error that says so, the step f is at and a late start,
// with timedOut set (f goes on in the background until the process exits).
func within(lim runLimits, f func(*progress) error) (err error, timedOut bool) {
	step := &progress{}
	done := make(chan error, 1)
	go func() { done <- f(step) }()
	timer := time.NewTimer(lim.deadline)
	defer timer.Stop()
	select {
	case err := <-done:
		return err, false
	case <-timer.C:
		return fmt.Errorf("gave up after %s %s%s (the runtime kills the hook after its %ds timeout)", lim.deadline, step, lateNote(lim.age), hookargs.TimeoutSeconds), true
	}
}

// Apply records the claim's share for the container and applies the sum of
// the container's shares to its cgroup. Re-running it for the same claim
// and container changes nothing.
//
// The outcome, applied or not, is left in a record for the kubelet plugin
// to turn into an event on the pod (internal/hookrecord, internal/kubeletplugin/podevents),
// within Deadline.
func Apply(cfg hookargs.Config, req hookargs.Request, state *specs.State) error {
	return applyWithin(cfg, req, state, runLimits{deadline: Deadline, lockWait: LockWait})
}

func applyWithin(cfg hookargs.Config, req hookargs.Request, state *specs.State, lim runLimits) error {
	var total swapsettings.Settings
	var podLimit *int64
	var version int
	err, timedOut := within(lim, func(step *progress) error {
		var err error
		total, podLimit, version, err = apply(cfg, req, state, lim.lockWait, step)
		return err
	})
	if timedOut {
		// The run goes on in the background: nothing it found is read.
		err = fmt.Errorf("container %s: %w", ContainerName(state), err)
		writeRecord(cfg, req, state, swapsettings.Settings{}, nil, 0, err)
		return err
	}
	writeRecord(cfg, req, state, total, podLimit, version, err)
	return err
}

// writeRecord leaves the run's outcome for the kubelet plugin (for a
// Kubernetes container).
func writeRecord(cfg hookargs.Config, req hookargs.Request, state *specs.State, total swapsettings.Settings, podLimit *int64, version int, err error) {
	r, ok := hookrecord.FromAnnotations(state.Annotations)
	if !ok {
		return
	}
	r.LimitBytes, r.CgroupVersion, r.Time = total.LimitBytes, version, time.Now()
	r.PodLimitBytes = req.Share.PodLimitBytes
	if podLimit != nil {
		r.PodLimitBytes = podLimit
	}
	if req.ClaimUID != "" {
		r.Claims = []string{req.ClaimUID}
	}
	if dir, derr := hookstate.Dir(cfg.StateDir, state.ID); err == nil && derr == nil {
		if claims, cerr := hookstate.Claims(dir); cerr == nil && len(claims) > 0 {
			r.Claims = claims
		}
	}
	if err != nil {
		r.Error = err.Error()
	}
	if werr := hookrecord.Write(cfg.StateDir, state.ID, r); werr != nil {
		// The event is lost; the limit is not.
		fmt.Fprintf(os.Stderr, "dra-swap-hook: container %s: %v\n", ContainerName(state), werr)
	}
}

// apply returns the container's settings and the pod budget it applied
// (nil when none).
func apply(cfg hookargs.Config, req hookargs.Request, state *specs.State, lockWait time.Duration, step *progress) (swapsettings.Settings, *int64, int, error) {
	var total swapsettings.Settings
	name := ContainerName(state)
	step.set("finding the container's cgroup")
	if state.Pid <= 0 {
		return total, nil, 0, fmt.Errorf("container %s: OCI state has no process id (pid %d)", name, state.Pid)
	}
	r, isPod := hookrecord.FromAnnotations(state.Annotations)
	if req.PodUID != "" && (!isPod || r.PodUID != req.PodUID) {
		// A claim's swap was charged once, for one pod (see
		// internal/kubeletplugin/prepare).
		return total, nil, 0, fmt.Errorf("container %s: claim %s grants its swap to pod %s only, and this container belongs to pod %s: "+
			"a swap claim serves one pod (give each pod its own claim with a ResourceClaimTemplate)", name, req.ClaimUID, req.PodUID, orUnknown(r.PodUID))
	}
	target, err := findCgroup(cfg, state, name)
	if err != nil {
		return total, nil, 0, err
	}
	dir, err := hookstate.Dir(cfg.StateDir, state.ID)
	if err != nil {
		return total, nil, target.Version, err
	}
	// The pod's cgroup, and the container's cgroup above the process's
	// (crun's systemd scope), if any.
	podGroup, outer, podFound := podAncestor(target.Group, r.PodUID)
	var pod cgroupswap.Target
	if req.Share.PodLimitBytes != nil {
		if !podFound {
			return total, nil, target.Version, fmt.Errorf("container %s: neither its cgroup's parent nor its grandparent (%s) is the cgroup of pod %s, so the pod's swap budget cannot be set",
				name, target.Group, orUnknown(r.PodUID))
		}
		pod = target
		pod.Group, pod.Pod, pod.Container = podGroup, true, r.Namespace+"/"+r.Pod
	}
	// Records change and are applied under the state directory's lock,
	// which the verifier takes to read them: it never sees them
	// half-written or half-applied.
	step.set("waiting for the hook state's lock")
	unlock, err := hookstate.Lock(cfg.StateDir, lockWait)
	if err != nil {
		return total, nil, target.Version, fmt.Errorf("container %s: %w", name, err)
	}
	defer unlock()
	// The container's record first: with it, the kubelet plugin can find
	// the cgroup of every container that has a share.
	step.set("writing the container's records in " + cfg.StateDir)
	c := hookstate.Container{ID: state.ID, CgroupVersion: target.Version, CgroupGroup: target.Group, OuterCgroupGroup: outer, PodCgroupGroup: pod.Group}
	if isPod {
		c.Namespace, c.Pod, c.PodUID, c.Name = r.Namespace, r.Pod, r.PodUID, r.Container
	}
	if old, err := hookstate.ReadContainer(dir); err == nil && c.PodCgroupGroup == "" && old.OuterCgroupGroup == c.OuterCgroupGroup {
		c.PodCgroupGroup = old.PodCgroupGroup // another claim's run found it
	}
	if err := hookstate.WriteContainer(dir, c); err != nil {
		return total, nil, target.Version, fmt.Errorf("container %s: %w", name, err)
	}
	if err := hookstate.Record(dir, req.ShareKey(), req.Share); err != nil {
		return total, nil, target.Version, fmt.Errorf("container %s: %w", name, err)
	}
	totals, err := hookstate.Sum(dir)
	if err != nil {
		return total, nil, target.Version, fmt.Errorf("container %s: %w", name, err)
	}
	// The outer cgroup first: it bounds the container's own.
	for _, t := range c.Targets(target.Root) {
		step.set(fmt.Sprintf("writing the container's swap limit to its cgroup %s (cgroup v%d)", t.Group, t.Version))
		if err := cgroupswap.Apply(t, totals.Container); err != nil {
			return totals.Container, nil, target.Version, err
		}
	}
	podTarget, ok := c.PodTarget(target.Root)
	if !ok {
		return totals.Container, nil, target.Version, nil
	}
	// One budget for the pod's cgroup, whichever of its containers' hooks
	// runs: the largest that their records hold.
	podLimit, err := hookstate.PodSwapLimit(cfg.StateDir, c.PodCgroupGroup)
	if err != nil {
		return totals.Container, nil, target.Version, fmt.Errorf("container %s: the pod's swap budget: %w", name, err)
	}
	if podLimit == nil {
		return totals.Container, nil, target.Version, nil
	}
	step.set(fmt.Sprintf("writing the pod's swap budget to its cgroup %s (cgroup v%d)", podTarget.Group, podTarget.Version))
	if err := cgroupswap.Apply(podTarget, swapsettings.Settings{LimitBytes: *podLimit}); err != nil {
		return totals.Container, nil, target.Version, fmt.Errorf("container %s: the pod's swap budget: %w", name, err)
	}
	return totals.Container, podLimit, target.Version, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown: the runtime gave no pod UID)"
	}
	return s
}

// podAncestor finds the pod's cgroup as the nearest pod cgroup above the
// container's: its parent with runc (either cgroup driver) and crun's
// cgroupfs driver, its grandparent with crun's systemd driver, which puts
// the process in the "container" subgroup of the container's scope
// (…/kubepods-<qos>-pod<uid_>.slice/crio-<id>.scope/container). Both cgroup
// drivers name the pod's cgroup after its UID (".../pod<uid>" and
// ".../kubepods-<qos>-pod<uid_with_underscores>.slice"). outer is the
// cgroup between the pod's and the container's (the scope), if any. Found
// is false when neither the parent nor the grandparent is the pod's
// (nothing is written to either then).
func podAncestor(group, podUID string) (pod, outer string, found bool) {
	if podUID == "" {
		return "", "", false
	}
	parent := filepath.Dir(group)
	if parent == "/" {
		return "", "", false
	}
	if isPodCgroup(filepath.Base(parent), podUID) {
		return parent, "", true
	}
	grandparent := filepath.Dir(parent)
	if grandparent != "/" && isPodCgroup(filepath.Base(grandparent), podUID) {
		return grandparent, parent, true
	}
	return "", "", false
}

// isPodCgroup reports whether a cgroup's name is the one the cgroupfs or
// the systemd cgroup driver gives the pod podUID.
func isPodCgroup(name, podUID string) bool {
	return name == "pod"+podUID || strings.HasSuffix(name, "-pod"+strings.ReplaceAll(podUID, "-", "_")+".slice")
}

// cleanup removes the container's records (poststop), under the state
// directory's lock: the verifier never reads them half-removed.
func cleanup(cfg hookargs.Config, state *specs.State, lockWait time.Duration, step *progress) error {
	step.set("waiting for the hook state's lock")
	unlock, err := hookstate.Lock(cfg.StateDir, lockWait)
	if err != nil {
		return fmt.Errorf("container %s: %w", ContainerName(state), err)
	}
	defer unlock()
	step.set("removing the container's records from " + cfg.StateDir)
	if err := hookstate.Remove(cfg.StateDir, state.ID); err != nil {
		return fmt.Errorf("container %s: %w", ContainerName(state), err)
	}
	return nil
}

func findCgroup(cfg hookargs.Config, state *specs.State, name string) (cgroupswap.Target, error) {
	target := cgroupswap.Target{Root: cfg.CgroupRoot, Container: name}
	procFile := filepath.Join(cfg.ProcRoot, strconv.Itoa(state.Pid), "cgroup")
	f, err := os.Open(procFile)
	if err == nil {
		defer f.Close()
		version, group, perr := ParseProcCgroup(f)
		if perr == nil {
			target.Version, target.Group = version, group
			return target, nil
		}
		err = fmt.Errorf("%s: %w", procFile, perr)
	}
	// Fall back to the bundle's config.json when it names a plain path
	// (the cgroupfs driver; systemd's "slice:prefix:name" is not a path).
	group, cerr := bundleCgroupsPath(state.Bundle)
	if cerr != nil {
		return target, fmt.Errorf("container %s: find its cgroup: %w; %w", name, err, cerr)
	}
	target.Group = group
	target.Version = 1
	if _, serr := os.Stat(filepath.Join(cfg.CgroupRoot, "cgroup.controllers")); serr == nil {
		target.Version = 2
	}
	return target, nil
}

func bundleCgroupsPath(bundle string) (string, error) {
	if !filepath.IsAbs(bundle) {
		return "", fmt.Errorf("bundle %q is not an absolute path", bundle)
	}
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return "", err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return "", fmt.Errorf("decode %s/config.json: %w", bundle, err)
	}
	if spec.Linux == nil || spec.Linux.CgroupsPath == "" || strings.Contains(spec.Linux.CgroupsPath, ":") {
		return "", fmt.Errorf("%s/config.json names no plain cgroups path", bundle)
	}
	return checkGroup(spec.Linux.CgroupsPath)
}
