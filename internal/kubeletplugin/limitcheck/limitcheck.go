// Package limitcheck keeps every prepared container's swap limit true after
// something else on the node rewrote it: the kubelet's
// UpdateContainerResources (an in-place resize, the CPU manager), systemd
// re-applying a unit's properties, a person writing the cgroup file. It
// reads the hook's records (package hookstate) for which containers must
// hold which limit, reads each container's cgroup back, and writes the
// recorded value again where they differ, reporting what it found and what
// it wrote. It decides nothing: the records say what the limit is.
//
// A limit that cannot be written back stays reported as not held, once,
// until it holds again or its cgroup is gone, and is written again on a
// schedule that ends (see RetryAfter): on cgroup v1, a memory limit
// lowered while the container had swapped out memory leaves memory+swap
// where it was, and the kernel refuses (EBUSY) to lower it below what the
// container uses until its usage falls.
package limitcheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// Unreadable is the found value of a limit that could not be read.
const Unreadable = math.MinInt64

// Drift is a limit that was not what the records say.
type Drift struct {
	Container hookstate.Container
	// Pod says the drifted limit is the pod's swap budget (the
	// container's parent cgroup), not the container's own limit.
	Pod bool
	// Group is the cgroup read: the container's own, its outer cgroup
	// (crun's scope), or the pod's.
	Group string
	// Found is what was read (Unreadable if it could not be), Want what
	// the records say.
	Found, Want int64
	// Trigger says what made the verifier look ("interval", "update",
	// "start-up", …).
	Trigger string
	// Since is when the limit was first found not held (zero for a
	// limit that was written back at once).
	Since time.Time
	// Attempts counts the writes that failed since then.
	Attempts int
}

// Key names the limit: the container's own, or its pod's budget (one per
// pod cgroup, whichever container's check found it).
func (d Drift) Key() string {
	if d.Pod {
		return "pod " + d.Container.PodCgroupGroup
	}
	if d.Group != "" && d.Group != d.Container.CgroupGroup {
		return "container " + d.Container.ID + " " + d.Group
	}
	return "container " + d.Container.ID
}

// OverBytes is how much more swap the limit allows than the records say
// (0 when it allows less, or could not be read).
func (d Drift) OverBytes() int64 {
	if d.Found == Unreadable || d.Want < 0 {
		return 0
	}
	if d.Found < 0 { // unlimited
		return math.MaxInt64
	}
	return max(d.Found-d.Want, 0)
}

// Reporter is told about every drift.
type Reporter interface {
	// Restored: want was written and read back (also a limit that was
	// not held before).
	Restored(ctx context.Context, d Drift)
	// NotRestored: writing failed, or the limit still differs after
	// writing, or it could not be read (Found is Unreadable). Told once
	// per limit until it is Restored or Cleared.
	NotRestored(ctx context.Context, d Drift, err error)
	// StillNotRestored: a limit told NotRestored still differs; Found is
	// what it is now, Attempts how many writes failed.
	StillNotRestored(ctx context.Context, d Drift)
	// Cleared: a limit told NotRestored holds again without the
	// verifier's write (another write, a later resize), or its cgroup
	// is gone (Found is Unreadable then).
	Cleared(ctx context.Context, d Drift)
}

// Outcome is what one check of one container did.
type Outcome int

const (
	// Gone: the container's cgroup no longer exists.
	Gone Outcome = iota
	// Held: the limit was what the records say.
	Held
	// Restored: the limit differed and was written again.
	Restored
	// Failed: the limit differed and could not be restored.
	Failed
	// Busy: the hook was changing records all the time the check waited
	// (LockWait); nothing was read or written.
	Busy
	// NotHeld: the limit differs and could not be restored before; it is
	// left until its next attempt (RetryAfter), or failed again.
	NotHeld
)

func (o Outcome) String() string {
	return [...]string{"gone", "held", "restored", "failed", "busy", "not held"}[o]
}

