package scale

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

// fitting is a consistent swap-mode snapshot: two nodes, a pod on each
// with an allocated, reserved claim and its node's labels, and one node's
// device full to its offer.
func fitting(t *testing.T) snapshot {
	t.Helper()
	s := snapshot{mode: Modes()[2]}
	for i := range 2 {
		s.nodes = append(s.nodes, *simulatedNode(i))
		rs, err := swapSlice(i, offerBytes)
		if err != nil {
			t.Fatal(err)
		}
		s.slices = append(s.slices, *rs, *noopSlice(i))
	}
	pod := func(name string, node int, request int64) {
		uid := types.UID("uid-" + name)
		p := corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, Labels: map[string]string{
				podlabels.Hostname: nodeName(node), podlabels.Zone: nodeLabels(node)[podlabels.Zone], podlabels.Region: nodeLabels(node)[podlabels.Region],
				v1alpha1.LabelSwapBehavior: "NoSwap",
			}},
			Spec:   corev1.PodSpec{NodeName: nodeName(node)},
			Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "dev", ResourceClaimName: ptr.To(name + "-dev")}}},
		}
		q := *resource.NewQuantity(request, resource.BinarySI)
		c := resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-dev"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: v1alpha1.DriverName, Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{v1alpha1.CapacitySwap: q}},
			}}}}},
			Status: resourceapi.ResourceClaimStatus{
				Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: "dev", Driver: v1alpha1.DriverName, Pool: nodeName(node), Device: v1alpha1.DeviceName,
					ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{v1alpha1.CapacitySwap: q},
				}}}},
				ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: uid}},
			},
		}
		s.pods = append(s.pods, p)
		s.claims = append(s.claims, c)
	}
	pod("a", 0, offerBytes)
	pod("b", 1, requestBytes)
	return s
}

// TestCheck shows that each invariant check catches what it is about.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(s *snapshot)
		want   string // "" for no violation
	}{
		{name: "consistent", mutate: func(*snapshot) {}},
		{name: "unbound pod", mutate: func(s *snapshot) { s.pods[1].Spec.NodeName = "" }, want: "pod b is not bound"},
		{name: "bound to no node", mutate: func(s *snapshot) { s.pods[1].Spec.NodeName = "gone" }, want: "which is no node"},
		{name: "claim not allocated", mutate: func(s *snapshot) { s.claims[1].Status.Allocation = nil }, want: "is not allocated one device"},
		{name: "claim not reserved", mutate: func(s *snapshot) { s.claims[1].Status.ReservedFor = nil }, want: "is not reserved for it"},
		{name: "device of another node", mutate: func(s *snapshot) {
			s.claims[1].Status.Allocation.Devices.Results[0].Pool = nodeName(0)
		}, want: "has a device of node node-00000"},
		{name: "device of another driver", mutate: func(s *snapshot) {
			s.claims[1].Status.Allocation.Devices.Results[0].Driver = "noop.dra.example.com"
		}, want: "allocated from driver noop.dra.example.com"},
		{name: "consumes less than requested", mutate: func(s *snapshot) {
			s.claims[1].Status.Allocation.Devices.Results[0].ConsumedCapacity[v1alpha1.CapacitySwap] = resource.MustParse("1Mi")
		}, want: "consumes 1Mi of swap, requests 64Mi"},
		{name: "node over its offer", mutate: func(s *snapshot) {
			rs, err := swapSlice(0, offerBytes/2)
			if err != nil {
				t.Fatal(err)
			}
			s.slices[0] = *rs
		}, want: "node node-00000: device swap has 8Gi allocated, over its offer of 4Gi"},
		{name: "two pods over one offer", mutate: func(s *snapshot) {
			s.pods[1].Spec.NodeName = nodeName(0)
			s.pods[1].Labels = s.pods[0].Labels
			s.claims[1].Status.Allocation.Devices.Results[0].Pool = nodeName(0)
		}, want: "over its offer of 8Gi"},
		{name: "pod not labeled", mutate: func(s *snapshot) { delete(s.pods[1].Labels, v1alpha1.LabelSwapBehavior) }, want: `pod b on node node-00001: label node.kubernetes.io/swap-behavior="", want "NoSwap"`},
		{name: "another node's zone", mutate: func(s *snapshot) { s.pods[1].Labels[podlabels.Zone] = "zone-0" }, want: `label topology.kubernetes.io/zone="zone-0", want "zone-1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fitting(t)
			tc.mutate(&s)
			got := check(s)
			if tc.want == "" {
				if len(got) > 0 {
					t.Fatalf("violations %q, want none", got)
				}
				return
			}
			if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.want) {
				t.Fatalf("violations %q, want one with %q", got, tc.want)
			}
		})
	}
}
