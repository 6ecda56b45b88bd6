// Package hookstate is the hook's record of a container on the node: which
// dra.swap claims it has and what each contributes (one file per share: a
// claim's allocation result, named by the claim's UID and the result's
// index), and where its cgroup is and whose it is
// (container.json). The hook writes it at createRuntime and removes it at
// poststop; the kubelet plugin's verifier and NRI plugin read it to know
// which containers must hold which limit.
//
// Layout under the state directory (a tmpfs, so a reboot clears it):
//
//	<state-dir>/<container-id>/<claim-uid>.<n>   a Share (JSON)
//	<state-dir>/<container-id>/container.json   a Container (JSON)
//	<state-dir>/.lock                           see Lock
//	<state-dir>/.lock.writer                    see Lock (the turnstile)
//	<state-dir>/.events/                        package hookrecord
//
// The hook changes records and applies them under Lock; the verifier
// reads records and cgroups under RLock, so that it never takes a
// container's records half-written, or its limits half-applied, for drift.
package hookstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/atomicfile"
	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/internal/filelock"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

const (
	// ContainerFile holds a container's Container record.
	ContainerFile = "container.json"
	// LockFile, in the state directory, is the lock of Lock and RLock.
	LockFile = ".lock"
	// TurnstileFile, in the state directory, is the turnstile that gives
	// Lock precedence over RLock (see Lock).
	TurnstileFile = ".lock.writer"

	maxFileBytes = 64 << 10
)

