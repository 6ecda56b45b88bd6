package kubeletplugin

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/prepare"
)

// TestOffloadReporter: the loop's figures become one series per claim
// (the counter rising by what was reclaimed since the last pass, the
// series of a claim no longer driven deleted), its status data at most
// once a minute, and a pressure episode one Normal event on the
// container with the stall and the budget.
func TestOffloadReporter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := NewMetrics()
	m.enableOffload()
	s := newClaimStatuses(nil, "dra.swap", "node-a", m)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	s.clock, s.delay = clk, time.Hour
	rec := events.NewFakeRecorder(4)
	r := &offloadReporter{node: "node-a", interval: 6 * time.Second, metrics: m.offload, statuses: s, recorder: rec}

	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "claim-uid"}}
	config := v1alpha1.Merge(&v1alpha1.SwapConfig{Offload: &v1alpha1.Offload{MaxStallPercent: ptr.To[v1alpha1.StallPercent](50)}})
	s.prepared(prepare.ClaimReport{Claim: claim, Pod: types.NamespacedName{Namespace: "ns", Name: "p"}, Results: []prepare.ResultReport{{
		Result:     resourceapi.DeviceRequestAllocationResult{Request: "swap", Driver: "dra.swap", Pool: "node-a", Device: "swap"},
		LimitBytes: 512 << 20, Config: config, Containers: map[string]int64{"worker": 512 << 20},
	}}})
	figures := offload.ClaimFigures{UID: "claim-uid", Claim: types.NamespacedName{Namespace: "ns", Name: "c"}, Containers: 1,
		ReclaimedBytes: 10 << 20, SwapBytes: 9 << 20, SwapPeakBytes: -1, StallPPM: 1234, BudgetPPM: 5000, Reason: offload.ReasonOffloading}
	r.Pass(ctx, offload.PassReport{Containers: 1, Claims: []offload.ClaimFigures{figures}, Duration: time.Millisecond})
	if n := s.queue.Len(); n != 1 {
		t.Fatalf("%d claims queued after the first figures, want the claim", n)
	}
	figures.ReclaimedBytes, figures.Reason = 15<<20, offload.ReasonOverBudget
	clk.SetTime(clk.Now().Add(30 * time.Second))
	uid, _ := s.queue.Get() // written by the worker
	s.queue.Done(uid)
	r.Pass(ctx, offload.PassReport{Containers: 1, Claims: []offload.ClaimFigures{figures}})
	if n := s.queue.Len(); n != 0 {
		t.Errorf("%d claims queued 30 s after the last figures, want none before a minute", n)
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

	// The status data carries the latest figures, with the config.
	ac, err := s.applyConfiguration(s.claims["claim-uid"])
	if err != nil {
		t.Fatal(err)
	}
	var data DeviceStatusData
	if err := json.Unmarshal(ac.Status.Devices[0].Data.Raw, &data); err != nil {
		t.Fatal(err)
	}
	want := OffloadStatus{State: offload.ReasonOverBudget, SwapBytes: 9 << 20, ReclaimedBytes: 15 << 20, StallPercent: ptr.To[v1alpha1.StallPercent](12),
		MaxStallPercent: 50, Containers: 1}
	if data.Offload == nil || !reflect.DeepEqual(*data.Offload, want) || data.Config.Offload == nil || *data.Config.Offload.MaxStallPercent != 50 {
		t.Errorf("status data %s, want offload %+v and the config's budget", ac.Status.Devices[0].Data.Raw, want)
	}
	if raw := string(ac.Status.Devices[0].Data.Raw); !strings.Contains(raw, `"stallPercent":0.12`) || !strings.Contains(raw, `"maxStallPercent":0.5`) {
		t.Errorf("status data %s: percentages as numbers with two decimals", raw)
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
