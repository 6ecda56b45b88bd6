// Package pressure decides when the node's swap device must be tainted
// because the node is under memory pressure or its swap is nearly full.
//
// Source reads the host's pressure stall information (PSI) and swap usage
// into a Sample; a Monitor turns a sequence of samples into taints that
// are set and cleared with hysteresis (separate set and clear thresholds)
// and dwell times, so that a noisy signal does not make the published
// device flap. The Monitor never reads a clock: the caller passes the
// time of every observation.
package pressure

import (
	"sync"
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// Transition is a taint that an observation set or cleared.
type Transition struct {
	// Key is TaintMemoryPressure or TaintSwapFull.
	Key string
	// Set is true when the taint was set, false when it was cleared.
	Set bool
	// Value is the figure measured by this observation, as a valid
	// device taint value ("some-42.1", "full-12.0", "used-92"; see
	// Taint.Value). When Set, it is the value the taint keeps.
	Value string
	// Reason is a sentence for an event: what was measured, against which
	// threshold, and for how long.
	Reason string
}

// Taint is a taint that is currently set.
type Taint struct {
	// Key is TaintMemoryPressure or TaintSwapFull.
	Key string
	// Value is the figure measured when the taint was set: "some-N" or
	// "full-N" (avg10 stall percentage, one decimal) for memory pressure,
	// "used-N" (whole percent of swap in use) for swap full. It does not
	// change while the taint stays set.
	Value string
	// Since is the time of the observation that set the taint.
	Since time.Time
}

// Figures are the numbers of the last observation, for metrics.
type Figures struct {
	// Time is the time of the last observation (zero before the first).
	Time time.Time
	// PSIAvailable reports whether the last sample had any PSI source.
	PSIAvailable bool
	// Node is the node's /proc/pressure/memory.
	Node SourceFigures
	// Kubepods is the kubepods cgroup's memory.pressure.
	Kubepods SourceFigures
	// SwapUsedFraction is the fraction (0..1) of swap in use, 0 without
	// swap.
	SwapUsedFraction float64
}

// SourceFigures are the avg10 stall percentages of one PSI source.
type SourceFigures struct {
	// Present reports whether the source was read; the averages are 0
	// otherwise.
	Present bool
	// SomeAvg10 is the "some" stall percentage over 10 seconds.
	SomeAvg10 float64
	// FullAvg10 is the "full" stall percentage over 10 seconds.
	FullAvg10 float64
}

// Monitor tracks both conditions across observations. Create it with
// NewMonitor; it is safe for concurrent use.
type Monitor struct {
	cfg Config

	mu      sync.Mutex
	conds   [2]condition // in key order: memory pressure, swap full
	figures Figures
}

// Indexes of Monitor.conds.
const (
	condPressure = iota
	condSwapFull
)

// NewMonitor returns a Monitor with no taint set, or the error of
// cfg.Validate.
func NewMonitor(cfg Config) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Monitor{cfg: cfg}
	m.conds[condPressure].key = v1alpha1.TaintMemoryPressure
	m.conds[condSwapFull].key = v1alpha1.TaintSwapFull
	return m, nil
}

// Observe feeds the sample taken at now to both conditions and returns the
// taints it set or cleared, sorted by key (usually none). The PSI
// sources are s.Memory and s.Kubepods (s.PSIAvailable is not consulted);
// a sample with neither counts as low pressure, so a pressure taint set
// earlier is cleared after ClearAfter. A sample without swap never counts
// as full.
//
// Dwell times are measured between observations: a condition is
// "continuously" high from the first of a run of high observations to
// the current one, whatever the interval between them. Observations
// should come in time order; one earlier than the start of the pending
// run restarts it.
func (m *Monitor) Observe(now time.Time, s Sample) []Transition {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.figures = figuresOf(now, s)
	evals := [2]evaluation{
		condPressure: evaluatePressure(m.cfg, s),
		condSwapFull: evaluateSwap(m.cfg, s),
	}
	var out []Transition
	for i := range m.conds {
		c := &m.conds[i]
		held, toggled := c.step(now, evals[i].level, m.cfg.SetAfter, m.cfg.ClearAfter)
		if !toggled {
			continue
		}
		c.value = ""
		if c.active {
			c.value = evals[i].value
		}
		out = append(out, Transition{
			Key:    c.key,
			Set:    c.active,
			Value:  evals[i].value,
			Reason: evals[i].reason(c.active, held),
		})
	}
	return out
}

// Seed sets taints that an earlier instance of the plugin published, so
// that a restart does not drop them: each keeps its value and Since and
// clears only by the clear rule (low for ClearAfter). Keys other than
// TaintMemoryPressure and TaintSwapFull, and values that are not valid
// taint values, are ignored; a condition already set keeps its own value.
// It returns the keys it set. Call it before the first Observe.
func (m *Monitor) Seed(taints []Taint) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var seeded []string
	for _, t := range taints {
		for i := range m.conds {
			c := &m.conds[i]
			if c.key != t.Key || c.active || !validTaintValue(t.Value) {
				continue
			}
			c.active, c.value, c.since, c.pending = true, t.Value, t.Since, false
			seeded = append(seeded, c.key)
		}
	}
	return seeded
}

// Active returns the taints that are set, sorted by key.
func (m *Monitor) Active() []Taint {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Taint
	for _, c := range m.conds {
		if c.active {
			out = append(out, Taint{Key: c.key, Value: c.value, Since: c.since})
		}
	}
	return out
}

// Figures returns the numbers of the last observation.
func (m *Monitor) Figures() Figures {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.figures
}

// figuresOf extracts the metrics figures of s.
func figuresOf(now time.Time, s Sample) Figures {
	return Figures{
		Time:             now,
		PSIAvailable:     s.Memory != nil || s.Kubepods != nil,
		Node:             sourceFigures(s.Memory),
		Kubepods:         sourceFigures(s.Kubepods),
		SwapUsedFraction: swapFraction(s.SwapTotal, s.SwapUsed),
	}
}

// sourceFigures returns the avg10 figures of psi, which may be nil.
func sourceFigures(psi *PSI) SourceFigures {
	if psi == nil {
		return SourceFigures{}
	}
	return SourceFigures{Present: true, SomeAvg10: psi.Some.Avg10, FullAvg10: psi.Full.Avg10}
}