// isShareKey reports whether name names a share file: a claim UID, "."
// and an allocation result's index (1 to 4 digits, so at most
// limits.MaxResultIndex).
func isShareKey(name string) bool {
	uid, index, indexed := strings.Cut(name, ".")
	if !limits.IsUID(uid) || !indexed {
		return false
	}
	if len(index) < 1 || len(index) > 4 {
		return false
	}
	for _, c := range index {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ShareKey names the share of one allocation result of a claim.
func ShareKey(claimUID string, resultIndex int) string {
	return fmt.Sprintf("%s.%d", claimUID, resultIndex)
}

// Share is what one claim's allocation result contributes to a container:
// the settings of its cgroup, and its pod's budget. Its JSON form is the
// share's file: the settings' fields, then podSwapLimit.
type Share struct {
	swapsettings.Settings
	// PodLimitBytes, if set, is the swap the container's whole pod may use:
	// the sum of the pod's claims, set when its containers share a claim
	// and so could together use more than the claims were charged.
	PodLimitBytes *int64 `json:"podSwapLimit,omitempty"`
}

// Container says where a container's cgroup is and whose container it is.
type Container struct {
	// ID is the runtime's container ID (the directory's name).
	ID string `json:"id"`
	// CgroupVersion and CgroupGroup locate the container's memory cgroup,
	// the one its process is in (the group is its path within the
	// hierarchy).
	CgroupVersion int    `json:"cgroupVersion"`
	CgroupGroup   string `json:"cgroupGroup"`
	// OuterCgroupGroup, when set, is the container's cgroup that holds
	// CgroupGroup, its parent: crun's systemd driver puts the process in
	// the "container" subgroup of the container's scope
	// (…/crio-<id>.scope/container), and the scope's limit bounds the
	// subgroup's. It holds the same limit as CgroupGroup.
	OuterCgroupGroup string `json:"outerCgroupGroup,omitempty"`
	// PodCgroupGroup, when set, is the pod's cgroup (the parent of the
	// container's outermost cgroup), which holds the pod's swap budget.
	PodCgroupGroup string `json:"podCgroupGroup,omitempty"`
	// Namespace, Pod, PodUID and Name identify it in Kubernetes; empty for
	// a container the runtime did not create for a pod.
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	PodUID    string `json:"podUID,omitempty"`
	Name      string `json:"name,omitempty"`
}

// String names the container for messages: namespace/pod/container, or
// its ID.
func (c Container) String() string {
	if c.Pod != "" {
		return c.Namespace + "/" + c.Pod + "/" + c.Name
	}
	return c.ID
}

// Target is the container's cgroup for package cgroupswap.
func (c Container) Target(cgroupRoot string) cgroupswap.Target {
	return cgroupswap.Target{Version: c.CgroupVersion, Root: cgroupRoot, Group: c.CgroupGroup, Container: c.String()}
}

// Targets are all the container's cgroups that hold its limit: the outer
// one first, if any, then its own (Target).
func (c Container) Targets(cgroupRoot string) []cgroupswap.Target {
	own := c.Target(cgroupRoot)
	if c.OuterCgroupGroup == "" {
		return []cgroupswap.Target{own}
	}
	outer := own
	outer.Group = c.OuterCgroupGroup
	return []cgroupswap.Target{outer, own}
}

// outermost is the container's outermost cgroup.
func (c Container) outermost() string {
	if c.OuterCgroupGroup != "" {
		return c.OuterCgroupGroup
	}
	return c.CgroupGroup
}

// PodTarget is the container's pod's cgroup, if the record has one.
func (c Container) PodTarget(cgroupRoot string) (cgroupswap.Target, bool) {
	if c.PodCgroupGroup == "" {
		return cgroupswap.Target{}, false
	}
	name := c.Namespace + "/" + c.Pod
	if c.Pod == "" {
		name = "of container " + c.ID
	}
	return cgroupswap.Target{Version: c.CgroupVersion, Root: cgroupRoot, Group: c.PodCgroupGroup, Container: name, Pod: true}, true
}

// Dir is the container's directory.
func Dir(stateDir, containerID string) (string, error) {
	if !limits.IsContainerID(containerID) {
		return "", fmt.Errorf("container id %q is not a valid container ID", containerID)
	}
	return filepath.Join(stateDir, containerID), nil
}

// Record writes a share atomically into the container's dir under key
// (see ShareKey).
func Record(dir, key string, share Share) error {
	if !isShareKey(key) {
		return fmt.Errorf("share %q is not a claim UID and a result index", key)
	}
	if err := share.Validate(); err != nil {
		return fmt.Errorf("share %s: %w", key, err)
	}
	data, err := json.Marshal(share)
	if err != nil {
		return err
	}
	if err := write(dir, key, data); err != nil {
		return fmt.Errorf("record share %s: %w", key, err)
	}
	return nil
}

// Validate checks the share's settings (swapsettings.Settings.Validate)
// and its pod's budget, within 0..limits.MaxSwapBytes: what Record writes
// and Sum reads, and what the CDI writer hands the hook.
func (s Share) Validate() error {
	if err := s.Settings.Validate(); err != nil {
		return err
	}
	if s.PodLimitBytes != nil && (*s.PodLimitBytes < 0 || *s.PodLimitBytes > limits.MaxSwapBytes) {
		return fmt.Errorf("pod swap limit %d out of range 0..%d", *s.PodLimitBytes, limits.MaxSwapBytes)
	}
	return nil
}

// WriteContainer writes the container's record atomically into its dir.
func WriteContainer(dir string, c Container) error {
	if err := c.validate(); err != nil {
		return err
	}
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := write(dir, ContainerFile, data); err != nil {
		return fmt.Errorf("record container %s: %w", c, err)
	}
	return nil
}

// ReadContainer reads the container's record from its dir.
func ReadContainer(dir string) (Container, error) {
	var c Container
	data, err := readFile(filepath.Join(dir, ContainerFile))
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("decode %s: %w", filepath.Join(dir, ContainerFile), err)
	}
	if c.ID != filepath.Base(dir) {
		return c, fmt.Errorf("%s: container id %q does not match its directory", filepath.Join(dir, ContainerFile), c.ID)
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("%s: %w", filepath.Join(dir, ContainerFile), err)
	}
	return c, nil
}

func (c Container) validate() error {
	if !limits.IsContainerID(c.ID) {
		return fmt.Errorf("container id %q is not a valid container ID", c.ID)
	}
	if c.CgroupVersion != 1 && c.CgroupVersion != 2 {
		return fmt.Errorf("container %s: cgroup version %d is neither 1 nor 2", c, c.CgroupVersion)
	}
	if !cleanGroup(c.CgroupGroup) {
		return fmt.Errorf("container %s: cgroup path %q is not a clean absolute path within the hierarchy", c, c.CgroupGroup)
	}
	if c.OuterCgroupGroup != "" && (c.OuterCgroupGroup != filepath.Dir(c.CgroupGroup) || c.OuterCgroupGroup == "/") {
		return fmt.Errorf("container %s: outer cgroup %q is not the parent of its cgroup %q", c, c.OuterCgroupGroup, c.CgroupGroup)
	}
	if c.PodCgroupGroup != "" && (c.PodCgroupGroup != filepath.Dir(c.outermost()) || c.PodCgroupGroup == "/") {
		return fmt.Errorf("container %s: pod cgroup %q is not the parent of its cgroup %q", c, c.PodCgroupGroup, c.outermost())
	}
	if c.PodUID != "" && !limits.IsUID(c.PodUID) {
		return fmt.Errorf("container %s: pod UID %q is not a Kubernetes UID", c, c.PodUID)
	}
	return nil
}

func cleanGroup(g string) bool {
	return strings.HasPrefix(g, "/") && !strings.Contains(g, "..") && !strings.ContainsRune(g, 0) && filepath.Clean(g) == g
}

// Totals is what a container's shares add up to.
type Totals struct {
	// Container is applied to the container's cgroup.
	Container swapsettings.Settings
	// PodLimitBytes, if set, bounds the swap of the container's pod (its
	// parent cgroup): the largest PodLimitBytes of the shares (prepare
	// writes the same value into every claim of the pod; a claim prepared
	// before another of the pod was known holds a smaller one).
	PodLimitBytes *int64
	// Shares is how many shares there are.
	Shares int
}

// Sum combines the container's recorded shares: limits add up; swap.high
// adds up over the shares that set it, counting the others at their limit;
// zswap is off if any share turns it off, and so is its writeback;
// swappiness and the offload budget are the lowest asked; the pod's limit
// is the largest recorded.
func Sum(dir string) (Totals, error) {
	var t Totals
	total := &t.Container
	shares, err := readShares(dir)
	if err != nil {
		return t, err
	}
	var high int64
	anyHigh := false
	for _, ks := range shares {
		s := ks.share
		t.Shares++
		total.LimitBytes += s.LimitBytes
		if s.HighBytes != nil {
			anyHigh = true
			high += *s.HighBytes
		} else {
			high += s.LimitBytes
		}
		if s.Zswap != swapsettings.ZswapUnchanged && (total.Zswap == swapsettings.ZswapUnchanged || s.Zswap == swapsettings.ZswapOff) {
			total.Zswap = s.Zswap
		}
		if s.Swappiness != nil && (total.Swappiness == nil || *s.Swappiness < *total.Swappiness) {
			v := *s.Swappiness
			total.Swappiness = &v
		}
		total.ZswapWritebackOff = total.ZswapWritebackOff || s.ZswapWritebackOff
		if s.OffloadMaxStall != nil && (total.OffloadMaxStall == nil || *s.OffloadMaxStall < *total.OffloadMaxStall) {
			v := *s.OffloadMaxStall
			total.OffloadMaxStall = &v
		}
		if s.PodLimitBytes != nil && (t.PodLimitBytes == nil || *s.PodLimitBytes > *t.PodLimitBytes) {
			v := *s.PodLimitBytes
			t.PodLimitBytes = &v
		}
	}
	if anyHigh {
		total.HighBytes = &high
	}
	return t, nil
}

// keyedShare is a share with its key.
type keyedShare struct {
	key   string
	share Share
}

// readShares reads the container's shares, each validated, their limits
// adding up to at most limits.MaxSwapBytes.
func readShares(dir string) ([]keyedShare, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read hook state %s: %w", dir, err)
	}
	var out []keyedShare
	var total int64
	for _, e := range entries {
		if !isShareKey(e.Name()) {
			continue // container.json, temporary files
		}
		data, err := readFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var s Share
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("hook state %s/%s: %w", dir, e.Name(), err)
		}
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("hook state %s/%s: %w", dir, e.Name(), err)
		}
		if total > limits.MaxSwapBytes-s.LimitBytes {
			return nil, fmt.Errorf("hook state %s/%s: swap limits add up to more than %d", dir, e.Name(), limits.MaxSwapBytes)
		}
		total += s.LimitBytes
		out = append(out, keyedShare{key: e.Name(), share: s})
	}
	return out, nil
}

