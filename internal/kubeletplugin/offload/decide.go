// Package offload is the kubelet plugin's per-node loop that moves the
// cold memory of opted-in containers (SwapConfig offload) into the swap
// their claims hold, ahead of need, within each claim's pressure budget, in
// the spirit of Meta's TMO/Senpai: every interval it reads a container's
// memory pressure stall information (PSI "some" total) and, while the
// stall over the interval is within the budget, asks the kernel to reclaim
// a step of the container's memory (cgroup v2 memory.reclaim, anonymous
// memory where the kernel allows it); the step shrinks as the stall nears
// the loop's target, half the budget, is nothing from there to the budget,
// and stops above it or when the container's swap nears the claim.
//
// decide.go is the control law, pure: Decide takes a container's state and
// this interval's reading and says how much to reclaim. cgroup.go reads and
// writes a container's cgroup files; loop.go finds the containers (the
// hook's records of prepared claims) and runs the passes.
package offload

import (
	"fmt"
	"time"
)

// Params are the loop's node-wide knobs (the plugin's --offload-* flags).
type Params struct {
	// MaxStepPercent is the largest step, as a percentage of the
	// container's memory.current, taken when its stall is 0; the step
	// falls linearly to 0 as the stall reaches the target (katalyst's TMO
	// PSI policy; Senpai probes with 1 % too).
	MaxStepPercent int64
	// TargetPercent of the claim's budget is the stall at which the step
	// reaches 0. A step's pages that the container uses again come back
	// an interval or more later, as stall: aiming below the budget leaves
	// it room for them (measured: aiming at the budget itself, a 1 %
	// budget saw 1.1-1.85 %).
	TargetPercent int64
	// MinStepBytes: a smaller step is not worth a write.
	MinStepBytes int64
	// MaxStepBytes bounds one write, and so the time one container's
	// reclaim takes.
	MaxStepBytes int64
	// SwapHeadroomPercent of a container's offload limit is left to the
	// kernel's own reclaim at the container's memory limit: the loop
	// stops offloading once the container's swap reaches the rest.
	SwapHeadroomPercent int64
	// QuietIntervals: a pressure episode ends (and the next one is told
	// again) after this many intervals within the budget.
	QuietIntervals int
	// ExhaustedIntervals: after a write the kernel could not satisfy
	// (nothing cold left to reclaim), the container rests this many
	// intervals, so that the loop does not scan it in vain each time.
	ExhaustedIntervals int
	// RefaultPercent: when at least this share of a step is faulted back
	// in over the next interval, the container rests RefaultRestIntervals
	// (its cold memory is moved; what is left is in use).
	RefaultPercent       int64
	RefaultRestIntervals int
}

// DefaultParams are the loop's defaults.
func DefaultParams() Params {
	return Params{MaxStepPercent: 1, TargetPercent: 50, MinStepBytes: 256 << 10, MaxStepBytes: 64 << 20, SwapHeadroomPercent: 5,
		QuietIntervals: 10, ExhaustedIntervals: 5, RefaultPercent: 50, RefaultRestIntervals: 10}
}

// Validate checks the knobs.
func (p Params) Validate() error {
	switch {
	case p.MaxStepPercent < 1 || p.MaxStepPercent > 100:
		return fmt.Errorf("max step %d%% must be 1 to 100", p.MaxStepPercent)
	case p.TargetPercent < 1 || p.TargetPercent > 100:
		return fmt.Errorf("target %d%% of the budget must be 1 to 100", p.TargetPercent)
	case p.MinStepBytes < pageSize || p.MaxStepBytes < p.MinStepBytes:
		return fmt.Errorf("steps %d..%d bytes must be at least a page and in order", p.MinStepBytes, p.MaxStepBytes)
	case p.SwapHeadroomPercent < 0 || p.SwapHeadroomPercent >= 100:
		return fmt.Errorf("swap headroom %d%% must be 0 to 99", p.SwapHeadroomPercent)
	case p.RefaultPercent < 1 || p.RefaultPercent > 100 || p.RefaultRestIntervals < 0:
		return fmt.Errorf("refault guard %d%% must be 1 to 100 and its rest %d intervals not negative", p.RefaultPercent, p.RefaultRestIntervals)
	case p.QuietIntervals < 1 || p.ExhaustedIntervals < 0:
		return fmt.Errorf("quiet intervals %d must be positive, exhausted intervals %d not negative", p.QuietIntervals, p.ExhaustedIntervals)
	}
	return nil
}

// pageSize aligns steps (memory.reclaim rounds down to pages anyway).
const pageSize = 4096

// Reading is one interval's reading of a container's cgroup.
type Reading struct {
	// At is when it was read (monotonic).
	At time.Time
	// StallTotal is memory.pressure's "some" total: microseconds in which
	// at least one of the container's tasks waited for memory.
	StallTotal uint64
	// Current is memory.current, SwapCurrent memory.swap.current.
	Current, SwapCurrent int64
	// RefaultedPages is memory.stat's workingset_refault_anon: anonymous
	// pages faulted back in soon after they were reclaimed (-1: not known).
	RefaultedPages int64
}

// Limits are what bound a container's offload, from its records.
type Limits struct {
	// BudgetPPM is the stall budget in parts per million of wall time
	// (microseconds per second): the lowest of the container's offload
	// claims.
	BudgetPPM int64
	// SwapBytes is the swap of the container's offload claims: the loop
	// never takes the container's swap above it (less the headroom).
	SwapBytes int64
	// HighBytes is the container's memory.swap.high (-1: none, "max"):
	// above it the kernel throttles the container, so the loop stops
	// below.
	HighBytes int64
}

// Reason says why a decision reclaims or not.
type Reason string

