package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

func claimStatusRequest(t *testing.T, old, claim *resourceapi.ResourceClaim, dryRun bool) admission.Request {
	t.Helper()
	raw := func(c *resourceapi.ResourceClaim) []byte {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Update, SubResource: "status", Namespace: "ns", Name: claim.Name,
		Kind:   metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"},
		Object: runtime.RawExtension{Raw: raw(claim)}, OldObject: runtime.RawExtension{Raw: raw(old)},
		DryRun: ptr.To(dryRun),
	}}
}

func TestReservationLabeler(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	swapNode := podlabels.Node{
		Labels: map[string]string{podlabels.Zone: "z1", "example.com/rack": "r1"},
		Device: &resourceapi.Device{Name: "swap", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"swapBehavior": {StringValue: ptr.To("NoSwap")}, "kubernetes.io/hostname": {StringValue: ptr.To("host-1")},
		}},
	}
	otherSwapNode := podlabels.Node{Labels: map[string]string{podlabels.Zone: "z2"}, Device: swapNode.Device}
	nodes := fakeNodes{"swap-node": swapNode, "other-swap-node": otherSwapNode, "plain-node": {Labels: map[string]string{podlabels.Zone: "z1"}}}
	// claim is the claim "c" in "ns" (UID uid-c, resourceVersion "1")
	// allocated on node ("" unallocated) and reserved for pods.
	claim := func(node string, reserved ...string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "1"}}
		if node != "" {
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "swap", Driver: v1alpha1.DriverName, Pool: node, Device: "swap"}}}}
		}
		for _, name := range reserved {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: name, UID: types.UID("uid-" + name)})
		}
		return c
	}
	with := func(c *resourceapi.ResourceClaim, f func(*resourceapi.ResourceClaim)) *resourceapi.ResourceClaim {
		f(c)
		return c
	}
	// extended makes c the claim the scheduler creates for pod's extended
	// resources: annotated, controlled by the pod.
	extended := func(c *resourceapi.ResourceClaim, pod string) *resourceapi.ResourceClaim {
		c.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod, UID: types.UID("uid-" + pod), Controller: ptr.To(true)}}
		return c
	}
	want := map[string]string{podlabels.Zone: "z1", podlabels.Hostname: "host-1", v1alpha1.LabelSwapBehavior: "NoSwap", "example.com/rack": "r1"}
	tests := []struct {
		name       string
		stored     *resourceapi.ResourceClaim // nil: the review's old object
		old, claim *resourceapi.ResourceClaim
		dryRun     bool
		wantLabels map[string]map[string]string // pod -> labels after
	}{
		{name: "the scheduler allocates and reserves for a pod", old: claim(""),
			claim: claim("swap-node", "p1"), wantLabels: map[string]map[string]string{"p1": want, "p2": {}}},
		{name: "a second pod is reserved: only it is labeled", old: claim("swap-node", "p1"), claim: claim("swap-node", "p1", "p2"),
			wantLabels: map[string]map[string]string{"p1": {}, "p2": want}},
		{name: "dry run labels nothing", old: claim("swap-node"), claim: claim("swap-node", "p1"), dryRun: true,
			wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "node without the driver", old: claim("plain-node"), claim: claim("plain-node", "p1"),
			wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "unreadable node: allowed, nothing labeled", old: claim(""), claim: claim("broken", "p1"),
			wantLabels: map[string]map[string]string{"p1": {}}},
		// Forged reviews: what the API does not confirm is not acted on.
		{name: "the stored claim is allocated elsewhere: the review's node is not taken", stored: claim("other-swap-node"),
			old: claim("swap-node"), claim: claim("swap-node", "p1"), wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "a pod the stored claim already reserves is not new", stored: claim("swap-node", "p1"),
			old: claim("swap-node"), claim: claim("swap-node", "p1"), wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "an old object that is not the stored claim", stored: with(claim(""), func(c *resourceapi.ResourceClaim) { c.ResourceVersion = "2" }),
			old: claim(""), claim: claim("swap-node", "p1"), wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "a claim that is not stored", stored: with(claim(""), func(c *resourceapi.ResourceClaim) { c.Name = "other" }),
			old: claim(""), claim: claim("swap-node", "p1"), wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "a claim of another UID", stored: with(claim(""), func(c *resourceapi.ResourceClaim) { c.UID = "uid-x" }),
			old: claim(""), claim: claim("swap-node", "p1"), wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "a pod that does not use the claim", old: claim(""), claim: claim("swap-node", "p3"),
			wantLabels: map[string]map[string]string{"p3": {}}},
		{name: "a pod with another UID", old: claim(""),
			claim:      with(claim("swap-node", "p1"), func(c *resourceapi.ResourceClaim) { c.Status.ReservedFor[0].UID = "uid-x" }),
			wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "a bound pod is the reconciler's", old: claim(""), claim: claim("swap-node", "bound"),
			wantLabels: map[string]map[string]string{"bound": {}}},
		{name: "a pod of another namespace", old: claim(""),
			claim:      with(claim("swap-node", "elsewhere"), func(c *resourceapi.ResourceClaim) { c.Status.ReservedFor[0].UID = "uid-elsewhere" }),
			wantLabels: map[string]map[string]string{"elsewhere": {}}},
		// The claim the scheduler makes for a pod's extended resources: it
		// reserves it before the pod's status names it.
		{name: "the scheduler's extended-resource claim of a pod", old: extended(claim(""), "ext"), claim: extended(claim("swap-node", "ext"), "ext"),
			wantLabels: map[string]map[string]string{"ext": want}},
		{name: "an extended-resource claim of another pod", old: extended(claim(""), "ext"), claim: extended(claim("swap-node", "ext-too"), "ext"),
			wantLabels: map[string]map[string]string{"ext-too": {}}},
		{name: "an annotated claim controlled by a pod that requests no extended resource", old: extended(claim(""), "p3"), claim: extended(claim("swap-node", "p3"), "p3"),
			wantLabels: map[string]map[string]string{"p3": {}}},
		{name: "more than the API's 256 reservations are ignored", old: claim(""),
			claim: with(claim("swap-node", "p1"), func(c *resourceapi.ResourceClaim) {
				for i := range MaxReservedFor {
					c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p1", UID: types.UID(fmt.Sprint(i))})
				}
			}),
			wantLabels: map[string]map[string]string{"p1": {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			uses := []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To("c")}}
			swapResource := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix + "dra.swap"): resource.MustParse("1")}}
			pods := []*corev1.Pod{
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1", UID: "uid-p1"}, Spec: corev1.PodSpec{ResourceClaims: uses}},
				// p2's claim comes from a template.
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p2", UID: "uid-p2"}, Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "swap", ResourceClaimTemplateName: ptr.To("t")}}},
					Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "swap", ResourceClaimName: ptr.To("c")}}}},
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p3", UID: "uid-p3"}},
				// ext and ext-too ask for swap as an extended resource.
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ext", UID: "uid-ext"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: swapResource}}}},
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ext-too", UID: "uid-ext-too"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: swapResource}}}},
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bound", UID: "uid-bound"}, Spec: corev1.PodSpec{ResourceClaims: uses, NodeName: "swap-node"}},
				{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "elsewhere", UID: "uid-elsewhere"}, Spec: corev1.PodSpec{ResourceClaims: uses}},
			}
			stored := tc.stored
			if stored == nil {
				stored = tc.old.DeepCopy()
			}
			stored.ResourceVersion = "" // the fake client sets it
			builder := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(stored)
			for _, p := range pods {
				builder = builder.WithObjects(p)
			}
			c := builder.Build()
			if err := c.Get(ctx, types.NamespacedName{Namespace: stored.Namespace, Name: stored.Name}, stored); err != nil {
				t.Fatal(err)
			}
			if tc.stored == nil {
				tc.old.ResourceVersion, tc.claim.ResourceVersion = stored.ResourceVersion, stored.ResourceVersion
			}
			patched := 0
			h := &ReservationLabeler{Claims: c, Pods: c, Client: c, Nodes: nodes, Policy: podlabels.Policy{Allowlist: []string{"example.com/rack"}, Selection: podlabels.SelectSwapClaims},
				Patched: func() { patched++ }}
			resp := h.Handle(ctx, claimStatusRequest(t, tc.old, tc.claim, tc.dryRun))
			if !resp.Allowed || len(resp.Patches) > 0 {
				t.Fatalf("response %+v: want allowed, unchanged", resp.AdmissionResponse)
			}
			wantPatched := 0
			for name, wantLabels := range tc.wantLabels {
				pod := &corev1.Pod{}
				ns := "ns"
				if name == "elsewhere" {
					ns = "other"
				}
				if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, pod); err != nil {
					t.Fatal(err)
				}
				if !maps.Equal(pod.Labels, wantLabels) && !(len(pod.Labels) == 0 && len(wantLabels) == 0) {
					t.Errorf("pod %s labels %v, want %v", name, pod.Labels, wantLabels)
				}
				if len(wantLabels) > 0 {
					wantPatched++
					if pod.Annotations[v1alpha1.AnnotationManagedLabels] != podlabels.Managed(wantLabels) {
						t.Errorf("pod %s managed annotation %q", name, pod.Annotations[v1alpha1.AnnotationManagedLabels])
					}
				}
			}
			if patched != wantPatched {
				t.Errorf("patched %d pods, want %d", patched, wantPatched)
			}
		})
	}
}

