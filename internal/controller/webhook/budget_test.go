package webhook

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

// TestPatchBudget: a pod's first patch is free; a pod among the last
// remembered takes a token of the shared relabel bucket; the oldest pods
// are forgotten first.
func TestPatchBudget(t *testing.T) {
	b := NewPatchBudget(3, 0.001, 2) // practically no refill within the test
	for _, uid := range []types.UID{"a", "b", "c"} {
		if !b.Allow(uid) {
			t.Errorf("first patch of %s refused", uid)
		}
	}
	if !b.Allow("a") || !b.Allow("b") {
		t.Error("relabels within the burst refused")
	}
	if b.Allow("c") {
		t.Error("a relabel beyond the burst allowed")
	}
	if !b.Allow("d") {
		t.Error("a new pod's first patch refused while the relabel bucket is empty")
	}
	// d pushed out a, the oldest: a is new again.
	if !b.Allow("a") {
		t.Error("a forgotten pod's patch refused")
	}
	if b.Allow("d") {
		t.Error("a remembered pod relabelled without a token")
	}
	var none *PatchBudget
	if !none.Allow("x") {
		t.Error("a nil budget refused")
	}
}

// TestAwaitCache: it looks at once and again until the look is done, the
// deadline passes or the context ends.
func TestAwaitCache(t *testing.T) {
	ctx := context.Background()
	looks := 0
	done, err := awaitCache(ctx, time.Now().Add(time.Minute), func() (bool, error) { looks++; return looks == 3, nil })
	if !done || err != nil || looks != 3 {
		t.Errorf("done %v, %v after %d looks; want done after 3", done, err, looks)
	}
	start := time.Now()
	done, _ = awaitCache(ctx, time.Now().Add(100*time.Millisecond), func() (bool, error) { return false, nil })
	if done || time.Since(start) > 10*time.Second {
		t.Errorf("a look never done: done %v after %v", done, time.Since(start))
	}
	boom := errors.New("boom")
	if _, err := awaitCache(ctx, time.Now().Add(time.Minute), func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("error %v, want boom", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if done, _ := awaitCache(canceled, time.Now().Add(time.Minute), func() (bool, error) { return false, nil }); done {
		t.Error("done after the context ended")
	}
	looks = 0
	if done, _ := awaitCache(ctx, time.Time{}, func() (bool, error) { looks++; return false, nil }); done || looks != 1 {
		t.Errorf("no wait: %d looks, want 1", looks)
	}
}

// TestReservationLabelerWaitsForTheCache: a real reservation's claim
// reaches the cache a moment after the review (the scheduler wrote it just
// before): the labeler waits for it, up to CacheWait, and asks the API
// server nothing; a review older than the cache is ignored at once.
func TestReservationLabelerWaitsForTheCache(t *testing.T) {
	nodes := fakeNodes{"swap-node": {Labels: map[string]string{podlabels.Zone: "z1"}, Device: &resourceapi.Device{Name: "swap"}}}
	uses := []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To("c")}}
	tests := []struct {
		name       string
		misses     int    // reads of the claim before the cache shows it
		reviewedRV string // the review's old resourceVersion relative to the cache's: "same", "newer", "older"
		wait       time.Duration
		wantLabel  bool
		wantQuick  bool
	}{
		{name: "the cache shows the claim at once", reviewedRV: "same", wait: time.Second, wantLabel: true, wantQuick: true},
		{name: "the cache shows the claim after a few looks", misses: 5, reviewedRV: "same", wait: time.Second, wantLabel: true, wantQuick: true},
		{name: "without a wait, a claim the cache lacks is not labelled", misses: 5, reviewedRV: "same", wantQuick: true},
		{name: "the cache never reaches the review's version", reviewedRV: "newer", wait: 200 * time.Millisecond},
		{name: "a review older than the cache is ignored at once", reviewedRV: "older", wait: time.Minute, wantQuick: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			stored := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"}}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"}, Spec: corev1.PodSpec{ResourceClaims: uses}}
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(stored, pod).Build()
			if err := c.Get(ctx, client.ObjectKeyFromObject(stored), stored); err != nil {
				t.Fatal(err)
			}
			old := stored.DeepCopy()
			var rv int
			if _, err := fmt.Sscan(stored.ResourceVersion, &rv); err != nil {
				t.Fatal(err)
			}
			switch tc.reviewedRV {
			case "newer":
				old.ResourceVersion = fmt.Sprint(rv + 1)
			case "older":
				old.ResourceVersion = fmt.Sprint(rv - 1)
			}
			claim := old.DeepCopy()
			claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "swap", Driver: v1alpha1.DriverName, Pool: "swap-node", Device: "swap"}}}}
			claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "uid-p"}}
			counting := &countingClient{Client: c}
			h := &ReservationLabeler{Claims: &lagging{Reader: c, misses: tc.misses}, Pods: c, Client: counting, Nodes: nodes, CacheWait: tc.wait,
				Policy: podlabels.Policy{Selection: podlabels.SelectSwapClaims}}
			start := time.Now()
			if resp := h.Handle(ctx, claimStatusRequest(t, old, claim, false)); !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			took := time.Since(start)
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatal(err)
			}
			if labelled := got.Labels[podlabels.Zone] != ""; labelled != tc.wantLabel {
				t.Errorf("labelled %v, want %v", labelled, tc.wantLabel)
			}
			if counting.calls > 1 {
				t.Errorf("%d calls through the writer's client, want at most the patch", counting.calls)
			}
			if tc.wantQuick && took > tc.wait/2+100*time.Millisecond {
				t.Errorf("answered in %v, want well within the wait of %v", took, tc.wait)
			}
		})
	}
}

// TestReservationLabelerRelabelBudget: reviews that make the labeler label
// one pod again and again (a forger alternating the node while the stored
// claim is unallocated) patch it at most once plus the relabel burst; the
// rest are deferred to the reconciler and counted.
func TestReservationLabelerRelabelBudget(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	device := &resourceapi.Device{Name: "swap"}
	nodes := fakeNodes{"node-a": {Labels: map[string]string{podlabels.Zone: "a"}, Device: device}, "node-b": {Labels: map[string]string{podlabels.Zone: "b"}, Device: device}}
	stored := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To("c")}}}}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(stored, pod).Build()
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), stored); err != nil {
		t.Fatal(err)
	}
	patched, deferred := 0, map[string]int{}
	const burst = 3
	h := &ReservationLabeler{Claims: c, Pods: c, Client: c, Nodes: nodes, Policy: podlabels.Policy{Selection: podlabels.SelectSwapClaims},
		Patches: NewPatchBudget(100, 0.001, burst), Patched: func() { patched++ }, Deferred: func(r string) { deferred[r]++ }}
	const reviews = 50
	for i := range reviews {
		node := []string{"node-a", "node-b"}[i%2]
		claim := stored.DeepCopy()
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "swap", Driver: v1alpha1.DriverName, Pool: node, Device: "swap"}}}}
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "uid-p"}}
		if resp := h.Handle(ctx, claimStatusRequest(t, stored, claim, false)); !resp.Allowed {
			t.Fatalf("denied: %+v", resp.Result)
		}
	}
	// After the last patch, half the reviews name the node the pod has
	// the labels of: nothing to change.
	if want := (reviews - 1 - burst + 1) / 2; patched != 1+burst || deferred[DeferredRelabelBudget] != want {
		t.Errorf("%d reviews alternating the node: %d patches, deferred %v; want %d patches and %d deferred", reviews, patched, deferred, 1+burst, want)
	}
}