// A limit that could not be written back is written again at most
// MaxRetries times, RetryAfter(n) after the n-th failed write (30 s, 1, 2,
// 4 and 8 minutes: the last 15.5 minutes after the first failure); on
// cgroup v1, also whenever the cgroup's memory+swap usage fits the limit
// (the kernel then accepts it), at most once per FirstRetry. Between those
// it is only read, which tells when it holds again.
const (
	FirstRetry = 30 * time.Second
	MaxRetries = 5
)

// RetryAfter is the wait after the n-th failed write (n ≥ 1).
func RetryAfter(n int) time.Duration { return FirstRetry << (n - 1) }

// retrySlack lets a pass that comes a moment early count as on time: the
// interval's ticker runs from one pass's start to the next, and the write
// it measures from came later in its pass.
const retrySlack = time.Second

// notHeld is a limit that could not be restored.
type notHeld struct {
	drift Drift
	// last is the last write's time.
	last time.Time
}

// DefaultLockWait is how long a check waits for the hook to finish
// changing records (it holds their lock for a few file writes).
const DefaultLockWait = 2 * time.Second

// Verifier checks containers against the hook's records.
type Verifier struct {
	// StateDir is the hook state directory, CgroupRoot the cgroup mount
	// root (both as this process sees them).
	StateDir, CgroupRoot string
	Reporter             Reporter
	// LockWait bounds how long a check waits for the hook to finish
	// changing records (see hookstate.RLock); zero: DefaultLockWait.
	LockWait time.Duration
	// Clock is the clock (clock.RealClock when nil).
	Clock clock.PassiveClock
	// mu orders checks: an NRI event and the interval never write one
	// container's cgroup at once. It guards notHeld.
	mu sync.Mutex
	// notHeld are the limits that could not be restored, by Drift.Key.
	notHeld map[string]*notHeld
	// write writes a limit (cgroupswap.Apply; tests fake the kernel).
	write func(cgroupswap.Target, swapsettings.Settings) error
}

func (v *Verifier) now() time.Time {
	if v.Clock == nil {
		return time.Now()
	}
	return v.Clock.Now()
}

// Check compares one container's limit with its records and restores it.
// A container without records is not the driver's and is Held.
func (v *Verifier) Check(ctx context.Context, containerID, trigger string) (Outcome, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	unlock, ok, err := hookstate.RLock(v.StateDir, v.lockWait())
	if err != nil {
		return Failed, err
	}
	if !ok {
		return Busy, nil
	}
	defer unlock()
	budget := func(podGroup string) (*int64, error) { return hookstate.PodSwapLimit(v.StateDir, podGroup) }
	return v.check(ctx, containerID, trigger, budget, map[string]bool{})
}

func (v *Verifier) lockWait() time.Duration {
	if v.LockWait == 0 {
		return DefaultLockWait
	}
	return v.LockWait
}

// podBudget returns a pod cgroup's budget (nil: none).
type podBudget func(podGroup string) (*int64, error)

// check checks one container under the records' lock. Its pod's cgroup is
// checked unless podsDone has it, and then added to it: one write of one
// budget per pod cgroup, whichever containers hold it.
func (v *Verifier) check(ctx context.Context, containerID, trigger string, budget podBudget, podsDone map[string]bool) (Outcome, error) {
	dir, err := hookstate.Dir(v.StateDir, containerID)
	if err != nil {
		return Failed, err
	}
	c, err := hookstate.ReadContainer(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// No record: not a swap container, or the hook has not run yet
		// (its record comes first), or poststop removed it.
		return Held, nil
	}
	if err != nil {
		return Failed, err
	}
	totals, err := hookstate.Sum(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Gone, nil
	}
	if err != nil {
		return Failed, fmt.Errorf("container %s: %w", c, err)
	}
	if totals.Shares == 0 {
		return Held, nil // the hook wrote the container record, not yet a share
	}
	// Every cgroup of the container that holds its limit: crun's scope
	// bounds the subgroup its process is in, so both must hold it.
	outcome := Held
	for _, target := range c.Targets(v.CgroupRoot) {
		o, err := v.hold(ctx, c, target, false, totals.Container, trigger)
		switch {
		case o == Gone || o == Failed:
			return o, err
		case o == NotHeld:
			outcome = NotHeld
		case o == Restored && outcome == Held:
			outcome = Restored
		}
	}
	pod, ok := c.PodTarget(v.CgroupRoot)
	if !ok || podsDone[c.PodCgroupGroup] {
		return outcome, nil
	}
	limit, err := budget(c.PodCgroupGroup)
	if err != nil {
		return Failed, fmt.Errorf("container %s: the pod's swap budget: %w", c, err)
	}
	if limit != nil {
		podsDone[c.PodCgroupGroup] = true
		podOutcome, err := v.hold(ctx, c, pod, true, swapsettings.Settings{LimitBytes: *limit}, trigger)
		switch {
		case podOutcome == Failed:
			return Failed, err
		case podOutcome == NotHeld:
			outcome = NotHeld
		case podOutcome == Restored && outcome == Held:
			outcome = Restored
		}
	}
	return outcome, nil
}

