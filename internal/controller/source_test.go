package controller

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/webhook"
)

// TestNodesSupport counts, from the nodes' own slices only, the nodes
// whose swap device offloads and those with zswap on and
// memory.zswap.writeback.
func TestNodesSupport(t *testing.T) {
	with := func(node string, attrs map[resourceapi.QualifiedName]bool) *resourceapi.ResourceSlice {
		s := swapSlice(node, "NoSwap", "1Gi")
		for name, v := range attrs {
			s.Spec.Devices[0].Attributes[name] = resourceapi.DeviceAttribute{BoolValue: ptr.To(v)}
		}
		return s
	}
	capable := with("a", map[resourceapi.QualifiedName]bool{v1alpha1.AttrOffload: true, v1alpha1.AttrZswap: true, v1alpha1.AttrZswapWriteback: true})
	offloadOnly := with("b", map[resourceapi.QualifiedName]bool{v1alpha1.AttrOffload: true, v1alpha1.AttrZswap: false, v1alpha1.AttrZswapWriteback: true})
	v1 := with("c", map[resourceapi.QualifiedName]bool{v1alpha1.AttrOffload: false})
	// A slice not of its node's pool says nothing about any node.
	forged := with("d", map[resourceapi.QualifiedName]bool{v1alpha1.AttrOffload: true, v1alpha1.AttrZswap: true, v1alpha1.AttrZswapWriteback: true})
	forged.Spec.Pool.Name = "a"
	_, ctx := ktesting.NewTestContext(t)
	got, err := Nodes{Reader: newClient(capable, offloadOnly, v1, forged)}.Support(ctx)
	if want := (webhook.NodeSupport{Nodes: 3, Offload: 2, CompressedOnly: 1}); err != nil || got != want {
		t.Errorf("Support = %+v, %v; want %+v", got, err, want)
	}
}