// Shares returns the container's recorded shares by key (see ShareKey),
// each validated; a share removed while it is read is left out.
func Shares(dir string) (map[string]Share, error) {
	shares, err := readShares(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Share, len(shares))
	for _, ks := range shares {
		out[ks.key] = ks.share
	}
	return out, nil
}

// ClaimOf is the UID of the claim whose share key is key.
func ClaimOf(key string) string {
	uid, _, _ := strings.Cut(key, ".")
	return uid
}

// ClaimLimits returns, for each claim with a share in the container's
// records, the swap limit its shares give the container (the sum over its
// allocation results): each claim's part of the container's limit.
func ClaimLimits(dir string) (map[string]int64, error) {
	shares, err := readShares(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, ks := range shares {
		uid, _, _ := strings.Cut(ks.key, ".")
		out[uid] += ks.share.LimitBytes
	}
	return out, nil
}

// Claims returns the UIDs of the claims that have a share in the
// container's records, each once.
func Claims(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read hook state %s: %w", dir, err)
	}
	var uids []string
	for _, e := range entries {
		if !isShareKey(e.Name()) {
			continue
		}
		uid, _, _ := strings.Cut(e.Name(), ".")
		if !slices.Contains(uids, uid) {
			uids = append(uids, uid)
		}
	}
	return uids, nil
}