// hold reads one cgroup's swap limit and writes want back if it differs:
// at once the first time, then as RetryAfter says while it cannot be
// written.
func (v *Verifier) hold(ctx context.Context, c hookstate.Container, target cgroupswap.Target, pod bool, want swapsettings.Settings, trigger string) (Outcome, error) {
	d := Drift{Container: c, Pod: pod, Group: target.Group, Want: want.LimitBytes, Trigger: trigger}
	key := d.Key()
	if v.notHeld == nil {
		v.notHeld = map[string]*notHeld{}
	}
	prev := v.notHeld[key]
	found, err := cgroupswap.ReadLimit(target.Version, target.Root, target.Group)
	if prev != nil && prev.drift.Want != d.Want {
		// The records changed: what could not be restored is not what
		// is wanted now.
		v.forget(ctx, key, found)
		prev = nil
	}
	if err != nil {
		if v.gone(target) {
			v.forget(ctx, key, Unreadable)
			return Gone, nil
		}
		d.Found = Unreadable
		if prev != nil {
			return v.still(ctx, prev, d), nil
		}
		return v.failed(ctx, d, nil, fmt.Errorf("%s: read its swap limit: %w", describe(target), err))
	}
	if found == want.LimitBytes {
		v.forget(ctx, key, found)
		return Held, nil
	}
	d.Found = found
	if prev != nil && !v.due(prev, target) {
		return v.still(ctx, prev, d), nil
	}
	write := v.write
	if write == nil {
		write = cgroupswap.Apply
	}
	err = write(target, want)
	if err != nil && v.gone(target) {
		v.forget(ctx, key, Unreadable)
		return Gone, nil
	}
	if err == nil {
		var after int64
		if after, err = cgroupswap.ReadLimit(target.Version, target.Root, target.Group); err == nil && after != want.LimitBytes {
			err = fmt.Errorf("wrote %d but read back %d", want.LimitBytes, after)
		}
	}
	if err != nil {
		return v.failed(ctx, d, prev, fmt.Errorf("%s: %w", describe(target), err))
	}
	if prev != nil {
		delete(v.notHeld, key)
		d.Since, d.Attempts = prev.drift.Since, prev.drift.Attempts
	}
	klog.FromContext(ctx).Info("Swap limit restored", "container", c.String(), "containerID", c.ID, "podBudget", pod, "cgroup", target.Group,
		"found", found, "wrote", want.LimitBytes, "trigger", trigger)
	v.Reporter.Restored(ctx, d)
	return Restored, nil
}

// due says whether a limit not held is to be written again now (see
// RetryAfter).
func (v *Verifier) due(n *notHeld, target cgroupswap.Target) bool {
	since := v.now().Sub(n.last) + retrySlack
	if n.drift.Attempts <= MaxRetries && since >= RetryAfter(n.drift.Attempts) {
		return true
	}
	if target.Version != 1 || since < FirstRetry {
		return false
	}
	fits, err := cgroupswap.MemswUsageFits(target, n.drift.Want)
	return err == nil && fits
}

