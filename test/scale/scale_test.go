package scale

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// TestScale runs the harness at 100 nodes and 500 pods per mode and checks
// what must hold at any scale: every pod bound to a node whose slice fits
// its claim, no node's device over its offer, every swap pod labeled with
// its node's labels, a pending pod bound once a node's offer grows, no
// event note over the API's limit and no write refused. It asserts no time.
func TestScale(t *testing.T) {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	defer cancel()
	res, err := Run(ctx, t, Config{Nodes: 100, Pods: 500})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Modes {
		if m.Pods != 500 {
			t.Errorf("%s: %d pods", m.Mode.Name, m.Pods)
		}
		for _, v := range m.Violations {
			t.Errorf("%s: %s", m.Mode.Name, v)
		}
	}
	if len(res.Modes) != len(Modes()) {
		t.Errorf("%d modes measured, want %d", len(res.Modes), len(Modes()))
	}
	if res.MaxEventNote > 1024 {
		t.Errorf("an event note of %d bytes (%s): over the 1024 the events API allows", res.MaxEventNote, res.MaxEventReason)
	}
	if res.RefusedWrites > 0 {
		t.Errorf("%d writes refused as invalid (see the scheduler's and controller's logs)", res.RefusedWrites)
	}
	var b strings.Builder
	WriteReport(&b, Machine(), []Result{res}, nil)
	t.Logf("\n%s", b.String())
}

// BenchmarkScale runs the harness at each NODES:PODS of SCALE_RUNS
// (default 100:10000,1000:10000,5000:10000) and prints the table, also to
// BENCH_SCALE_REPORT when set. Run it with -benchtime=1x.
func BenchmarkScale(b *testing.B) {
	runs := os.Getenv("SCALE_RUNS")
	if runs == "" {
		runs = "100:10000,1000:10000,5000:10000"
	}
	var configs []Config
	for _, r := range strings.Split(runs, ",") {
		nodes, pods, ok := strings.Cut(strings.TrimSpace(r), ":")
		n, err1 := strconv.Atoi(nodes)
		p, err2 := strconv.Atoi(pods)
		if !ok || err1 != nil || err2 != nil || n < 1 || p < 1 {
			b.Fatalf("SCALE_RUNS: %q is not NODES:PODS", r)
		}
		configs = append(configs, Config{Nodes: n, Pods: p})
	}
	var (
		results  []Result
		failures []string
	)
	// The report is rewritten after each scale, so a run stopped at a
	// larger one keeps the smaller ones.
	report := func() string {
		var out strings.Builder
		WriteReport(&out, Machine(), results, failures)
		if path := os.Getenv("BENCH_SCALE_REPORT"); path != "" {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		return out.String()
	}
	for _, cfg := range configs {
		var failed error
		ok := b.Run(fmt.Sprintf("nodes=%d/pods=%d", cfg.Nodes, cfg.Pods), func(b *testing.B) {
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
			defer cancel()
			res, err := Run(ctx, b, cfg)
			if err != nil {
				failed = err
				b.Fatal(err)
			}
			for _, m := range res.Modes {
				b.ReportMetric(m.Throughput, strings.ReplaceAll(m.Mode.Name, " ", "-")+"-pods/s")
			}
			results = append(results, res)
		})
		if !ok {
			failures = append(failures, fmt.Sprintf("%d nodes, %d pods: %v", cfg.Nodes, cfg.Pods, failed))
		}
		report()
		if !ok {
			break
		}
	}
	fmt.Print("\n" + report())
}

func TestHistogramQuantile(t *testing.T) {
	text := []byte(`# HELP h a histogram
h_bucket{result="scheduled",le="0.001"} 0
h_bucket{result="scheduled",le="0.002"} 50
h_bucket{result="scheduled",le="0.004"} 90
h_bucket{result="scheduled",le="0.008"} 100
h_bucket{result="scheduled",le="+Inf"} 100
h_bucket{result="error",le="0.001"} 7
h_bucket{result="error",le="0.002"} 7
h_bucket{result="error",le="0.004"} 7
h_bucket{result="error",le="0.008"} 7
h_bucket{result="error",le="+Inf"} 7
c_total{code="200",method="GET"} 3
c_total{code="409",method="PATCH"} 2
`)
	samples, err := parseMetrics(text)
	if err != nil {
		t.Fatal(err)
	}
	h, err := histogramOf(samples, "h", map[string]string{"result": "scheduled"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		q, want float64
	}{
		{0.5, 0.002},
		{0.25, 0.0015},
		{0.7, 0.003},
		{0.99, 0.0076},
	} {
		if got := h.quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := sum(samples, "c_total", nil); got != 5 {
		t.Errorf("sum of c_total = %v, want 5", got)
	}
	all, err := histogramOf(samples, "h", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := all.count(); got != 107 {
		t.Errorf("count over both series = %v, want 107", got)
	}
	if got := all.minus(all).count(); got != 0 {
		t.Errorf("minus itself: %v observations", got)
	}
}
