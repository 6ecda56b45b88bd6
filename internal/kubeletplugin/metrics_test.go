package kubeletplugin

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

// TestBuildInfoMetric: the plugin's registry exports dra_swap_build_info
// = 1 with this binary's version, revision and Go version, and lists it
// among its names.
func TestBuildInfoMetric(t *testing.T) {
	m := NewMetrics()
	b := version.Get()
	want := fmt.Sprintf("dra_swap_build_info{goversion=%q,revision=%q,version=%q} 1\n", b.GoVersion, b.Revision, b.Version)
	if page := scrapeHandler(t, m); !strings.Contains(page, want) {
		t.Errorf("metrics lack %q:\n%s", want, page)
	}
	if !slices.Contains(m.Names(), version.MetricName) {
		t.Errorf("Names() = %q, want %s among them", m.Names(), version.MetricName)
	}
}

// TestMetricLabelsLeaveTargetLabels: no series of the plugin has a label
// that the chart's ServiceMonitor gives every scraped series (the target's
// namespace, pod, node, ...). Prometheus would rename such a label to
// exported_<name>, so the per-claim metric's claim namespace is
// claim_namespace, not namespace.
func TestMetricLabelsLeaveTargetLabels(t *testing.T) {
	targetLabels := []string{"namespace", "pod", "node", "container", "service", "endpoint", "instance", "job"}
	m := NewMetrics()
	m.enableClaimUsage()
	m.enableHookRuns()
	m.enableOffload()
	// Give every vector a series, so that its labels show.
	offloads := &offloadReporter{metrics: m.offload, statuses: &statusRecorder{}, recorder: events.NewFakeRecorder(4)}
	_, ctx := ktesting.NewTestContext(t)
	offloads.Pass(ctx, offload.PassReport{Containers: 1, Claims: []offload.ClaimFigures{{UID: "u", Claim: types.NamespacedName{Namespace: "ns", Name: "a"},
		Containers: 1, ReclaimedBytes: 4096, SwapBytes: 1, SwapPeakBytes: 2, StallPPM: 3, BudgetPPM: 1000, Reason: offload.ReasonOffloading}}})
	offloads.BackedOff(ctx, hookstate.Container{ID: "c"}, nil, 2000, 1000)
	m.observe(opPrepare, nil, time.Millisecond)
	m.restored.WithLabelValues("interval").Inc()
	m.failed.WithLabelValues("interval").Inc()
	m.setPressure(pressure.Figures{Node: pressure.SourceFigures{Present: true, SomeAvg10: 1}}, nil)
	(&usageReporter{metrics: m}).set(map[types.NamespacedName]int64{{Namespace: "ns", Name: "a"}: 1500})
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if slices.Contains(targetLabels, l.GetName()) {
					t.Errorf("%s has the label %q, which the scrape's target labels overwrite", f.GetName(), l.GetName())
				}
			}
		}
	}
	for _, n := range m.Names() {
		if !seen[n] {
			t.Errorf("%s has no series: its labels went unchecked", n)
		}
	}
	if want := `dra_swap_claim_swap_used_bytes{claim="a",claim_namespace="ns"} 1500`; !strings.Contains(scrapeHandler(t, m), want) {
		t.Errorf("metrics lack %s", want)
	}
}

// TestCountersStartAtZero: a fresh plugin exports its labelled counters at
// 0 for every label value it knows, so that the first prepare error or
// limit restore failure is an increase that rate() and the alerts see, not
// the start of a series.
func TestCountersStartAtZero(t *testing.T) {
	page := scrapeHandler(t, NewMetrics())
	for _, want := range []string{
		`dra_swap_claim_operations_total{operation="prepare",result="error"} 0`,
		`dra_swap_claim_operations_total{operation="prepare",result="success"} 0`,
		`dra_swap_claim_operations_total{operation="unprepare",result="error"} 0`,
		`dra_swap_claim_operations_total{operation="unprepare",result="success"} 0`,
		`dra_swap_limit_restored_total{trigger="interval"} 0`,
		`dra_swap_limit_restored_total{trigger="update"} 0`,
		`dra_swap_limit_restored_total{trigger="nri-synchronize"} 0`,
		`dra_swap_limit_restored_total{trigger="start-up"} 0`,
		`dra_swap_limit_restore_failures_total{trigger="interval"} 0`,
		`dra_swap_limit_restore_failures_total{trigger="update"} 0`,
		`dra_swap_limit_restore_failures_total{trigger="nri-synchronize"} 0`,
		`dra_swap_limit_restore_failures_total{trigger="start-up"} 0`,
	} {
		if !strings.Contains(page, "\n"+want+"\n") {
			t.Errorf("a fresh plugin's metrics lack %s", want)
		}
	}
}