// failed records a write (or read) that failed: the first for a limit is
// reported NotRestored, with the error (Failed); a later one, after a
// retry, StillNotRestored (NotHeld).
func (v *Verifier) failed(ctx context.Context, d Drift, prev *notHeld, err error) (Outcome, error) {
	now := v.now()
	if prev == nil {
		d.Since, d.Attempts = now, 1
		v.notHeld[d.Key()] = &notHeld{drift: d, last: now}
		v.Reporter.NotRestored(ctx, d, err)
		return Failed, err
	}
	d.Since, d.Attempts = prev.drift.Since, prev.drift.Attempts+1
	prev.drift, prev.last = d, now
	klog.FromContext(ctx).V(2).Info("Swap limit still not restored", "container", d.Container.String(), "podBudget", d.Pod,
		"found", d.Found, "want", d.Want, "attempts", d.Attempts, "err", err)
	v.Reporter.StillNotRestored(ctx, d)
	return NotHeld, nil
}

// still is a limit not held that was only read: the reporter hears of
// it when what was found changed.
func (v *Verifier) still(ctx context.Context, n *notHeld, d Drift) Outcome {
	changed := n.drift.Found != d.Found
	n.drift.Container, n.drift.Found, n.drift.Trigger = d.Container, d.Found, d.Trigger
	if changed {
		v.Reporter.StillNotRestored(ctx, n.drift)
	}
	return NotHeld
}

// forget drops a limit not held that holds again, or whose cgroup is gone
// (found is then Unreadable), and tells the reporter.
func (v *Verifier) forget(ctx context.Context, key string, found int64) {
	n, ok := v.notHeld[key]
	if !ok {
		return
	}
	delete(v.notHeld, key)
	d := n.drift
	d.Found = found
	klog.FromContext(ctx).Info("Swap limit no longer reported as not restored", "container", d.Container.String(), "podBudget", d.Pod,
		"found", found, "want", d.Want, "since", d.Since)
	v.Reporter.Cleared(ctx, d)
}

func describe(t cgroupswap.Target) string {
	if t.Pod {
		return "pod " + t.Container
	}
	return "container " + t.Container
}

// gone reports whether the target's cgroup directory is gone.
func (v *Verifier) gone(t cgroupswap.Target) bool {
	dir := filepath.Join(t.Root, t.Group)
	if t.Version == 1 {
		dir = filepath.Join(t.Root, "memory", t.Group)
	}
	_, err := os.Stat(dir)
	return errors.Is(err, fs.ErrNotExist)
}

// Summary counts a pass's outcomes.
type Summary struct {
	Held, Restored, Failed, Removed int
	// NotHeld counts the containers whose limit (or pod budget) could
	// not be restored before and still differs.
	NotHeld int
	// Busy counts the containers not checked because the hook was
	// changing records all the time the pass waited, or came to change
	// them during the pass (which then let it in).
	Busy int
}

// CheckAll checks every container that has records. The records of a
// container whose cgroup is gone are removed when they are older than
// minAge (the runtime's poststop hook normally removes them; it does not
// run when the runtime dies with the container), so records cannot pile
// up. minAge keeps a container the hook is creating right now.
func (v *Verifier) CheckAll(ctx context.Context, trigger string, minAge time.Duration) (Summary, error) {
	return v.checkAll(ctx, trigger, minAge, nil)
}

// CheckPods checks the containers of the pods (by UID) that have records,
// and the pods' budgets: after an update of a pod's own cgroup (the
// kubelet's pod-level resize, which makes systemd write every memory
// property of the pod's slice again, memory.swap.max=max among them). All
// pods are checked in one pass under one lock, so that many pods watched
// at once (many starting or resized together) cost one reading of the
// records, not one per pod, and keep the hook out once, not once per pod.
// Records of gone containers are left to CheckAll.
func (v *Verifier) CheckPods(ctx context.Context, podUIDs []string, trigger string) (Summary, error) {
	pods := make(map[string]bool, len(podUIDs))
	for _, uid := range podUIDs {
		if uid == "" {
			return Summary{}, errors.New("no pod UID")
		}
		pods[uid] = true
	}
	if len(pods) == 0 {
		return Summary{}, nil
	}
	return v.checkAll(ctx, trigger, 0, pods)
}

