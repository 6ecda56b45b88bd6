package pressure

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the thresholds and dwell times of the two conditions.
//
// Each condition is high at or above its set threshold and low below its
// clear threshold; in between it is neither, and any pending transition
// restarts. A taint is set once its condition has been high continuously
// for SetAfter, and cleared once it has been low continuously for
// ClearAfter.
type Config struct {
	// PressureSomeThreshold is the "some" avg10 stall percentage at or
	// above which memory pressure is high.
	PressureSomeThreshold float64
	// PressureFullThreshold is the "full" avg10 stall percentage at or
	// above which memory pressure is high.
	PressureFullThreshold float64
	// PressureSomeClear is the "some" avg10 stall percentage below which
	// (together with PressureFullClear, on every source) memory pressure
	// is low.
	PressureSomeClear float64
	// PressureFullClear is the "full" avg10 stall percentage below which
	// (together with PressureSomeClear, on every source) memory pressure
	// is low.
	PressureFullClear float64
	// SwapFullThreshold is the fraction (0..1] of swap in use at or above
	// which swap is full.
	SwapFullThreshold float64
	// SwapFullClear is the fraction of swap in use below which swap is no
	// longer full.
	SwapFullClear float64
	// SetAfter is how long a condition must stay high before its taint
	// is set (0 sets it on the first high observation).
	SetAfter time.Duration
	// ClearAfter is how long a condition must stay low before its taint
	// is cleared (0 clears it on the first low observation).
	ClearAfter time.Duration
}

// DefaultConfig returns the defaults:
//
//   - PressureSomeThreshold 30%, PressureSomeClear 15%: "some" counts time
//     in which any one task waited for memory, so a single process paging
//     its cold heap back in shows up here while the rest of the node
//     works; it needs a high bar. 30% of every 10 s means the node's
//     working set no longer fits and reclaim is on the critical path.
//   - PressureFullThreshold 10%, PressureFullClear 5%: "full" is time in
//     which every runnable task was stalled, i.e. wall time lost for the
//     whole node (or the whole kubepods cgroup). One second in ten is
//     thrashing, yet far below systemd-oomd's default kill point (60%
//     for 30 s), so new swap users are kept away well before anything is
//     killed. Both clear thresholds are half of the set ones, a band wide
//     enough that the avg10 jitter of a steady load does not cross it.
//   - SwapFullThreshold 0.9, SwapFullClear 0.8: KEP-5359 leaves swap
//     overcommitted (the sum of container swap limits may exceed the
//     device) and proposes a HighSwapUtilization node condition as the
//     signal; 90% is also systemd-oomd's SwapUsedLimit default. The 10%
//     left is headroom for claims already running; clearing at 80% keeps
//     ordinary churn from toggling the taint.
//   - SetAfter 30 s: avg10 is already a 10 s moving average; three of its
//     windows filter a burst (a link step, a cache warm-up) while still
//     reacting long before the kubelet's memory.available eviction, which
//     acts only once free memory is nearly gone (hard threshold 100Mi
//     by default).
//   - ClearAfter 5 min: the kubelet's eviction-pressure-transition-period
//     (default 5m0s) keeps the MemoryPressure node condition set for that
//     long after the signal recovers, to avoid oscillation. Using the same
//     period keeps the device taint and the node condition in step and
//     gives the scheduler's placements time to show their effect before
//     the device is offered again.
func DefaultConfig() Config {
	return Config{
		PressureSomeThreshold: 30,
		PressureFullThreshold: 10,
		PressureSomeClear:     15,
		PressureFullClear:     5,
		SwapFullThreshold:     0.9,
		SwapFullClear:         0.8,
		SetAfter:              30 * time.Second,
		ClearAfter:            5 * time.Minute,
	}
}

// Validate reports every field that is out of range: stall thresholds
// must satisfy 0 < clear < set <= 100, swap fractions 0 < clear < set <=
// 1, and durations must not be negative. A clear threshold of 0 is
// refused because nothing is below it: the taint would never clear.
func (c Config) Validate() error {
	var errs []error
	check := func(setName string, set float64, clearName string, clr, limit float64) {
		if !(set > 0 && set <= limit) {
			errs = append(errs, fmt.Errorf("%s %v is not within (0, %v]", setName, set, limit))
		}
		if !(clr > 0 && clr < set) {
			errs = append(errs, fmt.Errorf("%s %v must be above 0 and below %s %v", clearName, clr, setName, set))
		}
	}
	check("PressureSomeThreshold", c.PressureSomeThreshold, "PressureSomeClear", c.PressureSomeClear, 100)
	check("PressureFullThreshold", c.PressureFullThreshold, "PressureFullClear", c.PressureFullClear, 100)
	check("SwapFullThreshold", c.SwapFullThreshold, "SwapFullClear", c.SwapFullClear, 1)
	if c.SetAfter < 0 {
		errs = append(errs, fmt.Errorf("SetAfter %v is negative", c.SetAfter))
	}
	if c.ClearAfter < 0 {
		errs = append(errs, fmt.Errorf("ClearAfter %v is negative", c.ClearAfter))
	}
	return errors.Join(errs...)
}
