package pressure

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// loadRecording reads a recorded sample sequence from testdata. Each line
// holds "t_seconds some_avg10 full_avg10 swap_used_bytes
// swap_total_bytes" for the node's PSI; blank lines and lines starting
// with '#' are skipped.
func loadRecording(t *testing.T, name string) []observation {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var obs []observation
	scanner := bufio.NewScanner(f)
	for lineNo := 1; scanner.Scan(); lineNo++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 5 {
			t.Fatalf("%s:%d: want 5 fields, got %d", name, lineNo, len(fields))
		}
		var nums [5]float64
		for i, field := range fields {
			if nums[i], err = strconv.ParseFloat(field, 64); err != nil {
				t.Fatalf("%s:%d: %v", name, lineNo, err)
			}
		}
		used, total := int64(nums[3]), int64(nums[4])
		obs = append(obs, observation{
			at: sec(nums[0]),
			s: Sample{
				Memory:       psi(nums[1], nums[2]),
				SwapTotal:    total,
				SwapUsed:     used,
				PSIAvailable: true,
			},
		})
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	if len(obs) == 0 {
		t.Fatalf("%s has no samples", name)
	}
	return obs
}

// TestReplayThrash replays a recorded thrashing episode: a short burst at
// 30-40 s, a batch job that thrashes from 90 s and fills swap past 90%
// from 235 s, and its OOM kill at 330 s.
func TestReplayThrash(t *testing.T) {
	noDwell := DefaultConfig()
	noDwell.SetAfter, noDwell.ClearAfter = 0, 0
	noSetDwell := DefaultConfig()
	noSetDwell.SetAfter = 0

	tests := []struct {
		name string
		cfg  Config
		want []event
	}{
		{
			// The burst is filtered; the pressure taint is set 30 s into the
			// thrashing (some avg10 reaches 30.00 at 90 s), swap full 30 s
			// after usage passes 90%; each clears 5 min after its figure
			// drops below the clear threshold (swap at 330 s, pressure at
			// 345 s).
			name: "defaults",
			cfg:  DefaultConfig(),
			want: []event{
				{sec(120), setPressure, "full-16.4"},
				{sec(265), setSwapFull, "used-93"},
				{sec(630), clearSwapFull, ""},
				{sec(645), clearPressure, ""},
			},
		},
		{
			// Without SetAfter the burst alone taints the device, and the
			// 5 min ClearAfter then holds it through the whole episode.
			name: "no SetAfter",
			cfg:  noSetDwell,
			want: []event{
				{sec(35), setPressure, "some-36.4"},
				{sec(235), setSwapFull, "used-90"},
				{sec(630), clearSwapFull, ""},
				{sec(645), clearPressure, ""},
			},
		},
		{
			// Without any dwell time the taint follows every excursion.
			name: "no dwell",
			cfg:  noDwell,
			want: []event{
				{sec(35), setPressure, "some-36.4"},
				{sec(50), clearPressure, ""},
				{sec(90), setPressure, "some-30.0"},
				{sec(235), setSwapFull, "used-90"},
				{sec(330), clearSwapFull, ""},
				{sec(345), clearPressure, ""},
			},
		},
	}
	obs := loadRecording(t, "thrash.txt")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMonitor(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkEvents(t, replay(t, m, obs), tt.want)
			if got := m.Active(); len(got) != 0 {
				t.Errorf("Active() at the end = %+v, want none", got)
			}
			if got, want := m.Figures().Time, t0.Add(obs[len(obs)-1].at); !got.Equal(want) {
				t.Errorf("Figures().Time = %v, want %v", got, want)
			}
		})
	}
}

// TestReplayThrashActiveValue checks that the published taint stays the
// one measured when it was set while the figures keep moving.
func TestReplayThrashActiveValue(t *testing.T) {
	m, err := NewMonitor(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range loadRecording(t, "thrash.txt") {
		m.Observe(t0.Add(o.at), o.s)
		if o.at < sec(120) || o.at >= sec(645) {
			continue
		}
		active := m.Active()
		if len(active) == 0 || active[0].Key != v1alpha1.TaintMemoryPressure {
			t.Fatalf("at %v: Active() = %+v, want the memory pressure taint", o.at, active)
		}
		if want := (Taint{Key: v1alpha1.TaintMemoryPressure, Value: "full-16.4", Since: t0.Add(sec(120))}); active[0] != want {
			t.Fatalf("at %v: Active()[0] = %+v, want %+v", o.at, active[0], want)
		}
	}
}