// List returns the IDs of the containers that have a directory under
// stateDir.
func List(stateDir string) ([]string, error) {
	entries, err := os.ReadDir(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read hook state directory %s: %w", stateDir, err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && limits.IsContainerID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Remove deletes the container's directory.
func Remove(stateDir, containerID string) error {
	dir, err := Dir(stateDir, containerID)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove hook state of container %s: %w", containerID, err)
	}
	return nil
}

func write(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create hook state %s: %w", dir, err)
	}
	return atomicfile.Replace(filepath.Join(dir, name), bytes.NewReader(data), 0o600, "hook state")
}

func readFile(path string) ([]byte, error) { return atomicfile.ReadFile(path, maxFileBytes) }

// Lock takes the state directory's lock exclusively, waiting up to wait
// while readers hold it (they only read files and write cgroup files, a
// matter of milliseconds). The hook holds it while it changes a
// container's records and applies them. A lock still held after wait
// (a reader that hangs or was stopped) is an error naming the lock file:
// the hook then fails the container's start, loudly and within a bound,
// rather than hang it. The returned function releases the lock.
//
// A writer waits ahead of readers that come after it. flock(2) grants a
// shared lock whenever no exclusive one is held, even while an exclusive
// request waits, so readers whose holds overlap (the verifier's passes run
// back to back while many pods start) would keep the lock shared for
// longer than any wait. Lock therefore first takes the turnstile
// (TurnstileFile) exclusively, then the lock; RLock passes the turnstile
// shared before it takes the lock and releases it at once. While a writer
// holds the turnstile no reader starts, so it waits at most for the
// readers already inside. The turnstile orders; the lock alone excludes: a
// hook or verifier of an older release that knows only LockFile is still
// kept out, it just is not ordered.
func Lock(stateDir string, wait time.Duration) (unlock func(), err error) {
	begin := time.Now()
	deadline := begin.Add(wait)
	turnstile, err := tryLock(stateDir, TurnstileFile, filelock.Exclusive, deadline)
	if err != nil {
		return nil, err
	}
	if turnstile == nil {
		return nil, fmt.Errorf("lock %s: still held by another hook after %s", filepath.Join(stateDir, TurnstileFile), wait)
	}
	behind := time.Since(begin)
	lock, err := tryLock(stateDir, LockFile, filelock.Exclusive, deadline)
	if err == nil && lock == nil {
		err = fmt.Errorf("lock %s: still held by a reader (the kubelet plugin's verifier) after %s (%s of it behind other hooks)",
			filepath.Join(stateDir, LockFile), wait, behind.Round(time.Millisecond))
	}
	if err != nil {
		turnstile.Close()
		return nil, err
	}
	return func() {
		lock.Close()
		turnstile.Close()
	}, nil
}

