package pressure

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// t0 is the time of the first observation of every sequence.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
	// swapTotal is divisible by 100, so that whole percentages are exact.
	swapTotal = 8000 * mib
)

// testConfig has the default thresholds with a shorter ClearAfter, so that
// the sequences stay short.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.SetAfter = 30 * time.Second
	cfg.ClearAfter = 60 * time.Second
	return cfg
}

// psi returns a PSI reading with the given avg10 figures.
func psi(some, full float64) *PSI {
	return &PSI{Some: PSILine{Avg10: some}, Full: PSILine{Avg10: full}}
}

// node returns a sample with the node's avg10 figures and 10% of the
// swap in use.
func node(some, full float64) Sample {
	return Sample{Memory: psi(some, full), SwapTotal: swapTotal, SwapUsed: swapTotal / 10, PSIAvailable: true}
}

// nodeAndKubepods returns a sample with both PSI sources.
func nodeAndKubepods(nodeSome, nodeFull, podsSome, podsFull float64) Sample {
	s := node(nodeSome, nodeFull)
	s.Kubepods = psi(podsSome, podsFull)
	return s
}

// swapUsed returns a sample without memory pressure and with the given
// percentage of the swap in use.
func swapUsed(percent int64) Sample {
	s := node(0, 0)
	s.SwapUsed = swapTotal / 100 * percent
	return s
}

// noPSI returns a sample of a kernel without PSI and with the given
// percentage of the swap in use.
func noPSI(percent int64) Sample {
	return Sample{
		SwapTotal:  swapTotal,
		SwapUsed:   swapTotal / 100 * percent,
		PSIProblem: "/proc/pressure/memory does not exist",
	}
}

// observation is a sample taken at an offset from t0.
type observation struct {
	at time.Duration
	s  Sample
}

// every returns observations of s every interval in [from, to).
func every(interval, from, to time.Duration, s Sample) []observation {
	var obs []observation
	for at := from; at < to; at += interval {
		obs = append(obs, observation{at, s})
	}
	return obs
}

// alternate returns observations every interval in [from, to),
// alternating between a and b.
func alternate(interval, from, to time.Duration, a, b Sample) []observation {
	var obs []observation
	for i, at := 0, from; at < to; i, at = i+1, at+interval {
		s := a
		if i%2 == 1 {
			s = b
		}
		obs = append(obs, observation{at, s})
	}
	return obs
}

// at returns one observation.
func at(offset time.Duration, s Sample) []observation {
	return []observation{{offset, s}}
}

// sec converts seconds to a duration.
func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// event is a transition expected at an offset from t0: "+key" when the
// taint is set, "-key" when it is cleared, and for a set taint the value.
type event struct {
	at    time.Duration
	what  string
	value string // checked when not empty
}

// replay feeds obs to m and returns the transitions with their offsets.
func replay(t *testing.T, m *Monitor, obs []observation) []event {
	t.Helper()
	var got []event
	for _, o := range obs {
		ts := m.Observe(t0.Add(o.at), o.s)
		if !slices.IsSortedFunc(ts, func(a, b Transition) int { return strings.Compare(a.Key, b.Key) }) {
			t.Errorf("at %v: transitions %+v are not sorted by key", o.at, ts)
		}
		for _, tr := range ts {
			sign := "-"
			if tr.Set {
				sign = "+"
			}
			if !validTaintValue(tr.Value) {
				t.Errorf("at %v: %s has invalid taint value %q", o.at, tr.Key, tr.Value)
			}
			if tr.Reason == "" {
				t.Errorf("at %v: %s has no reason", o.at, tr.Key)
			}
			got = append(got, event{at: o.at, what: sign + tr.Key, value: tr.Value})
		}
	}
	return got
}

// checkEvents compares got with want; values are compared where want
// has one.
func checkEvents(t *testing.T, got, want []event) {
	t.Helper()
	match := len(got) == len(want)
	for i := 0; match && i < len(got); i++ {
		match = got[i].at == want[i].at && got[i].what == want[i].what &&
			(want[i].value == "" || got[i].value == want[i].value)
	}
	if !match {
		t.Errorf("transitions:\n got  %s\n want %s", formatEvents(got), formatEvents(want))
	}
}