// countingClient counts the reads and writes of a review.
type countingClient struct {
	client.Client
	calls int
}

func (c *countingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.calls++
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.calls++
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// TestReservationLabelerBounds: a review with many reservations costs at
// most one claim read and MaxNewReservations pods (read through the cache,
// then the API server, and patched), however many entries it lists and
// however often it lists each.
func TestReservationLabelerBounds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes := fakeNodes{"swap-node": {Labels: map[string]string{podlabels.Zone: "z1"}, Device: &resourceapi.Device{Name: "swap"}}}
	stored := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"}}
	uses := []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To("c")}}
	builder := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(stored)
	for i := range 300 {
		builder = builder.WithObjects(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}, Spec: corev1.PodSpec{ResourceClaims: uses}})
	}
	c := builder.Build()
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "c"}, stored); err != nil {
		t.Fatal(err)
	}
	review := func(entries int, distinct int) *resourceapi.ResourceClaim {
		claim := stored.DeepCopy()
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "swap", Driver: v1alpha1.DriverName, Pool: "swap-node", Device: "swap"}}}}
		for i := range entries {
			n := i % distinct
			claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: fmt.Sprintf("p%d", n), UID: types.UID(fmt.Sprintf("uid-%d", n))})
		}
		return claim
	}
	tests := []struct {
		name              string
		entries, distinct int
		wantLabeled       int
	}{
		{name: "one pod", entries: 1, distinct: 1, wantLabeled: 1},
		{name: "the API's 256, one pod listed 256 times", entries: 256, distinct: 1, wantLabeled: 1},
		{name: "the API's 256, all distinct", entries: 256, distinct: 256, wantLabeled: MaxNewReservations},
		{name: "20,000 entries: not a review the API server sends", entries: 20000, distinct: 300},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			counting := &countingClient{Client: c}
			patched := 0
			h := &ReservationLabeler{Claims: counting, Pods: counting, Client: counting, Nodes: nodes,
				Policy: podlabels.Policy{Selection: podlabels.SelectSwapClaims}, Patched: func() { patched++ }}
			resp := h.Handle(ctx, claimStatusRequest(t, stored, review(tc.entries, tc.distinct), false))
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if patched > tc.wantLabeled {
				t.Errorf("labeled %d pods, want at most %d", patched, tc.wantLabeled)
			}
			if limit := 1 + 3*MaxNewReservations; counting.calls > limit {
				t.Errorf("%d reads and writes, want at most %d", counting.calls, limit)
			}
			// Undo, for the next case.
			for i := range 300 {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%d", i)}}
				if err := c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":null,"annotations":null}}`))); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
