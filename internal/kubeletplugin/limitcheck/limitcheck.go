// Package limitcheck keeps every prepared container's swap limit true after
// something else on the node rewrote it: the kubelet's
// UpdateContainerResources (an in-place resize, the CPU manager), systemd
// re-applying a unit's properties, a person writing the cgroup file. It
// reads the hook's records (package hookstate) for which containers must
// hold which limit, reads each container's cgroup back, and writes the
// recorded value again where they differ, reporting what it found and what
// it wrote. It decides nothing: the records say what the limit is.
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
	// Found is what was read (Unreadable if it could not be), Want what
	// the records say.
	Found, Want int64
	// Trigger says what made the verifier look ("interval", "update",
	// "start-up", …).
	Trigger string
}

// Reporter is told about every drift.
type Reporter interface {
	// Restored: want was written and read back.
	Restored(ctx context.Context, d Drift)
	// NotRestored: writing failed, or the limit still differs after
	// writing, or it could not be read (Found is Unreadable).
	NotRestored(ctx context.Context, d Drift, err error)
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
)

func (o Outcome) String() string {
	return [...]string{"gone", "held", "restored", "failed", "busy"}[o]
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
	// mu orders checks: an NRI event and the interval never write one
	// container's cgroup at once.
	mu sync.Mutex
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
		if o == Gone || o == Failed {
			return o, err
		}
		if o == Restored {
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
		case podOutcome == Restored:
			outcome = Restored
		}
	}
	return outcome, nil
}

// hold reads one cgroup's swap limit and writes want back if it differs.
func (v *Verifier) hold(ctx context.Context, c hookstate.Container, target cgroupswap.Target, pod bool, want swapsettings.Settings, trigger string) (Outcome, error) {
	d := Drift{Container: c, Pod: pod, Want: want.LimitBytes, Trigger: trigger}
	found, err := cgroupswap.ReadLimit(target.Version, target.Root, target.Group)
	if err != nil {
		if v.gone(target) {
			return Gone, nil
		}
		d.Found = Unreadable
		v.Reporter.NotRestored(ctx, d, err)
		return Failed, fmt.Errorf("%s: read its swap limit: %w", describe(target), err)
	}
	if found == want.LimitBytes {
		return Held, nil
	}
	d.Found = found
	if err := cgroupswap.Apply(target, want); err != nil {
		if v.gone(target) {
			return Gone, nil
		}
		v.Reporter.NotRestored(ctx, d, err)
		return Failed, err
	}
	after, err := cgroupswap.ReadLimit(target.Version, target.Root, target.Group)
	if err == nil && after != want.LimitBytes {
		err = fmt.Errorf("wrote %d but read back %d", want.LimitBytes, after)
	}
	if err != nil {
		v.Reporter.NotRestored(ctx, d, err)
		return Failed, fmt.Errorf("%s: %w", describe(target), err)
	}
	klog.FromContext(ctx).Info("Swap limit restored", "container", c.String(), "containerID", c.ID, "podBudget", pod, "cgroup", target.Group,
		"found", found, "wrote", want.LimitBytes, "trigger", trigger)
	v.Reporter.Restored(ctx, d)
	return Restored, nil
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
	// Busy counts the containers not checked because the hook was
	// changing records all the time the pass waited.
	Busy int
}

// CheckAll checks every container that has records. The records of a
// container whose cgroup is gone are removed when they are older than
// minAge (the runtime's poststop hook normally removes them; it does not
// run when the runtime dies with the container), so records cannot pile
// up. minAge keeps a container the hook is creating right now.
func (v *Verifier) CheckAll(ctx context.Context, trigger string, minAge time.Duration) (Summary, error) {
	return v.checkAll(ctx, trigger, minAge, "")
}

// CheckPod checks the containers of one pod that have records, and the
// pod's budget: after an update of the pod's own cgroup (the kubelet's
// pod-level resize, which makes systemd write every memory property of the
// pod's slice again, memory.swap.max=max among them). Records of gone
// containers are left to CheckAll.
func (v *Verifier) CheckPod(ctx context.Context, podUID, trigger string) (Summary, error) {
	if podUID == "" {
		return Summary{}, errors.New("no pod UID")
	}
	return v.checkAll(ctx, trigger, 0, podUID)
}

// checkAll is CheckAll, or CheckPod when podUID is set.
func (v *Verifier) checkAll(ctx context.Context, trigger string, minAge time.Duration, podUID string) (Summary, error) {
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
	for _, id := range ids {
		if podUID != "" && !v.ofPod(id, podUID) {
			continue
		}
		outcome, err := v.check(ctx, id, trigger, budget, podsDone)
		switch outcome {
		case Held:
			sum.Held++
		case Restored:
			sum.Restored++
		case Failed:
			sum.Failed++
			errs = append(errs, err)
		case Gone:
			if podUID != "" {
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
	return sum, errors.Join(errs...)
}

// ofPod reports whether the container's record names the pod; an
// unreadable record is no pod's (CheckAll reports it).
func (v *Verifier) ofPod(id, podUID string) bool {
	dir, err := hookstate.Dir(v.StateDir, id)
	if err != nil {
		return false
	}
	c, err := hookstate.ReadContainer(dir)
	return err == nil && c.PodUID == podUID
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