// checkAll is CheckAll, or CheckPods when pods is not nil.
func (v *Verifier) checkAll(ctx context.Context, trigger string, minAge time.Duration, pods map[string]bool) (Summary, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var sum Summary
	unlock, ok, err := hookstate.RLock(v.StateDir, v.lockWait())
	if err != nil {
		return sum, err
	}
	if !ok {
		ids, err := hookstate.List(v.StateDir)
		sum.Busy = len(ids)
		return sum, err
	}
	defer unlock()
	ids, err := hookstate.List(v.StateDir)
	if err != nil {
		return sum, err
	}
	// Each pod cgroup's budget, from all its containers' records at once.
	budgets, err := hookstate.PodSwapLimits(v.StateDir)
	if err != nil {
		return sum, err
	}
	budget := func(podGroup string) (*int64, error) {
		if b, ok := budgets[podGroup]; ok {
			return &b, nil
		}
		return nil, nil
	}
	podsDone := map[string]bool{}
	var errs []error
	checked := 0
	for i, id := range ids {
		if pods != nil && !v.ofPods(id, pods) {
			continue
		}
		// A hook waits for the lock (a container is starting): let it in
		// now, not after the whole pass; the rest wait for the next pass
		// (busy).
		if checked > 0 && hookstate.WriterWaiting(v.StateDir) {
			for _, rest := range ids[i:] {
				if pods == nil || v.ofPods(rest, pods) {
					sum.Busy++
				}
			}
			break
		}
		checked++
		outcome, err := v.check(ctx, id, trigger, budget, podsDone)
		switch outcome {
		case Held:
			sum.Held++
		case Restored:
			sum.Restored++
		case Failed:
			sum.Failed++
			errs = append(errs, err)
		case NotHeld:
			sum.NotHeld++
		case Gone:
			if pods != nil {
				continue
			}
			removed, err := v.removeStale(id, minAge)
			if err != nil {
				errs = append(errs, err)
			} else if removed {
				sum.Removed++
			}
		}
	}
	// A limit not held whose container's records are gone (poststop
	// removed them, or this pass did) went with them.
	if left, err := hookstate.List(v.StateDir); err == nil {
		live := make(map[string]bool, len(left))
		for _, id := range left {
			live[id] = true
		}
		for key, n := range v.notHeld {
			if !live[n.drift.Container.ID] {
				v.forget(ctx, key, Unreadable)
			}
		}
	}
	return sum, errors.Join(errs...)
}

// ofPod reports whether the container's record names the pod; an
// unreadable record is no pod's (CheckAll reports it).
func (v *Verifier) ofPods(id string, pods map[string]bool) bool {
	dir, err := hookstate.Dir(v.StateDir, id)
	if err != nil {
		return false
	}
	c, err := hookstate.ReadContainer(dir)
	return err == nil && pods[c.PodUID]
}

func (v *Verifier) removeStale(id string, minAge time.Duration) (bool, error) {
	dir, err := hookstate.Dir(v.StateDir, id)
	if err != nil {
		return false, err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		// Removed meanwhile (by the poststop hook), or not to be looked at
		// now: either way not this sweep's to remove; the next one retries.
		return false, nil //nolint:nilerr // see above: skipped, not failed
	}
	if time.Since(fi.ModTime()) < minAge {
		return false, nil
	}
	return true, hookstate.Remove(v.StateDir, id)
}

// Run checks every container every interval until ctx ends.
func (v *Verifier) Run(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		sum, err := v.CheckAll(ctx, "interval", time.Minute)
		if err != nil {
			logger.Error(err, "Verifying swap limits", "held", sum.Held, "restored", sum.Restored, "failed", sum.Failed)
		} else if sum.Restored > 0 || sum.Removed > 0 {
			logger.Info("Verified swap limits", "held", sum.Held, "restored", sum.Restored, "removedRecords", sum.Removed)
		}
	}
}
