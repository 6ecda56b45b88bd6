package webhook

import (
	"context"
	"encoding/json"
	"maps"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/pkg/labels"
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
	swapNode := labels.Node{
		Labels: map[string]string{labels.Zone: "z1", "example.com/rack": "r1"},
		Device: &resourceapi.Device{Name: "swap", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"swapBehavior": {StringValue: ptr.To("NoSwap")}, "kubernetes.io/hostname": {StringValue: ptr.To("host-1")},
		}},
	}
	nodes := fakeNodes{"swap-node": swapNode, "plain-node": {Labels: map[string]string{labels.Zone: "z1"}}}
	allocated := func(node string, reserved ...string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "swap", Driver: labels.DriverName, Pool: node, Device: "swap"}}}}
		for _, name := range reserved {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: name, UID: types.UID("uid-" + name)})
		}
		return c
	}
	want := map[string]string{labels.Zone: "z1", labels.Hostname: "host-1", labels.SwapBehavior: "NoSwap", "example.com/rack": "r1"}
	tests := []struct {
		name       string
		old, claim *resourceapi.ResourceClaim
		dryRun     bool
		wantLabels map[string]map[string]string // pod -> labels after
	}{
		{name: "the scheduler allocates and reserves for a pod", old: &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}},
			claim: allocated("swap-node", "p1"), wantLabels: map[string]map[string]string{"p1": want, "p2": {}}},
		{name: "a second pod is reserved: only it is labeled", old: allocated("swap-node", "p1"), claim: allocated("swap-node", "p1", "p2"),
			wantLabels: map[string]map[string]string{"p1": {}, "p2": want}},
		{name: "dry run labels nothing", old: allocated("swap-node"), claim: allocated("swap-node", "p1"), dryRun: true,
			wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "node without the driver", old: allocated("plain-node"), claim: allocated("plain-node", "p1"),
			wantLabels: map[string]map[string]string{"p1": {}}},
		{name: "unreadable node: allowed, nothing labeled", old: allocated("broken"), claim: allocated("broken", "p1"),
			wantLabels: map[string]map[string]string{"p1": {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods := []*corev1.Pod{
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1", UID: "uid-p1"}},
				{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p2", UID: "uid-p2"}},
			}
			builder := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
			for _, p := range pods {
				builder = builder.WithObjects(p)
			}
			c := builder.Build()
			patched := 0
			h := &ReservationLabeler{Pods: c, Client: c, Nodes: nodes, Policy: labels.Policy{Allowlist: []string{"example.com/rack"}, Selection: labels.SelectSwapClaims},
				Patched: func() { patched++ }}
			resp := h.Handle(ctx, claimStatusRequest(t, tc.old, tc.claim, tc.dryRun))
			if !resp.Allowed || len(resp.Patches) > 0 {
				t.Fatalf("response %+v: want allowed, unchanged", resp.AdmissionResponse)
			}
			wantPatched := 0
			for name, wantLabels := range tc.wantLabels {
				pod := &corev1.Pod{}
				if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, pod); err != nil {
					t.Fatal(err)
				}
				if !maps.Equal(pod.Labels, wantLabels) && !(len(pod.Labels) == 0 && len(wantLabels) == 0) {
					t.Errorf("pod %s labels %v, want %v", name, pod.Labels, wantLabels)
				}
				if len(wantLabels) > 0 {
					wantPatched++
					if pod.Annotations[labels.ManagedAnnotation] != labels.Managed(wantLabels) {
						t.Errorf("pod %s managed annotation %q", name, pod.Annotations[labels.ManagedAnnotation])
					}
				}
			}
			if patched != wantPatched {
				t.Errorf("patched %d pods, want %d", patched, wantPatched)
			}
		})
	}
}
