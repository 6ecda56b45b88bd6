package hook

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// Run is the whole hook: parse args and stdin, then apply or clean up.
func Run(args []string, stdin io.Reader) error {
	cfg, req, err := ParseArgs(args)
	if err != nil {
		return err
	}
	state, err := ParseState(stdin)
	if err != nil {
		return err
	}
	if req.Cleanup {
		return Cleanup(cfg, state)
	}
	return Apply(cfg, req, state)
}

// Apply records the claim's share for the container and applies the sum of
// the container's shares to its cgroup. Re-running it for the same claim
// and container changes nothing.
//
// The outcome, applied or not, is left in a record for the kubelet plugin
// to turn into an event on the pod (internal/hookrecord, internal/podevents).
func Apply(cfg Config, req Request, state *specs.State) error {
	total, podLimit, version, err := apply(cfg, req, state)
	if r, ok := hookrecord.FromAnnotations(state.Annotations); ok {
		r.LimitBytes, r.CgroupVersion, r.Time = total.LimitBytes, version, time.Now()
		r.PodLimitBytes = req.Share.PodLimitBytes
		if podLimit != nil {
			r.PodLimitBytes = podLimit
		}
		r.Claims = []string{req.ClaimUID}
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
	return err
}

// apply returns the container's settings and the pod budget it applied
// (nil when none).
func apply(cfg Config, req Request, state *specs.State) (swapsettings.Settings, *int64, int, error) {
	var total swapsettings.Settings
	name := ContainerName(state)
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
	unlock, err := hookstate.Lock(cfg.StateDir, hookstate.DefaultWriteLockWait)
	if err != nil {
		return total, nil, target.Version, fmt.Errorf("container %s: %w", name, err)
	}
	defer unlock()
	// The container's record first: with it, the kubelet plugin can find
	// the cgroup of every container that has a share.
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

// Cleanup removes the container's records (poststop), under the state
// directory's lock: the verifier never reads them half-removed.
func Cleanup(cfg Config, state *specs.State) error {
	unlock, err := hookstate.Lock(cfg.StateDir, hookstate.DefaultWriteLockWait)
	if err != nil {
		return fmt.Errorf("container %s: %w", ContainerName(state), err)
	}
	defer unlock()
	if err := hookstate.Remove(cfg.StateDir, state.ID); err != nil {
		return fmt.Errorf("container %s: %w", ContainerName(state), err)
	}
	return nil
}

func findCgroup(cfg Config, state *specs.State, name string) (cgroupswap.Target, error) {
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
