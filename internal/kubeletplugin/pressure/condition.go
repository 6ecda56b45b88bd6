package pressure

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// level is where an observation puts a condition relative to its
// thresholds.
type level int

const (
	// levelBand is between the clear and set thresholds: neither high nor
	// low. It restarts any pending transition.
	levelBand level = iota
	// levelLow is below the clear threshold(s).
	levelLow
	// levelHigh is at or above a set threshold.
	levelHigh
)

// condition is the dwell state of one taint.
type condition struct {
	key    string
	active bool
	value  string    // taint value, while active
	since  time.Time // when the taint was set, while active

	// pending reports whether the observations since pendingSince all
	// pointed towards toggling: high while inactive, low while active.
	pending      bool
	pendingSince time.Time
}

// step advances c by one observation at now. It returns how long the
// condition has been continuously pointing towards the toggle, and
// whether the taint toggled.
func (c *condition) step(now time.Time, l level, setAfter, clearAfter time.Duration) (time.Duration, bool) {
	towards, dwell := l == levelHigh, setAfter
	if c.active {
		towards, dwell = l == levelLow, clearAfter
	}
	if !towards {
		c.pending = false
		return 0, false
	}
	if !c.pending || now.Before(c.pendingSince) {
		c.pending, c.pendingSince = true, now
	}
	held := now.Sub(c.pendingSince)
	if held < dwell {
		return held, false
	}
	c.active, c.pending = !c.active, false
	c.since = time.Time{}
	if c.active {
		c.since = now
	}
	return held, true
}

// evaluation is what one sample says about one condition.
type evaluation struct {
	level level
	// value is the measured figure as a taint value.
	value string
	// reason returns the event sentence for a transition that set (or
	// cleared) the taint after the condition held for held.
	reason func(set bool, held time.Duration) string
}

// psiSource is a named PSI reading.
type psiSource struct {
	name string
	psi  *PSI
}

// evaluatePressure judges the memory pressure condition: high when some
// source reaches a set threshold, low when every source is below both
// clear thresholds. A sample without PSI is low.
func evaluatePressure(cfg Config, s Sample) evaluation {
	var sources []psiSource
	for _, src := range []psiSource{{"node", s.Memory}, {"kubepods cgroup", s.Kubepods}} {
		if src.psi != nil {
			sources = append(sources, src)
		}
	}
	if len(sources) == 0 {
		why := "no PSI source"
		if s.PSIProblem != "" {
			why = s.PSIProblem
		}
		return evaluation{
			level: levelLow,
			value: "psi-unavailable",
			reason: func(_ bool, held time.Duration) string { // never high, so always a clear
				return fmt.Sprintf("Memory pressure stall information is unavailable (%s); treated as no pressure for %v.", why, held)
			},
		}
	}
	// The largest "some" and "full" averages and where they were seen.
	some, full := sources[0], sources[0]
	for _, src := range sources[1:] {
		if src.psi.Some.Avg10 > some.psi.Some.Avg10 {
			some = src
		}
		if src.psi.Full.Avg10 > full.psi.Full.Avg10 {
			full = src
		}
	}
	someAvg, fullAvg := some.psi.Some.Avg10, full.psi.Full.Avg10

	lvl := levelBand
	switch {
	case someAvg >= cfg.PressureSomeThreshold || fullAvg >= cfg.PressureFullThreshold:
		lvl = levelHigh
	case someAvg < cfg.PressureSomeClear && fullAvg < cfg.PressureFullClear:
		lvl = levelLow
	}
	// The value quotes the figure closer to (or further past) its set
	// threshold; when the condition is high that is one that reached it.
	value := pressureValue("some", someAvg)
	if fullAvg/cfg.PressureFullThreshold > someAvg/cfg.PressureSomeThreshold {
		value = pressureValue("full", fullAvg)
	}
	measured := fmt.Sprintf("some avg10 %s%% (%s), full avg10 %s%% (%s)",
		formatNumber(someAvg), some.name, formatNumber(fullAvg), full.name)
	return evaluation{
		level: lvl,
		value: value,
		reason: func(set bool, held time.Duration) string {
			if set {
				return fmt.Sprintf("Memory pressure stayed at or above a set threshold (some avg10 %s%% or full avg10 %s%%) for %v: %s.",
					formatNumber(cfg.PressureSomeThreshold), formatNumber(cfg.PressureFullThreshold), held, measured)
			}
			return fmt.Sprintf("Memory pressure stayed below the clear thresholds (some avg10 %s%% and full avg10 %s%%) on every source for %v: %s.",
				formatNumber(cfg.PressureSomeClear), formatNumber(cfg.PressureFullClear), held, measured)
		},
	}
}

// evaluateSwap judges the swap full condition: high when the used
// fraction reaches SwapFullThreshold, low below SwapFullClear. A node
// without swap is low.
func evaluateSwap(cfg Config, s Sample) evaluation {
	if s.SwapTotal <= 0 {
		return evaluation{
			level: levelLow,
			value: "no-swap",
			reason: func(_ bool, held time.Duration) string { // never high, so always a clear
				return fmt.Sprintf("The node has no swap (SwapTotal is 0); treated as not full for %v.", held)
			},
		}
	}
	used := min(max(s.SwapUsed, 0), s.SwapTotal)
	frac := swapFraction(s.SwapTotal, used)
	lvl := levelBand
	switch {
	case frac >= cfg.SwapFullThreshold:
		lvl = levelHigh
	case frac < cfg.SwapFullClear:
		lvl = levelLow
	}
	pct := usedPercent(s.SwapTotal, used)
	measured := fmt.Sprintf("%d%% used (%s of %s)", pct, formatBytes(used), formatBytes(s.SwapTotal))
	return evaluation{
		level: lvl,
		value: swapValue(pct),
		reason: func(set bool, held time.Duration) string {
			if set {
				return fmt.Sprintf("Swap usage stayed at or above %s%% for %v: %s.",
					formatNumber(100*cfg.SwapFullThreshold), held, measured)
			}
			return fmt.Sprintf("Swap usage stayed below %s%% for %v: %s.",
				formatNumber(100*cfg.SwapFullClear), held, measured)
		},
	}
}

// swapFraction returns used/total clamped to 0..1, 0 without swap.
func swapFraction(total, used int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64(min(max(used, 0), total)) / float64(total)
}

// usedPercent returns 100*used/total rounded down, for 0 <= used <=
// total and total > 0, without overflowing.
func usedPercent(total, used int64) uint64 {
	hi, lo := bits.Mul64(uint64(used), 100)
	q, _ := bits.Div64(hi, lo, uint64(total)) // hi < total as used <= total
	return q
}

// formatNumber formats a threshold or measurement with at most two
// decimals and no trailing zeros ("30", "12.5", "0.25").
func formatNumber(v float64) string {
	return fmt.Sprint(math.Round(v*100) / 100)
}

// formatBytes formats a byte count in binary units with one decimal.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[i])
}
