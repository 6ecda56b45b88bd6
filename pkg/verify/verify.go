// Package verify keeps every prepared container's swap limit true after
// something else on the node rewrote it: the kubelet's
// UpdateContainerResources (an in-place resize, the CPU manager), systemd
// re-applying a unit's properties, a person writing the cgroup file. It
// reads the hook's records (package hookstate) for which containers must
// hold which limit, reads each container's cgroup back, and writes the
// recorded value again where they differ, reporting what it found and what
// it wrote. It decides nothing: the records say what the limit is.
package verify

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

	"github.com/dra-driver-swap/dra-driver-swap/pkg/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/pkg/hookstate"
)

// Unreadable is the found value of a limit that could not be read.
const Unreadable = math.MinInt64

// Reporter is told about every drift.
type Reporter interface {
	// Restored: the container's limit read found bytes instead of the
	// recorded want; want was written and read back. trigger says what
	// made the verifier look ("interval", "update", "start-up", …).
	Restored(ctx context.Context, c hookstate.Container, found, want int64, trigger string)
	// NotRestored: the limit differs and writing it failed, or it still
	// differs after writing, or it could not be read (found is
	// Unreadable).
	NotRestored(ctx context.Context, c hookstate.Container, found, want int64, trigger string, err error)
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
)

func (o Outcome) String() string {
	return [...]string{"gone", "held", "restored", "failed"}[o]
}

// Verifier checks containers against the hook's records.
type Verifier struct {
	// StateDir is the hook state directory, CgroupRoot the cgroup mount
	// root (both as this process sees them).
	StateDir, CgroupRoot string
	Reporter             Reporter
	// mu orders checks: an NRI event and the interval never write one
	// container's cgroup at once.
	mu sync.Mutex
}

// Check compares one container's limit with its records and restores it.
// A container without records is not the driver's and is Held.
func (v *Verifier) Check(ctx context.Context, containerID, trigger string) (Outcome, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.check(ctx, containerID, trigger)
}

func (v *Verifier) check(ctx context.Context, containerID, trigger string) (Outcome, error) {
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
	want, claims, err := hookstate.Sum(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Gone, nil
	}
	if err != nil {
		return Failed, fmt.Errorf("container %s: %w", c, err)
	}
	if claims == 0 {
		return Held, nil // the hook wrote the container record, not yet a share
	}
	found, err := cgroupswap.ReadLimit(c.CgroupVersion, v.CgroupRoot, c.CgroupGroup)
	if err != nil {
		if v.gone(c) {
			return Gone, nil
		}
		v.Reporter.NotRestored(ctx, c, Unreadable, want.SwapLimit, trigger, err)
		return Failed, fmt.Errorf("container %s: read its swap limit: %w", c, err)
	}
	if found == want.SwapLimit {
		return Held, nil
	}
	target := c.Target(v.CgroupRoot)
	if err := cgroupswap.Apply(target, want); err != nil {
		if v.gone(c) {
			return Gone, nil
		}
		v.Reporter.NotRestored(ctx, c, found, want.SwapLimit, trigger, err)
		return Failed, err
	}
	after, err := cgroupswap.ReadLimit(c.CgroupVersion, v.CgroupRoot, c.CgroupGroup)
	if err == nil && after != want.SwapLimit {
		err = fmt.Errorf("wrote %d but read back %d", want.SwapLimit, after)
	}
	if err != nil {
		v.Reporter.NotRestored(ctx, c, found, want.SwapLimit, trigger, err)
		return Failed, fmt.Errorf("container %s: %w", c, err)
	}
	klog.FromContext(ctx).Info("Swap limit restored", "container", c.String(), "containerID", c.ID,
		"found", found, "wrote", want.SwapLimit, "trigger", trigger)
	v.Reporter.Restored(ctx, c, found, want.SwapLimit, trigger)
	return Restored, nil
}

// gone reports whether the container's cgroup directory is gone.
func (v *Verifier) gone(c hookstate.Container) bool {
	dir := filepath.Join(v.CgroupRoot, c.CgroupGroup)
	if c.CgroupVersion == 1 {
		dir = filepath.Join(v.CgroupRoot, "memory", c.CgroupGroup)
	}
	_, err := os.Stat(dir)
	return errors.Is(err, fs.ErrNotExist)
}

// Summary counts a pass's outcomes.
type Summary struct {
	Held, Restored, Failed, Removed int
}

// CheckAll checks every container that has records. The records of a
// container whose cgroup is gone are removed when they are older than
// minAge (the runtime's poststop hook normally removes them; it does not
// run when the runtime dies with the container), so records cannot pile
// up. minAge keeps a container the hook is creating right now.
func (v *Verifier) CheckAll(ctx context.Context, trigger string, minAge time.Duration) (Summary, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var sum Summary
	ids, err := hookstate.List(v.StateDir)
	if err != nil {
		return sum, err
	}
	var errs []error
	for _, id := range ids {
		outcome, err := v.check(ctx, id, trigger)
		switch outcome {
		case Held:
			sum.Held++
		case Restored:
			sum.Restored++
		case Failed:
			sum.Failed++
			errs = append(errs, err)
		case Gone:
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

func (v *Verifier) removeStale(id string, minAge time.Duration) (bool, error) {
	dir, err := hookstate.Dir(v.StateDir, id)
	if err != nil {
		return false, err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return false, nil
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
