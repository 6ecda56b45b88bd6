package claimstatus

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/prepare"
)

// applied is a Writer of one prepared claim (ns/c, pod ns/p, container
// worker) whose limit the hook applied; config is the result's.
func applied(t *testing.T, config *v1alpha1.SwapConfig) *Writer {
	t.Helper()
	s := New(nil, "dra.swap", "node-a", nil)
	s.delay = time.Hour
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "claim-uid"}}
	s.Prepared(prepare.ClaimReport{Claim: claim, Pod: types.NamespacedName{Namespace: "ns", Name: "p"}, Results: []prepare.ResultReport{{
		Result:     resourceapi.DeviceRequestAllocationResult{Request: "swap", Driver: "dra.swap", Pool: "node-a", Device: "swap"},
		LimitBytes: 100 << 20, Config: config, Containers: map[string]int64{"worker": 100 << 20},
	}}})
	s.Reported(hookrecord.Record{Namespace: "ns", Pod: "p", Container: "worker", LimitBytes: 100 << 20, Claims: []string{"claim-uid"}})
	return s
}

// condition is the claim's SwapApplied condition, "status reason: message".
func condition(t *testing.T, s *Writer) string {
	t.Helper()
	ac, err := s.applyConfiguration(s.claims["claim-uid"])
	if err != nil {
		t.Fatal(err)
	}
	c := ac.Status.Devices[0].Conditions[0]
	return string(*c.Status) + " " + *c.Reason + ": " + *c.Message
}

// TestLimitNotHeld: a limit the verifier could not restore makes the
// condition of the claims that reach the container False (LimitNotHeld),
// saying so, until it holds again; a container of another pod changes
// nothing.
func TestLimitNotHeld(t *testing.T) {
	s := applied(t, nil)
	d := limitcheck.Drift{Container: hookstate.Container{ID: "0123456789abcdef", CgroupVersion: 1, Namespace: "ns", Pod: "p", PodUID: "uid", Name: "worker"},
		Found: 164 << 20, Want: 100 << 20}
	other := d
	other.Container.Pod = "q"

	s.LimitNotHeld(other, "another pod's")
	if got := condition(t, s); !strings.HasPrefix(got, "True Applied") {
		t.Errorf("condition %q after another pod's limit, want True Applied", got)
	}
	s.LimitNotHeld(d, "container worker: swap limit 164Mi")
	if got, want := condition(t, s), "False LimitNotHeld: not held on node node-a, and could not be restored: container worker: swap limit 164Mi"; got != want {
		t.Errorf("condition %q, want %q", got, want)
	}
	s.LimitHeld(d)
	if got := condition(t, s); !strings.HasPrefix(got, "True Applied") {
		t.Errorf("condition %q after it holds again, want True Applied", got)
	}
}

// TestOffloaded: the offload loop's figures are queued for a write the
// first time and then at most once a minute, and the status data carries
// the latest, with the config.
func TestOffloaded(t *testing.T) {
	s := applied(t, v1alpha1.Merge(&v1alpha1.SwapConfig{Offload: &v1alpha1.Offload{MaxStallPercent: ptr.To[v1alpha1.StallPercent](50)}}))
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	s.clock = clk
	for s.queue.Len() > 0 { // the hook's outcome, written by the worker
		uid, _ := s.queue.Get()
		s.queue.Done(uid)
	}
	figures := offload.ClaimFigures{UID: "claim-uid", Claim: types.NamespacedName{Namespace: "ns", Name: "c"}, Containers: 1,
		ReclaimedBytes: 10 << 20, SwapBytes: 9 << 20, SwapPeakBytes: -1, StallPPM: 1234, BudgetPPM: 5000, Reason: offload.ReasonOffloading}
	s.Offloaded([]offload.ClaimFigures{figures}, 6*time.Second)
	if n := s.queue.Len(); n != 1 {
		t.Fatalf("%d claims queued after the first figures, want the claim", n)
	}
	uid, _ := s.queue.Get() // written by the worker
	s.queue.Done(uid)
	figures.ReclaimedBytes, figures.Reason = 15<<20, offload.ReasonOverBudget
	clk.SetTime(clk.Now().Add(30 * time.Second))
	s.Offloaded([]offload.ClaimFigures{figures}, 6*time.Second)
	if n := s.queue.Len(); n != 0 {
		t.Errorf("%d claims queued 30 s after the last figures, want none before a minute", n)
	}
	clk.SetTime(clk.Now().Add(30 * time.Second))
	s.Offloaded([]offload.ClaimFigures{figures}, 6*time.Second)
	if n := s.queue.Len(); n != 1 {
		t.Errorf("%d claims queued a minute after the first figures, want the claim", n)
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

}
