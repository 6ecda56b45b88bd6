package kubeletplugin

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
)

// TestOffloadReporter: the loop's figures become one series per claim
// (the counter rising by what was reclaimed since the last pass, the
// series of a claim no longer driven deleted), each pass's figures to the
// claims' status, and a pressure episode one Normal event on the
// container with the stall and the budget.
func TestOffloadReporter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := NewMetrics()
	m.enableOffload()
	s := &statusRecorder{}
	rec := events.NewFakeRecorder(4)
	r := &offloadReporter{node: "node-a", interval: 6 * time.Second, metrics: m.offload, statuses: s, recorder: rec}

	figures := offload.ClaimFigures{UID: "claim-uid", Claim: types.NamespacedName{Namespace: "ns", Name: "c"}, Containers: 1,
		ReclaimedBytes: 10 << 20, SwapBytes: 9 << 20, SwapPeakBytes: -1, StallPPM: 1234, BudgetPPM: 5000, Reason: offload.ReasonOffloading}
	r.Pass(ctx, offload.PassReport{Containers: 1, Claims: []offload.ClaimFigures{figures}, Duration: time.Millisecond})
	figures.ReclaimedBytes, figures.Reason = 15<<20, offload.ReasonOverBudget
	r.Pass(ctx, offload.PassReport{Containers: 1, Claims: []offload.ClaimFigures{figures}})
	// Every pass's figures go to the claims' status (which writes them at
	// most once a minute: claimstatus.TestOffloaded), with the interval.
	if len(s.offloaded) != 2 || len(s.offloaded[1]) != 1 || s.offloaded[1][0] != figures || s.interval != 6*time.Second {
		t.Errorf("told the claims' status %+v every %v, want each pass's figures every 6s", s.offloaded, s.interval)
	}
	page := scrapeHandler(t, m)
	for _, want := range []string{
		`dra_swap_offload_reclaimed_bytes_total{claim="c",claim_namespace="ns"} 1.572864e+07`,
		`dra_swap_offload_swap_used_bytes{claim="c",claim_namespace="ns"} 9.437184e+06`,
		`dra_swap_offload_stall_ratio{claim="c",claim_namespace="ns"} 0.001234`,
		`dra_swap_offload_max_stall_ratio{claim="c",claim_namespace="ns"} 0.005`,
		`dra_swap_offload_paused{claim="c",claim_namespace="ns"} 1`,
		`dra_swap_offload_containers 1`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(page, "dra_swap_offload_swap_peak_bytes{") {
		t.Error("a swap peak series without memory.swap.peak")
	}

	// An episode: one event on the container.
	r.BackedOff(ctx, hookstate.Container{ID: "c1", Namespace: "ns", Pod: "p", PodUID: "00000000-0000-4000-8000-0000000000f0", Name: "worker"},
		[]types.NamespacedName{{Namespace: "ns", Name: "c"}}, 12345, 5000)
	select {
	case e := <-rec.Events:
		wantEvent := `Normal SwapOffloadBackedOff Offload of container "worker" on node "node-a" paused: it stalled on memory 1.23% of the last 6s, above the budget of 0.50% of claim c`
		if !strings.HasPrefix(e, wantEvent) || len(e) > eventmsg.NoteLimit+100 {
			t.Errorf("event %q, want %q…", e, wantEvent)
		}
	default:
		t.Error("no event for the episode")
	}

	// The claim is no longer driven: its series go.
	r.Pass(ctx, offload.PassReport{})
	if page := scrapeHandler(t, m); strings.Contains(page, `claim="c"`) {
		t.Errorf("the series of a claim no longer driven stay:\n%s", page)
	}
}