// lockPoll is how often Lock and RLock try again while the lock is held.
const lockPoll = 5 * time.Millisecond

// RLock takes the state directory's lock shared, for reading records and
// holding cgroups to them, trying for up to wait while the hook holds it
// or waits for it (see Lock); ok is false when it could not take it in
// that time (nothing is locked then).
func RLock(stateDir string, wait time.Duration) (unlock func(), ok bool, err error) {
	deadline := time.Now().Add(wait)
	turnstile, err := tryLock(stateDir, TurnstileFile, filelock.Shared, deadline)
	if err != nil || turnstile == nil {
		return nil, false, err
	}
	defer turnstile.Close()
	lock, err := tryLock(stateDir, LockFile, filelock.Shared, deadline)
	if err != nil || lock == nil {
		return nil, false, err
	}
	return func() { lock.Close() }, true, nil
}

// WriterWaiting reports whether a hook holds or waits for the lock (it
// holds the turnstile, see Lock). A reader that holds the lock for a pass
// over many containers asks between containers, and lets go when a hook
// waits: the container that hook starts waits on it.
func WriterWaiting(stateDir string) bool {
	f, err := os.Open(filepath.Join(stateDir, TurnstileFile))
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(filelock.Try(f, filelock.Shared), filelock.ErrHeld)
}

// tryLock takes the lock of kind mode on the state directory's file name,
// trying every lockPoll until deadline (filelock.Poll, which tries once
// even when deadline has passed); the file is nil, with no error, when
// the lock was held all that time. Closing the file releases the lock.
func tryLock(stateDir, name string, mode filelock.Mode, deadline time.Time) (*os.File, error) {
	f, err := openLock(stateDir, name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	err = filelock.Poll(ctx, f, mode, lockPoll, func(err error) bool { return errors.Is(err, filelock.ErrHeld) })
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, context.DeadlineExceeded):
		f.Close()
		return nil, nil
	default:
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
}

func openLock(stateDir, name string) (*os.File, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create hook state directory %s: %w", stateDir, err)
	}
	path := filepath.Join(stateDir, name)
	// Read-only is enough for flock(2), and opens an existing lock on a
	// read-only mount too.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open hook state lock %s: %w", path, err)
	}
	return f, nil
}

// PodSwapLimits returns each pod cgroup's swap budget (keyed by a
// Container's PodCgroupGroup): the largest PodLimitBytes recorded by any
// share of any container in it. Containers of one pod may record
// different budgets (a claim prepared before another of the pod was known
// holds a smaller one); the pod's cgroup gets one, the largest. Containers
// whose records cannot be read are left out (their own checks report
// them). Call it under Lock or RLock.
func PodSwapLimits(stateDir string) (map[string]int64, error) {
	return podSwapLimits(stateDir, "")
}

// PodSwapLimit is the budget of one pod cgroup, as PodSwapLimits has it;
// nil when no container in it records one.
func PodSwapLimit(stateDir, podCgroupGroup string) (*int64, error) {
	if podCgroupGroup == "" {
		return nil, nil
	}
	limits, err := podSwapLimits(stateDir, podCgroupGroup)
	if err != nil {
		return nil, err
	}
	if v, ok := limits[podCgroupGroup]; ok {
		return &v, nil
	}
	return nil, nil
}

// podSwapLimits is PodSwapLimits for all pod cgroups, or for only one.
func podSwapLimits(stateDir, only string) (map[string]int64, error) {
	ids, err := List(stateDir)
	if err != nil {
		return nil, err
	}
	limits := map[string]int64{}
	for _, id := range ids {
		dir := filepath.Join(stateDir, id)
		c, err := ReadContainer(dir)
		if err != nil || c.PodCgroupGroup == "" || only != "" && c.PodCgroupGroup != only {
			continue
		}
		t, err := Sum(dir)
		if err != nil || t.PodLimitBytes == nil {
			continue
		}
		if v, ok := limits[c.PodCgroupGroup]; !ok || *t.PodLimitBytes > v {
			limits[c.PodCgroupGroup] = *t.PodLimitBytes
		}
	}
	return limits, nil
}