func formatEvents(evs []event) string {
	var parts []string
	for _, e := range evs {
		parts = append(parts, fmt.Sprintf("%v %s %s", e.at, e.what, e.value))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

const (
	setPressure   = "+" + v1alpha1.TaintMemoryPressure
	clearPressure = "-" + v1alpha1.TaintMemoryPressure
	setSwapFull   = "+" + v1alpha1.TaintSwapFull
	clearSwapFull = "-" + v1alpha1.TaintSwapFull
)

func TestMonitorObserve(t *testing.T) {
	var (
		idle      = node(1, 0)
		high      = node(40, 2)  // some above 30
		band      = node(20, 2)  // some between 15 and 30
		fullHigh  = node(12, 11) // full above 10, some low
		fullBand  = node(2, 7)   // full between 5 and 10
		s5        = 5 * time.Second
		immediate = func() Config {
			cfg := testConfig()
			cfg.SetAfter, cfg.ClearAfter = 0, 0
			return cfg
		}
	)
	tests := []struct {
		name       string
		cfg        Config
		obs        []observation
		want       []event
		wantActive []string // keys, in order
	}{
		{
			name:       "steady high sets after exactly SetAfter",
			obs:        every(s5, 0, sec(60), high),
			want:       []event{{sec(30), setPressure, "some-40.0"}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name: "not a moment before SetAfter",
			obs:  slices.Concat(at(0, high), at(sec(29.999), high)),
		},
		{
			name:       "set when the first observation after SetAfter comes late",
			obs:        slices.Concat(at(0, high), at(sec(10), high), at(sec(47), high)),
			want:       []event{{sec(47), setPressure, ""}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name: "spike shorter than SetAfter",
			obs:  slices.Concat(every(s5, 0, sec(25), high), every(s5, sec(25), sec(120), idle)),
		},
		{
			name: "a spike does not count towards the next one",
			obs: slices.Concat(
				every(s5, 0, sec(25), high),
				at(sec(25), idle),
				every(s5, sec(30), sec(120), high),
			),
			want:       []event{{sec(60), setPressure, ""}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name: "flapping around the set threshold never sets",
			obs:  alternate(s5, 0, sec(600), high, band),
		},
		{
			name: "flapping between high and low never sets",
			obs:  alternate(s5, 0, sec(600), high, idle),
		},
		{
			name: "low for less than ClearAfter keeps the taint",
			obs: slices.Concat(
				every(s5, 0, sec(35), high),
				every(s5, sec(35), sec(95), idle), // 35..90: 55s low
			),
			want:       []event{{sec(30), setPressure, ""}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name: "low for ClearAfter clears",
			obs: slices.Concat(
				every(s5, 0, sec(35), high),
				every(s5, sec(35), sec(200), idle),
			),
			want: []event{{sec(30), setPressure, ""}, {sec(95), clearPressure, "some-1.0"}},
		},
		{
			name:       "hysteresis band keeps a set taint",
			obs:        slices.Concat(every(s5, 0, sec(35), high), every(s5, sec(35), sec(1200), band)),
			want:       []event{{sec(30), setPressure, ""}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name: "band restarts the clear timer",
			obs: slices.Concat(
				every(s5, 0, sec(35), high),
				every(s5, sec(35), sec(90), idle), // 55s low
				at(sec(90), band),
				every(s5, sec(95), sec(200), idle), // low again from 95
			),
			want: []event{{sec(30), setPressure, ""}, {sec(155), clearPressure, ""}},
		},
		{
			name: "high while set restarts the clear timer",
			obs: slices.Concat(
				every(s5, 0, sec(35), high),
				every(s5, sec(35), sec(90), idle),
				at(sec(90), high),
				every(s5, sec(95), sec(200), idle),
			),
			want: []event{{sec(30), setPressure, ""}, {sec(155), clearPressure, ""}},
		},
		{
			name: "band restarts the set timer",
			obs: slices.Concat(
				every(s5, 0, sec(25), high),
				at(sec(25), band),
				every(s5, sec(30), sec(65), high),
			),
			want:       []event{{sec(60), setPressure, ""}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name:       "full avg10 alone sets",
			obs:        every(s5, 0, sec(35), fullHigh),
			want:       []event{{sec(30), setPressure, "full-11.0"}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name:       "full in its band keeps a set taint although some is low",
			obs:        slices.Concat(every(s5, 0, sec(35), fullHigh), every(s5, sec(35), sec(300), fullBand)),
			want:       []event{{sec(30), setPressure, ""}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name:       "kubepods source higher than the node is used",
			obs:        every(s5, 0, sec(35), nodeAndKubepods(1, 0, 42.5, 3)),
			want:       []event{{sec(30), setPressure, "some-42.5"}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name:       "node higher than kubepods is used",
			obs:        every(s5, 0, sec(35), nodeAndKubepods(1, 10.5, 2, 0)),
			want:       []event{{sec(30), setPressure, "full-10.5"}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name: "low only when every source is low",
			obs: slices.Concat(
				every(s5, 0, sec(35), nodeAndKubepods(1, 0, 40, 0)),
				every(s5, sec(35), sec(300), nodeAndKubepods(1, 0, 20, 0)), // kubepods in its band
				every(s5, sec(300), sec(400), nodeAndKubepods(1, 0, 1, 0)),
			),
			want: []event{{sec(30), setPressure, ""}, {sec(360), clearPressure, ""}},
		},
		{
			name:       "PSI unavailable never sets pressure, swap full still works",
			obs:        slices.Concat(every(s5, 0, sec(600), noPSI(95))),
			want:       []event{{sec(30), setSwapFull, "used-95"}},
			wantActive: []string{v1alpha1.TaintSwapFull},
		},
		{
			name: "PSI lost while set counts as low",
			obs:  slices.Concat(every(s5, 0, sec(35), high), every(s5, sec(35), sec(200), noPSI(10))),
			want: []event{{sec(30), setPressure, ""}, {sec(95), clearPressure, "psi-unavailable"}},
		},
		{
			name:       "swap full sets and stays in its band",
			obs:        slices.Concat(every(s5, 0, sec(35), swapUsed(90)), every(s5, sec(35), sec(600), swapUsed(85))),
			want:       []event{{sec(30), setSwapFull, "used-90"}},
			wantActive: []string{v1alpha1.TaintSwapFull},
		},
		{
			name: "swap full clears below SwapFullClear",
			obs:  slices.Concat(every(s5, 0, sec(35), swapUsed(97)), every(s5, sec(35), sec(200), swapUsed(79))),
			want: []event{{sec(30), setSwapFull, "used-97"}, {sec(95), clearSwapFull, "used-79"}},
		},
		{
			name: "swap flapping around the set threshold never sets",
			obs:  alternate(s5, 0, sec(600), swapUsed(91), swapUsed(85)),
		},
		{
			name: "no swap is never full",
			obs:  every(s5, 0, sec(600), Sample{Memory: psi(0, 0), SwapUsed: gib}),
		},
		{
			name: "swap removed while full counts as low",
			obs: slices.Concat(
				every(s5, 0, sec(35), swapUsed(95)),
				every(s5, sec(35), sec(200), Sample{Memory: psi(0, 0)}),
			),
			want: []event{{sec(30), setSwapFull, ""}, {sec(95), clearSwapFull, "no-swap"}},
		},
		{
			name: "both conditions at once, sorted by key",
			obs: every(s5, 0, sec(35), Sample{
				Memory: psi(50, 20), SwapTotal: swapTotal, SwapUsed: swapTotal,
			}),
			want: []event{
				{sec(30), setPressure, "full-20.0"},
				{sec(30), setSwapFull, "used-100"},
			},
			wantActive: []string{v1alpha1.TaintMemoryPressure, v1alpha1.TaintSwapFull},
		},
		{
			name:       "zero dwell times act on the first observation",
			cfg:        immediate(),
			obs:        slices.Concat(at(0, high), at(sec(1), band), at(sec(2), idle), at(sec(3), band), at(sec(4), high)),
			want:       []event{{0, setPressure, ""}, {sec(2), clearPressure, ""}, {sec(4), setPressure, ""}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
		{
			name:       "an observation earlier than the pending run restarts it",
			obs:        slices.Concat(at(sec(100), high), at(sec(50), high), at(sec(79), high), at(sec(80), high)),
			want:       []event{{sec(80), setPressure, ""}},
			wantActive: []string{v1alpha1.TaintMemoryPressure},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg == (Config{}) {
				cfg = testConfig()
			}
			m, err := NewMonitor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkEvents(t, replay(t, m, tt.obs), tt.want)
			var active []string
			for _, taint := range m.Active() {
				active = append(active, taint.Key)
			}
			if !slices.Equal(active, tt.wantActive) {
				t.Errorf("Active() keys = %q, want %q", active, tt.wantActive)
			}
		})
	}
}

// TestMonitorActive checks that an active taint keeps the value and time
// of the observation that set it.
func TestMonitorActive(t *testing.T) {
	m, err := NewMonitor(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Active(); len(got) != 0 {
		t.Fatalf("Active() of a new monitor = %+v, want none", got)
	}
	obs := slices.Concat(
		every(5*time.Second, 0, sec(35), Sample{Memory: psi(35, 0), SwapTotal: swapTotal, SwapUsed: swapTotal / 100 * 91}),
		every(5*time.Second, sec(35), sec(120), Sample{Memory: psi(80, 30), SwapTotal: swapTotal, SwapUsed: swapTotal / 100 * 99}),
	)
	replay(t, m, obs)
	want := []Taint{
		{Key: v1alpha1.TaintMemoryPressure, Value: "some-35.0", Since: t0.Add(sec(30))},
		{Key: v1alpha1.TaintSwapFull, Value: "used-91", Since: t0.Add(sec(30))},
	}
	if got := m.Active(); !slices.Equal(got, want) {
		t.Errorf("Active() = %+v, want %+v", got, want)
	}
	// The caller owns the returned slice.
	m.Active()[0].Value = "changed"
	if got := m.Active(); !slices.Equal(got, want) {
		t.Errorf("Active() after modifying a returned slice = %+v, want %+v", got, want)
	}
}

func TestMonitorReason(t *testing.T) {
	cfg := testConfig()
	tests := []struct {
		name  string
		obs   []observation
		index int      // of the transition to check
		want  []string // substrings of the reason
	}{
		{
			name: "pressure set",
			obs:  every(5*time.Second, 0, sec(35), nodeAndKubepods(12, 2, 41.25, 11)),
			want: []string{"at or above", "some avg10 30%", "full avg10 10%", "for 30s",
				"some avg10 41.25% (kubepods cgroup)", "full avg10 11% (kubepods cgroup)"},
		},
		{
			name: "pressure cleared",
			obs: slices.Concat(
				every(5*time.Second, 0, sec(35), node(50, 0)),
				every(5*time.Second, sec(35), sec(100), node(3.5, 0.5)),
			),
			index: 1,
			want:  []string{"below", "some avg10 15%", "full avg10 5%", "every source", "for 1m0s", "some avg10 3.5% (node)"},
		},
		{
			name: "pressure unavailable",
			obs: slices.Concat(
				every(5*time.Second, 0, sec(35), node(50, 0)),
				every(5*time.Second, sec(35), sec(100), noPSI(10)),
			),
			index: 1,
			want:  []string{"unavailable", "/proc/pressure/memory does not exist", "for 1m0s"},
		},
		{
			name: "swap full set",
			obs:  every(5*time.Second, 0, sec(35), swapUsed(92)),
			want: []string{"at or above 90%", "for 30s", "92% used (7.2 GiB of 7.8 GiB)"},
		},
		{
			name: "swap full cleared",
			obs: slices.Concat(
				every(5*time.Second, 0, sec(35), swapUsed(95)),
				every(5*time.Second, sec(35), sec(100), swapUsed(50)),
			),
			index: 1,
			want:  []string{"below 80%", "for 1m0s", "50% used (3.9 GiB of 7.8 GiB)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMonitor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var ts []Transition
			for _, o := range tt.obs {
				ts = append(ts, m.Observe(t0.Add(o.at), o.s)...)
			}
			if len(ts) <= tt.index {
				t.Fatalf("transitions = %+v, want at least %d", ts, tt.index+1)
			}
			reason := ts[tt.index].Reason
			for _, w := range tt.want {
				if !strings.Contains(reason, w) {
					t.Errorf("reason %q does not contain %q", reason, w)
				}
			}
		})
	}
}

func TestMonitorFigures(t *testing.T) {
	m, err := NewMonitor(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Figures(); got != (Figures{}) {
		t.Errorf("Figures() of a new monitor = %+v, want zero", got)
	}
	tests := []struct {
		name string
		s    Sample
		want Figures
	}{
		{
			name: "both sources",
			s:    Sample{Memory: psi(12.5, 1), Kubepods: psi(40, 11), SwapTotal: 4 * gib, SwapUsed: gib},
			want: Figures{
				PSIAvailable:     true,
				Node:             SourceFigures{Present: true, SomeAvg10: 12.5, FullAvg10: 1},
				Kubepods:         SourceFigures{Present: true, SomeAvg10: 40, FullAvg10: 11},
				SwapUsedFraction: 0.25,
			},
		},
		{
			name: "no PSI, no swap",
			s:    Sample{SwapUsed: gib},
			want: Figures{},
		},
		{
			name: "used above total is clamped",
			s:    Sample{Memory: psi(0, 0), SwapTotal: gib, SwapUsed: 2 * gib},
			want: Figures{PSIAvailable: true, Node: SourceFigures{Present: true}, SwapUsedFraction: 1},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0.Add(time.Duration(i) * time.Second)
			m.Observe(now, tt.s)
			tt.want.Time = now
			if got := m.Figures(); got != tt.want {
				t.Errorf("Figures() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewMonitorInvalidConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PressureSomeClear = cfg.PressureSomeThreshold
	if m, err := NewMonitor(cfg); err == nil || m != nil {
		t.Errorf("NewMonitor() = %v, %v; want an error", m, err)
	}
}

// TestMonitorConcurrent exercises the mutex under the race detector.
func TestMonitorConcurrent(t *testing.T) {
	m, err := NewMonitor(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			m.Observe(t0.Add(time.Duration(i)*time.Second), node(float64(i%100), 0))
		}
	}()
	for range 200 {
		m.Active()
		m.Figures()
	}
	<-done
}