const (
	// ReasonOffloading: a step is reclaimed.
	ReasonOffloading Reason = "Offloading"
	// ReasonSampling: the first reading of a container (no interval to
	// measure the stall over yet), or one after a gap.
	ReasonSampling Reason = "Sampling"
	// ReasonOverBudget: the stall is above the budget; the loop pauses.
	ReasonOverBudget Reason = "OverBudget"
	// ReasonSwapLimit: the container's swap is at the loop's ceiling.
	ReasonSwapLimit Reason = "AtSwapLimit"
	// ReasonIdle: the step is too small to be worth a write (the stall
	// is at or near the target, or the container is small).
	ReasonIdle Reason = "Idle"
	// ReasonExhausted: the kernel could not reclaim the last step in
	// full; the container rests a few intervals.
	ReasonExhausted Reason = "Exhausted"
	// ReasonRefaulting: most of the last step came back within an
	// interval (the step took pages the container uses: its cold memory
	// is moved); the container rests RefaultRestIntervals.
	ReasonRefaulting Reason = "Refaulting"
)

// Decision is what Decide says for one interval.
type Decision struct {
	Reason Reason
	// ReclaimBytes is the step to write to memory.reclaim (0: none).
	ReclaimBytes int64
	// StallPPM is the stall measured over the interval, in parts per
	// million of wall time; -1 when there was no interval to measure.
	StallPPM int64
	// NewEpisode: the stall went above the budget for the first time
	// since the last episode ended: tell the pod (once per episode).
	NewEpisode bool
}

// State is what the loop keeps of a container between intervals.
type State struct {
	last    Reading
	sampled bool
	// episode: a pressure episode is open (told); quiet counts the
	// intervals within the budget since the stall was last above it.
	episode bool
	quiet   int
	// rest counts down the intervals a container rests after an
	// exhausted reclaim or a step that came back, restReason says which.
	rest       int
	restReason Reason
	// stepped is the step written since the last decision (Reclaimed;
	// 0: none).
	stepped int64
}

// InEpisode reports whether a pressure episode is open.
func (s *State) InEpisode() bool { return s.episode }

// maxGapFactor: a reading more than this many intervals after the last
// one (the loop was stopped or starved) measures no interval: the stall
// over it says little about now.
const maxGapFactor = 4

// Decide is the control law for one container and one interval: interval
// is the loop's, r this interval's reading. It updates st.
func Decide(st *State, r Reading, l Limits, interval time.Duration, p Params) Decision {
	prev, sampled := st.last, st.sampled
	st.last, st.sampled = r, true
	elapsed := r.At.Sub(prev.At)
	if !sampled || elapsed <= 0 || elapsed > maxGapFactor*interval || r.StallTotal < prev.StallTotal {
		return Decision{Reason: ReasonSampling, StallPPM: -1}
	}
	stall := int64(r.StallTotal-prev.StallTotal) * 1_000_000 / elapsed.Microseconds()
	stall = min(stall, 1_000_000)
	d := Decision{StallPPM: stall}
	if stall > l.BudgetPPM {
		d.Reason = ReasonOverBudget
		d.NewEpisode = !st.episode
		st.episode, st.quiet = true, 0
		return d
	}
	if st.episode {
		st.quiet++
		if st.quiet >= p.QuietIntervals {
			st.episode, st.quiet = false, 0
		}
	}
	stepped := st.stepped
	st.stepped = 0
	if st.rest > 0 {
		st.rest--
		d.Reason = st.restReason
		return d
	}
	// The refault guard: when most of the last step was faulted back in
	// over the interval, the step took pages in use, which cost the
	// container stall (and the node CPU, compressing and decompressing
	// them) for nothing; a stall within the budget does not show it when
	// the pages come back from zswap fast (katalyst's refault policy).
	if stepped > 0 && r.RefaultedPages >= 0 && prev.RefaultedPages >= 0 && r.RefaultedPages >= prev.RefaultedPages {
		if back := (r.RefaultedPages - prev.RefaultedPages) * pageSize; back*100 >= stepped*p.RefaultPercent {
			st.rest, st.restReason = p.RefaultRestIntervals, ReasonRefaulting
			d.Reason = ReasonRefaulting
			return d
		}
	}
	ceiling := l.SwapBytes / 100 * (100 - p.SwapHeadroomPercent)
	if l.HighBytes >= 0 && l.HighBytes < ceiling {
		ceiling = l.HighBytes
	}
	room := ceiling - r.SwapCurrent
	if room < p.MinStepBytes {
		d.Reason = ReasonSwapLimit
		return d
	}
	// The step: MaxStepPercent of memory.current at no stall, falling
	// linearly to nothing at the target (and nothing from there to the
	// budget).
	step := r.Current / 100 * p.MaxStepPercent
	if target := l.BudgetPPM * p.TargetPercent / 100; stall >= target {
		step = 0
	} else {
		step = int64(float64(step) * float64(target-stall) / float64(target))
	}
	step = min(step, p.MaxStepBytes, room)
	step -= step % pageSize
	if step < p.MinStepBytes {
		d.Reason = ReasonIdle
		return d
	}
	d.Reason, d.ReclaimBytes = ReasonOffloading, step
	return d
}

// Reclaimed tells the state that the kernel reclaimed the decision's whole
// step; the next decision holds it against the pages faulted back in
// meanwhile. A step deferred by the pass bound or not written is not one.
func (s *State) Reclaimed(bytes int64) { s.stepped = bytes }

// Exhausted tells the state that the kernel could not reclaim the whole
// step (memory.reclaim returned EAGAIN): the container rests.
func (s *State) Exhausted(p Params) { s.rest, s.restReason = p.ExhaustedIntervals, ReasonExhausted }
