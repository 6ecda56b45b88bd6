package offload

import (
	"slices"
	"testing"
	"time"
)

const (
	mi       = int64(1) << 20
	interval = 6 * time.Second
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// stallOver is the PSI total increase that makes a stall of ppm over one
// interval.
func stallOver(ppm int64) uint64 { return uint64(ppm * interval.Microseconds() / 1_000_000) }

// TestDecide: the control law over two readings one interval apart.
func TestDecide(t *testing.T) {
	p := DefaultParams()
	// A 1 GiB container with a 512 MiB offload claim and a 0.5 % budget.
	limits := Limits{BudgetPPM: 5000, SwapBytes: 512 * mi, HighBytes: -1}
	first := Reading{At: t0, StallTotal: 1_000_000, Current: 1024 * mi, SwapCurrent: 0}
	tests := []struct {
		name   string
		limits Limits
		next   Reading
		want   Decision
	}{
		{name: "no stall: the full step, 1 % of memory.current", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000, Current: 1024 * mi},
			want: Decision{Reason: ReasonOffloading, ReclaimBytes: 10737418 - 10737418%pageSize, StallPPM: 0}},
		{name: "a quarter of the budget, half the target: half the step", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000 + stallOver(1250), Current: 1024 * mi},
			want: Decision{Reason: ReasonOffloading, ReclaimBytes: 5368709 - 5368709%pageSize, StallPPM: 1250}},
		{name: "at the target, half the budget: nothing to take", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000 + stallOver(2500), Current: 1024 * mi},
			want: Decision{Reason: ReasonIdle, StallPPM: 2500}},
		{name: "between the target and the budget: nothing to take, no episode", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000 + stallOver(4000), Current: 1024 * mi},
			want: Decision{Reason: ReasonIdle, StallPPM: 4000}},
		{name: "at the budget: nothing to take", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000 + stallOver(5000), Current: 1024 * mi},
			want: Decision{Reason: ReasonIdle, StallPPM: 5000}},
		{name: "above the budget: pause, and a new episode", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000 + stallOver(5001), Current: 1024 * mi},
			want: Decision{Reason: ReasonOverBudget, StallPPM: 5001, NewEpisode: true}},
		{name: "the step stops at the swap ceiling (95 % of the claim)", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000, Current: 1024 * mi, SwapCurrent: 512*mi/100*95 - 2*mi},
			want: Decision{Reason: ReasonOffloading, ReclaimBytes: 2 * mi, StallPPM: 0}},
		{name: "at the swap ceiling", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000, Current: 1024 * mi, SwapCurrent: 512 * mi / 100 * 95},
			want: Decision{Reason: ReasonSwapLimit, StallPPM: 0}},
		{name: "memory.swap.high below the ceiling bounds it", limits: Limits{BudgetPPM: 5000, SwapBytes: 512 * mi, HighBytes: 100 * mi},
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000, Current: 1024 * mi, SwapCurrent: 100 * mi},
			want: Decision{Reason: ReasonSwapLimit, StallPPM: 0}},
		{name: "memory.swap.high 0: no offload", limits: Limits{BudgetPPM: 5000, SwapBytes: 512 * mi, HighBytes: 0},
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000, Current: 1024 * mi},
			want: Decision{Reason: ReasonSwapLimit, StallPPM: 0}},
		{name: "the largest step", limits: Limits{BudgetPPM: 5000, SwapBytes: 64 << 30, HighBytes: -1},
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000, Current: 32 << 30},
			want: Decision{Reason: ReasonOffloading, ReclaimBytes: 64 * mi, StallPPM: 0}},
		{name: "a small container's step is too small", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000, Current: 20 * mi},
			want: Decision{Reason: ReasonIdle, StallPPM: 0}},
		{name: "a gap of more than four intervals measures nothing", limits: limits,
			next: Reading{At: t0.Add(4*interval + time.Second), StallTotal: 1_000_000, Current: 1024 * mi},
			want: Decision{Reason: ReasonSampling, StallPPM: -1}},
		{name: "a total that went back measures nothing", limits: limits,
			next: Reading{At: t0.Add(interval), StallTotal: 5, Current: 1024 * mi},
			want: Decision{Reason: ReasonSampling, StallPPM: -1}},
		{name: "a stall above 100 % (clock skew) counts as 100 %", limits: Limits{BudgetPPM: 1_000_000, SwapBytes: 512 * mi, HighBytes: -1},
			next: Reading{At: t0.Add(interval), StallTotal: 1_000_000 + stallOver(2_000_000), Current: 1024 * mi},
			want: Decision{Reason: ReasonIdle, StallPPM: 1_000_000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st State
			if d := Decide(&st, first, tc.limits, interval, p); d != (Decision{Reason: ReasonSampling, StallPPM: -1}) {
				t.Fatalf("first reading: %+v, want sampling only", d)
			}
			if got := Decide(&st, tc.next, tc.limits, interval, p); got != tc.want {
				t.Errorf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDecideEpisodes: a pressure episode is told once, and ends after
// QuietIntervals within the budget; the next one is told again.
func TestDecideEpisodes(t *testing.T) {
	p := DefaultParams()
	p.QuietIntervals = 3
	limits := Limits{BudgetPPM: 1000, SwapBytes: 512 * mi, HighBytes: -1}
	var st State
	r := Reading{At: t0, Current: 1024 * mi}
	step := func(stallPPM int64) Decision {
		r.At = r.At.Add(interval)
		r.StallTotal += stallOver(stallPPM)
		return Decide(&st, r, limits, interval, p)
	}
	Decide(&st, r, limits, interval, p)
	var told []int
	for i, stall := range []int64{0, 2000, 3000, 0, 2000, 0, 0, 0, 1500, 0} {
		d := step(stall)
		if stall > limits.BudgetPPM && (d.Reason != ReasonOverBudget || d.ReclaimBytes != 0) {
			t.Errorf("interval %d: stall %d ppm over the budget gave %+v", i, stall, d)
		}
		if stall == 0 && d.Reason != ReasonOffloading {
			t.Errorf("interval %d: no stall gave %+v", i, d)
		}
		if d.NewEpisode {
			told = append(told, i)
		}
	}
	// Told at 1; 2 is the same episode; 3 is quiet, 4 above again (the
	// same episode: fewer than 3 quiet intervals); 5, 6, 7 end it; 8 is
	// a new one.
	if want := []int{1, 8}; !slices.Equal(told, want) {
		t.Errorf("episodes told at intervals %v, want %v", told, want)
	}
	if !st.InEpisode() {
		t.Error("the last episode should still be open")
	}
}

// TestDecideExhausted: after the kernel could not reclaim a whole step,
// the container rests ExhaustedIntervals, then offloads again.
func TestDecideExhausted(t *testing.T) {
	p := DefaultParams()
	p.ExhaustedIntervals = 2
	limits := Limits{BudgetPPM: 1000, SwapBytes: 512 * mi, HighBytes: -1}
	var st State
	r := Reading{At: t0, Current: 1024 * mi}
	Decide(&st, r, limits, interval, p)
	st.Exhausted(p)
	var reasons []Reason
	for range 3 {
		r.At = r.At.Add(interval)
		reasons = append(reasons, Decide(&st, r, limits, interval, p).Reason)
	}
	if want := []Reason{ReasonExhausted, ReasonExhausted, ReasonOffloading}; !slices.Equal(reasons, want) {
		t.Errorf("after an exhausted reclaim: %v, want %v", reasons, want)
	}
}

// TestDecideRefaultGuard: a step most of which is faulted back in over
// the next interval rests the container RefaultRestIntervals; a step that
// stays out, or a kernel without the count, does not.
func TestDecideRefaultGuard(t *testing.T) {
	p := DefaultParams()
	p.RefaultRestIntervals = 2
	limits := Limits{BudgetPPM: 1000, SwapBytes: 512 * mi, HighBytes: -1}
	step := (1024 * mi / 100 * p.MaxStepPercent) / pageSize // pages of the first step
	for _, tc := range []struct {
		name string
		// back: pages refaulted over the interval after the first step;
		// -1: the kernel has no count.
		back int64
		want []Reason
	}{
		{"all came back", step, []Reason{ReasonRefaulting, ReasonRefaulting, ReasonRefaulting, ReasonOffloading}},
		{"half came back", (step + 1) / 2, []Reason{ReasonRefaulting, ReasonRefaulting, ReasonRefaulting, ReasonOffloading}},
		{"a third came back", step / 3, []Reason{ReasonOffloading, ReasonOffloading, ReasonOffloading, ReasonOffloading}},
		{"none came back", 0, []Reason{ReasonOffloading, ReasonOffloading, ReasonOffloading, ReasonOffloading}},
		{"no count", -1, []Reason{ReasonOffloading, ReasonOffloading, ReasonOffloading, ReasonOffloading}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st State
			r := Reading{At: t0, Current: 1024 * mi, RefaultedPages: 1000}
			if tc.back < 0 {
				r.RefaultedPages = -1
			}
			Decide(&st, r, limits, interval, p)
			r.At = r.At.Add(interval)
			d := Decide(&st, r, limits, interval, p)
			if d.Reason != ReasonOffloading || d.ReclaimBytes != step*pageSize {
				t.Fatalf("first step: %+v, want %d bytes offloaded", d, step*pageSize)
			}
			st.Reclaimed(d.ReclaimBytes)
			if tc.back >= 0 {
				r.RefaultedPages += tc.back
			}
			var reasons []Reason
			for range 4 {
				r.At = r.At.Add(interval)
				reasons = append(reasons, Decide(&st, r, limits, interval, p).Reason)
			}
			if !slices.Equal(reasons, tc.want) {
				t.Errorf("after the step: %v, want %v", reasons, tc.want)
			}
		})
	}
}

func TestParamsValidate(t *testing.T) {
	if err := DefaultParams().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, change := range map[string]func(*Params){
		"step 0 %":         func(p *Params) { p.MaxStepPercent = 0 },
		"step 101 %":       func(p *Params) { p.MaxStepPercent = 101 },
		"target 0 %":       func(p *Params) { p.TargetPercent = 0 },
		"target 101 %":     func(p *Params) { p.TargetPercent = 101 },
		"min step < page":  func(p *Params) { p.MinStepBytes = 100 },
		"max < min":        func(p *Params) { p.MaxStepBytes = p.MinStepBytes - 1 },
		"headroom 100 %":   func(p *Params) { p.SwapHeadroomPercent = 100 },
		"no quiet":         func(p *Params) { p.QuietIntervals = 0 },
		"negative resting": func(p *Params) { p.ExhaustedIntervals = -1 },
		"refault 0 %":      func(p *Params) { p.RefaultPercent = 0 },
		"refault 101 %":    func(p *Params) { p.RefaultPercent = 101 },
		"negative refault": func(p *Params) { p.RefaultRestIntervals = -1 },
	} {
		p := DefaultParams()
		change(&p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
