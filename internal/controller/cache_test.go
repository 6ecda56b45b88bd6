package controller

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// TestTrimClaim: the cache keeps of a claim only what the controller
// reads (identity; the allocation's node selector and dra.swap results and,
// for a swap claim, its reservations; the requested classes of an
// unallocated claim), whatever else the claim holds.
func TestTrimClaim(t *testing.T) {
	meta := metav1.ObjectMeta{
		Name: "c", Namespace: "ns", UID: "uid-c", ResourceVersion: "7",
		Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"big": string(make([]byte, 4096))},
		Finalizers:      []string{"resource.kubernetes.io/delete-protection"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-p"}},
	}
	kept := metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-c", ResourceVersion: "7"}
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			{Name: "swap", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "dra.swap",
				Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "true"}}},
				Capacity:        &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse("1Gi")}},
			}},
			{Name: "alt", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "fast-swap", AllocationMode: resourceapi.DeviceAllocationModeAll}}},
		},
		Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: v1alpha1.DriverName, Parameters: runtime.RawExtension{Raw: []byte(`{"kind":"SwapConfig"}`)},
		}}}},
	}}
	onNode := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}},
	}}}}
	reserved := []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "uid-p"}}
	gpu := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0", AdminAccess: ptr.To(false)}
	swap := resourceapi.DeviceRequestAllocationResult{Request: "swap", Driver: v1alpha1.DriverName, Pool: "node-a", Device: "swap",
		ShareID: ptr.To(apitypes.UID("a1b2")), ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse("1Gi")}}
	status := func(results ...resourceapi.DeviceRequestAllocationResult) resourceapi.ResourceClaimStatus {
		return resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{NodeSelector: onNode, Devices: resourceapi.DeviceAllocationResult{Results: results}},
			ReservedFor: reserved,
			Devices:     []resourceapi.AllocatedDeviceStatus{{Driver: v1alpha1.DriverName, Pool: "node-a", Device: "swap", Data: &runtime.RawExtension{Raw: []byte(`{"x":1}`)}}},
		}
	}
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  *resourceapi.ResourceClaim
	}{
		{
			name:  "unallocated: the requested classes",
			claim: &resourceapi.ResourceClaim{ObjectMeta: meta, Spec: spec},
			want: &resourceapi.ResourceClaim{ObjectMeta: kept, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
				{Name: "swap", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "dra.swap"}},
				{Name: "alt", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "fast-swap"}}},
			}}}},
		},
		{
			name:  "allocated to dra.swap and another driver: the swap result, the node selector, the reservations",
			claim: &resourceapi.ResourceClaim{ObjectMeta: meta, Spec: spec, Status: status(gpu, swap)},
			want: &resourceapi.ResourceClaim{ObjectMeta: kept, Status: resourceapi.ResourceClaimStatus{
				Allocation: &resourceapi.AllocationResult{NodeSelector: onNode, Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
					{Request: "swap", Driver: v1alpha1.DriverName, Pool: "node-a", Device: "swap"},
				}}},
				ReservedFor: reserved,
			}},
		},
		{
			name:  "another driver's claim: allocated, nothing else",
			claim: &resourceapi.ResourceClaim{ObjectMeta: meta, Spec: spec, Status: status(gpu)},
			want: &resourceapi.ResourceClaim{ObjectMeta: kept, Status: resourceapi.ResourceClaimStatus{
				Allocation: &resourceapi.AllocationResult{NodeSelector: onNode},
			}},
		},
	}
	// The scheduler's claim for a pod's extended resources: its annotation
	// and controlling pod stay (podlabels.UsesClaim reads them), nothing
	// else of the metadata.
	ext := meta
	ext.Annotations = map[string]string{"big": "x", resourceapi.ExtendedResourceClaimAnnotation: "true"}
	ext.OwnerReferences = []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "m", UID: "uid-m"},
		{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-p", Controller: ptr.To(true)},
	}
	extKept := kept
	extKept.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
	extKept.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-p", Controller: ptr.To(true)}}
	tests = append(tests, struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  *resourceapi.ResourceClaim
	}{
		name:  "an extended-resource claim: its annotation and controlling pod",
		claim: &resourceapi.ResourceClaim{ObjectMeta: ext, Spec: spec, Status: status(swap)},
		want: &resourceapi.ResourceClaim{ObjectMeta: extKept, Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{NodeSelector: onNode, Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "swap", Driver: v1alpha1.DriverName, Pool: "node-a", Device: "swap"},
			}}},
			ReservedFor: reserved,
		}},
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trimClaim(tc.claim)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("trimmed to\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
	if got, _ := trimClaim("not a claim"); got != "not a claim" {
		t.Errorf("a tombstone changed: %v", got)
	}
}
