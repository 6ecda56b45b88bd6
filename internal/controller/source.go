// Package controller keeps pod and node labels in step with what the
// kubelet plugins publish: a pod reconciler that copies topology and swap
// labels onto selected pods (covering pods the binding webhook missed and
// node changes), and a node reconciler for the swap-behavior label (the
// key KEP-5425 proposed). It reads through a controller-runtime cache and decides nothing
// itself: internal/controller/podlabels does.
package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/webhook"
)

// Field indexes registered by Setup.
const (
	// IndexNodeName indexes pods and the driver's ResourceSlices by node.
	IndexNodeName = "spec.nodeName"
	// IndexDriver indexes the driver's own ResourceSlices (by driver
	// name), so reads over every node's offer skip other drivers' slices.
	IndexDriver = "spec.driver"
)

// driverSlices lists the driver's ResourceSlices from the cache without
// copying them (a review or a pending pod reads every node's offer: at
// 5,000 nodes, copies of every slice per review held the controller's
// heap near 1 GiB). The caller must not change them.
func driverSlices(ctx context.Context, r client.Reader) ([]resourceapi.ResourceSlice, error) {
	list := &resourceapi.ResourceSliceList{}
	if err := r.List(ctx, list, client.MatchingFields{IndexDriver: v1alpha1.DriverName}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list the %s ResourceSlices: %w", v1alpha1.DriverName, err)
	}
	return list.Items, nil
}

// sliceDriver is IndexDriver's function: the driver's slices only.
func sliceDriver(o client.Object) []string {
	if d := o.(*resourceapi.ResourceSlice).Spec.Driver; d == v1alpha1.DriverName {
		return []string{d}
	}
	return nil
}

// Nodes reads what the controller knows of a node from the cache.
type Nodes struct {
	Reader client.Reader
}

// Node returns the node's labels and the dra.swap device its plugin
// published. A node that does not exist has no labels and no device.
func (n Nodes) Node(ctx context.Context, name string) (podlabels.Node, error) {
	var out podlabels.Node
	node := &corev1.Node{}
	switch err := n.Reader.Get(ctx, types.NamespacedName{Name: name}, node); {
	case apierrors.IsNotFound(err):
		return out, nil
	case err != nil:
		return out, fmt.Errorf("get node %s: %w", name, err)
	}
	out.Labels = node.Labels
	slices := &resourceapi.ResourceSliceList{}
	if err := n.Reader.List(ctx, slices, client.MatchingFields{IndexNodeName: name}); err != nil {
		return out, fmt.Errorf("list ResourceSlices of node %s: %w", name, err)
	}
	for i := range slices.Items {
		s := &slices.Items[i]
		if !trusted(s) {
			continue
		}
		for j := range s.Spec.Devices {
			if s.Spec.Devices[j].Name == v1alpha1.DeviceName {
				out.Device = &s.Spec.Devices[j]
			}
		}
	}
	return out, nil
}

// trusted tells a ResourceSlice the way the kubelet plugin writes it: of
// the driver, for one node, in the pool named after that node. The chart's
// ValidatingAdmissionPolicy lets only the plugin on a node write the
// driver's slices for that node, so a slice like this says what that
// node's plugin published.
func trusted(s *resourceapi.ResourceSlice) bool {
	return s.Spec.Driver == v1alpha1.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName != "" && s.Spec.Pool.Name == *s.Spec.NodeName
}

// Support counts the nodes whose swap device says they offload, and those
// that can keep pages compressed only (webhook.SupportSource).
func (n Nodes) Support(ctx context.Context) (webhook.NodeSupport, error) {
	slices, err := driverSlices(ctx, n.Reader)
	if err != nil {
		return webhook.NodeSupport{}, err
	}
	var out webhook.NodeSupport
	for i := range slices {
		s := &slices[i]
		if !trusted(s) {
			continue
		}
		for j := range s.Spec.Devices {
			d := &s.Spec.Devices[j]
			if d.Name != v1alpha1.DeviceName {
				continue
			}
			out.Nodes++
			is := func(name resourceapi.QualifiedName) bool {
				a := d.Attributes[name]
				return a.BoolValue != nil && *a.BoolValue
			}
			if is(v1alpha1.AttrOffload) {
				out.Offload++
			}
			if is(v1alpha1.AttrZswap) && is(v1alpha1.AttrZswapWriteback) {
				out.CompressedOnly++
			}
		}
	}
	return out, nil
}

// LargestOffer is the largest swap capacity any node's device offers.
func (n Nodes) LargestOffer(ctx context.Context) (int64, error) {
	slices, err := driverSlices(ctx, n.Reader)
	if err != nil {
		return 0, err
	}
	var largest int64
	for i := range slices {
		s := &slices[i]
		if !trusted(s) {
			continue
		}
		for j := range s.Spec.Devices {
			if c, ok := s.Spec.Devices[j].Capacity[v1alpha1.CapacitySwap]; ok {
				largest = max(largest, c.Value.Value())
			}
		}
	}
	return largest, nil
}

// Pods decides whether a pod is selected for labels, from the cache.
type Pods struct {
	Reader client.Reader
	Policy podlabels.Policy
}

// Selected reports whether the policy selects the pod.
func (p Pods) Selected(ctx context.Context, pod *corev1.Pod) (bool, error) {
	hasClaim, err := p.hasSwapClaim(ctx, pod)
	if err != nil {
		return false, err
	}
	var nsLabels map[string]string
	if p.Policy.Selection == podlabels.SelectNamespaces && !hasClaim {
		ns := &corev1.Namespace{}
		if err := p.Reader.Get(ctx, types.NamespacedName{Name: pod.Namespace}, ns); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("get namespace %s: %w", pod.Namespace, err)
		}
		nsLabels = ns.Labels
	}
	return p.Policy.Selects(hasClaim, nsLabels), nil
}

func (p Pods) hasSwapClaim(ctx context.Context, pod *corev1.Pod) (bool, error) {
	if p.Policy.Selection == podlabels.SelectAll {
		return false, nil // not needed
	}
	for _, name := range podlabels.ClaimNames(pod) {
		key := types.NamespacedName{Namespace: pod.Namespace, Name: name}
		claim := &resourceapi.ResourceClaim{}
		switch err := p.Reader.Get(ctx, key, claim); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, fmt.Errorf("get ResourceClaim %s: %w", key, err)
		case podlabels.HasSwapDevice(claim):
			return true, nil
		}
	}
	return false, nil
}
