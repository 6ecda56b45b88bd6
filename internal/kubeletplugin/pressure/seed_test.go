package pressure

import (
	"slices"
	"testing"
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// A taint an earlier plugin instance published survives the restart: it
// keeps its value and time, stays while the condition is not low, and
// clears only after ClearAfter of low observations, like a taint the
// monitor set itself.
func TestMonitorSeed(t *testing.T) {
	cfg := testConfig()
	since := t0.Add(-time.Hour)
	tests := []struct {
		name       string
		seed       []Taint
		obs        []observation
		wantSeeded []string
		// wantActive are the keys=values set after the observations.
		wantActive []string
		wantClears int
	}{
		{
			name:       "swap-full kept while swap stays in the band",
			seed:       []Taint{{Key: v1alpha1.TaintSwapFull, Value: "used-95", Since: since}},
			obs:        every(10*time.Second, 0, 5*time.Minute, swapUsed(85)),
			wantSeeded: []string{v1alpha1.TaintSwapFull},
			wantActive: []string{v1alpha1.TaintSwapFull + "=used-95"},
		},
		{
			name:       "swap-full kept for less than ClearAfter of low",
			seed:       []Taint{{Key: v1alpha1.TaintSwapFull, Value: "used-95", Since: since}},
			obs:        every(10*time.Second, 0, cfg.ClearAfter, swapUsed(10)),
			wantSeeded: []string{v1alpha1.TaintSwapFull},
			wantActive: []string{v1alpha1.TaintSwapFull + "=used-95"},
		},
		{
			name:       "swap-full cleared after ClearAfter of low",
			seed:       []Taint{{Key: v1alpha1.TaintSwapFull, Value: "used-95", Since: since}},
			obs:        every(10*time.Second, 0, cfg.ClearAfter+10*time.Second, swapUsed(10)),
			wantSeeded: []string{v1alpha1.TaintSwapFull},
			wantClears: 1,
		},
		{
			name: "both kept; foreign keys and invalid values ignored",
			seed: []Taint{
				{Key: v1alpha1.TaintMemoryPressure, Value: "full-12.0", Since: since},
				{Key: v1alpha1.TaintSwapFull, Value: "used-91", Since: since},
				{Key: "dra.swap/overcommitted", Value: "held-2Mi-offered-1Mi", Since: since},
				{Key: v1alpha1.TaintSwapFull, Value: "-bad-", Since: since},
			},
			obs:        []observation{{0, nodeAndKubepods(20, 7, 0, 0)}},
			wantSeeded: []string{v1alpha1.TaintMemoryPressure, v1alpha1.TaintSwapFull},
			wantActive: []string{v1alpha1.TaintMemoryPressure + "=full-12.0", v1alpha1.TaintSwapFull + "=used-91"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMonitor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Seed(tc.seed); !slices.Equal(got, tc.wantSeeded) {
				t.Errorf("Seed = %v, want %v", got, tc.wantSeeded)
			}
			clears := 0
			for _, o := range tc.obs {
				for _, tr := range m.Observe(t0.Add(o.at), o.s) {
					if tr.Set {
						t.Errorf("at %v: %s set again", o.at, tr.Key)
					} else {
						clears++
					}
				}
			}
			var active []string
			for _, a := range m.Active() {
				active = append(active, a.Key+"="+a.Value)
				if !a.Since.Equal(since) {
					t.Errorf("%s since %v, want the published %v", a.Key, a.Since, since)
				}
			}
			if !slices.Equal(active, tc.wantActive) || clears != tc.wantClears {
				t.Errorf("active %v, %d clears; want %v, %d", active, clears, tc.wantActive, tc.wantClears)
			}
		})
	}
}
