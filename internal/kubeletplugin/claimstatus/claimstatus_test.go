package claimstatus

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/prepare"
)

// The condition follows the hook's outcomes: Unknown until the containers
// started, True once every one got its limit, False with the hook's error,
// False for admin access; its transition time moves only when its status
// does.
func TestClaimStatusConditions(t *testing.T) {
	s := New(nil, "dra.swap", "node-a", nil)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	s.clock = clk
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "claim-uid"}}
	result := func(request string, admin bool) prepare.ResultReport {
		r := prepare.ResultReport{Result: resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "dra.swap", Pool: "node-a", Device: "swap",
			ShareID: ptr.To(types.UID("share-" + request))}, LimitBytes: 100 << 20, AdminAccess: admin, Config: &v1alpha1.SwapConfig{}}
		if !admin {
			r.Containers = map[string]int64{"a": 100 << 20, "b": 100 << 20}
		}
		return r
	}
	s.Prepared(prepare.ClaimReport{Claim: claim, Pod: types.NamespacedName{Namespace: "ns", Name: "p"},
		Results: []prepare.ResultReport{result("swap", false), result("admin", true)}})
	conditions := func() []string {
		t.Helper()
		ac, err := s.applyConfiguration(s.claims["claim-uid"])
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range ac.Status.Devices {
			c := d.Conditions[0]
			out = append(out, string(*c.Status)+" "+*c.Reason+": "+*c.Message+" @"+c.LastTransitionTime.Format(time.TimeOnly))
		}
		return out
	}
	check := func(want ...string) {
		t.Helper()
		got := conditions()
		for i, w := range want {
			if i >= len(got) || !strings.HasPrefix(got[i], w) {
				t.Errorf("conditions %q, want prefixes %q", got, want)
				return
			}
		}
	}
	check("Unknown Prepared: prepared on node node-a; waiting for container a, b to start @12:00:00", "False AdminAccess")
	clk.SetTime(clk.Now().Add(time.Minute))
	s.Reported(hookrecord.Record{Namespace: "ns", Pod: "p", Container: "a", LimitBytes: 100 << 20, Claims: []string{"claim-uid"}})
	check("Unknown Prepared: prepared on node node-a; waiting for container b to start @12:00:00")
	// Another pod's container with the claim changes nothing.
	s.Reported(hookrecord.Record{Namespace: "ns", Pod: "other", Container: "b", Error: "refused", Claims: []string{"claim-uid"}})
	s.Reported(hookrecord.Record{Namespace: "ns", Pod: "p", Container: "b", LimitBytes: 100 << 20, Claims: []string{"claim-uid"}})
	check("True Applied: swap limit applied on node node-a to container a (100Mi), b (100Mi) @12:01:00")
	clk.SetTime(clk.Now().Add(time.Minute))
	s.Reported(hookrecord.Record{Namespace: "ns", Pod: "p", Container: "b", Error: "container ns/p/b has no memory limit", Claims: []string{"claim-uid"}})
	check("False NotApplied: not applied to container b: container ns/p/b has no memory limit @12:02:00")
	s.Unprepared([]types.UID{"claim-uid"})
	if len(s.claims) != 0 {
		t.Errorf("claims kept after unprepare: %v", s.claims)
	}
}

// TestClaimStatusConditionBounded: 40 containers that each failed with a
// 2 kB hook error make a condition message within the API's 32 KiB limit
// (eventmsg.ConditionLimit) that names the first ones and counts the rest.
func TestClaimStatusConditionBounded(t *testing.T) {
	s := New(nil, "dra.swap", "node-a", nil)
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "claim-uid"}}
	r := prepare.ResultReport{Result: resourceapi.DeviceRequestAllocationResult{Request: "swap", Driver: "dra.swap", Pool: "node-a", Device: "swap"},
		LimitBytes: 100 << 20, Containers: map[string]int64{}}
	for i := range 40 {
		r.Containers[fmt.Sprintf("c%02d", i)] = 1 << 20
	}
	s.Prepared(prepare.ClaimReport{Claim: claim, Pod: types.NamespacedName{Namespace: "ns", Name: "p"}, Results: []prepare.ResultReport{r}})
	for name := range r.Containers {
		s.Reported(hookrecord.Record{Namespace: "ns", Pod: "p", Container: name, Error: strings.Repeat("ö", 1024), Claims: []string{"claim-uid"}})
	}
	ac, err := s.applyConfiguration(s.claims["claim-uid"])
	if err != nil {
		t.Fatal(err)
	}
	msg := *ac.Status.Devices[0].Conditions[0].Message
	if len(msg) > eventmsg.ConditionLimit || !utf8.ValidString(msg) ||
		!strings.HasPrefix(msg, "not applied to container c00: öö") || !strings.Contains(msg, " more") {
		t.Errorf("condition message of %d bytes (limit %d), valid UTF-8 %v: %.200q … %q", len(msg), eventmsg.ConditionLimit, utf8.ValidString(msg), msg, msg[max(0, len(msg)-100):])
	}
}

// TestClaimStatusWrites: a prepared claim's status is not written at once
// but after the delay, so that the hook's outcome, which is written at
// once, usually goes into the claim's first and only write; a write that
// would apply what was applied last is skipped.
func TestClaimStatusWrites(t *testing.T) {
	client := fake.NewClientset()
	var applies []string
	client.PrependReactor("patch", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		p := action.(k8stesting.PatchAction)
		if p.GetSubresource() == "status" && p.GetPatchType() == types.ApplyPatchType {
			applies = append(applies, string(p.GetPatch()))
		}
		return true, &resourceapi.ResourceClaim{}, nil
	})
	s := New(client, "dra.swap", "node-a", nil)
	s.delay = time.Hour // never, within the test
	ctx := context.Background()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "claim-uid"}}
	s.Prepared(prepare.ClaimReport{Claim: claim, Pod: types.NamespacedName{Namespace: "ns", Name: "p"}, Results: []prepare.ResultReport{{
		Result:     resourceapi.DeviceRequestAllocationResult{Request: "swap", Driver: "dra.swap", Pool: "node-a", Device: "swap"},
		LimitBytes: 100 << 20, Containers: map[string]int64{"a": 100 << 20},
	}}})
	if n := s.queue.Len(); n != 0 {
		t.Fatalf("%d claims queued at once after prepare, want none before the delay", n)
	}
	s.Reported(hookrecord.Record{Namespace: "ns", Pod: "p", Container: "a", LimitBytes: 100 << 20, Claims: []string{"claim-uid"}})
	if n := s.queue.Len(); n != 1 {
		t.Fatalf("%d claims queued after the hook's outcome, want it at once", n)
	}
	for range 2 { // the outcome, then the delayed write of the same status
		if err := s.write(ctx, "claim-uid"); err != nil {
			t.Fatal(err)
		}
	}
	if len(applies) != 1 || !strings.Contains(applies[0], `"status":"True"`) {
		t.Fatalf("applies %q, want one, with the applied condition", applies)
	}
	s.Reported(hookrecord.Record{Namespace: "ns", Pod: "p", Container: "a", Error: "refused", Claims: []string{"claim-uid"}})
	if err := s.write(ctx, "claim-uid"); err != nil {
		t.Fatal(err)
	}
	if len(applies) != 2 || !strings.Contains(applies[1], `"status":"False"`) {
		t.Errorf("applies %q, want a second one with the changed condition", applies)
	}
}
