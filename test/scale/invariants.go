package scale

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

// snapshot is what the invariants are checked on: one mode's pods and
// claims, and every node and slice of the mode's driver.
type snapshot struct {
	mode   Mode
	pods   []corev1.Pod
	claims []resourceapi.ResourceClaim
	slices []resourceapi.ResourceSlice
	nodes  []corev1.Node
}

// maxViolations is how many violations check names; it counts the rest.
const maxViolations = 20

// violations collects what check finds, the first maxViolations of them
// named.
type violations struct {
	named []string
	more  int
}

func (v *violations) add(format string, args ...any) {
	if len(v.named) < maxViolations {
		v.named = append(v.named, fmt.Sprintf(format, args...))
		return
	}
	v.more++
}

func (v *violations) list() []string {
	if v.more > 0 {
		return append(v.named, fmt.Sprintf("and %d more", v.more))
	}
	return v.named
}

// check returns what breaks the invariants that hold at any scale:
//   - every pod is bound to an existing node;
//   - with a claim: the pod's claim is allocated from a device of the
//     mode's driver in the pool of the pod's node, published by a slice of
//     that node, reserved for the pod, consuming at least what it requests;
//   - no node's device has more consumed than its capacity (its offer);
//   - swap claims: every pod carries its node's hostname, zone and region
//     and the swap behavior its device publishes.
func check(s snapshot) []string {
	var v violations
	nodes := map[string]*corev1.Node{}
	for i := range s.nodes {
		nodes[s.nodes[i].Name] = &s.nodes[i]
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	for i := range s.claims {
		claims[s.claims[i].Name] = &s.claims[i]
	}
	// devices of the mode's driver by pool (named after the node).
	type published struct {
		node   string
		device *resourceapi.Device
	}
	devices := map[string]map[string]published{}
	for i := range s.slices {
		rs := &s.slices[i]
		if rs.Spec.Driver != s.mode.Driver || rs.Spec.NodeName == nil {
			continue
		}
		if devices[rs.Spec.Pool.Name] == nil {
			devices[rs.Spec.Pool.Name] = map[string]published{}
		}
		for j := range rs.Spec.Devices {
			devices[rs.Spec.Pool.Name][rs.Spec.Devices[j].Name] = published{node: *rs.Spec.NodeName, device: &rs.Spec.Devices[j]}
		}
	}
	type use struct {
		pool, device string
	}
	consumed := map[use]*resource.Quantity{}
	for i := range s.pods {
		pod := &s.pods[i]
		node := nodes[pod.Spec.NodeName]
		switch {
		case pod.Spec.NodeName == "":
			v.add("pod %s is not bound", pod.Name)
			continue
		case node == nil:
			v.add("pod %s is bound to %s, which is no node", pod.Name, pod.Spec.NodeName)
			continue
		}
		if s.mode.Driver == "" {
			continue
		}
		claim := claimOf(pod, claims)
		if claim == nil {
			v.add("pod %s: no claim", pod.Name)
			continue
		}
		if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
			v.add("pod %s: claim %s is not allocated one device", pod.Name, claim.Name)
			continue
		}
		if !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID }) {
			v.add("pod %s: claim %s is not reserved for it", pod.Name, claim.Name)
		}
		r := claim.Status.Allocation.Devices.Results[0]
		dev, ok := devices[r.Pool][r.Device]
		switch {
		case r.Driver != s.mode.Driver:
			v.add("pod %s: claim %s allocated from driver %s, want %s", pod.Name, claim.Name, r.Driver, s.mode.Driver)
			continue
		case !ok:
			v.add("pod %s: claim %s allocated device %s/%s, which no slice publishes", pod.Name, claim.Name, r.Pool, r.Device)
			continue
		case dev.node != pod.Spec.NodeName:
			v.add("pod %s on node %s: its claim %s has a device of node %s", pod.Name, pod.Spec.NodeName, claim.Name, dev.node)
			continue
		}
		got, ok := r.ConsumedCapacity[s.mode.Capacity]
		if want := requested(claim, s.mode.Capacity); !ok || got.Cmp(want) < 0 {
			v.add("pod %s: claim %s consumes %v of %s, requests %v", pod.Name, claim.Name, got.String(), s.mode.Capacity, want.String())
		}
		u := use{r.Pool, r.Device}
		if consumed[u] == nil {
			consumed[u] = resource.NewQuantity(0, resource.BinarySI)
		}
		consumed[u].Add(got)
		if s.mode.Driver == v1alpha1.DriverName {
			checkLabels(&v, pod, node, dev.device)
		}
	}
	for _, u := range slices.SortedFunc(maps.Keys(consumed), func(a, b use) int {
		return cmp.Or(cmp.Compare(a.pool, b.pool), cmp.Compare(a.device, b.device))
	}) {
		capacity := devices[u.pool][u.device].device.Capacity[s.mode.Capacity].Value
		if consumed[u].Cmp(capacity) > 0 {
			v.add("node %s: device %s has %v allocated, over its offer of %v", u.pool, u.device, consumed[u].String(), capacity.String())
		}
	}
	return v.list()
}

// claimOf is the pod's claim (the first of its status).
func claimOf(pod *corev1.Pod, claims map[string]*resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			return claims[*s.ResourceClaimName]
		}
	}
	return nil
}

// requested is the capacity the claim's first request asks for.
func requested(claim *resourceapi.ResourceClaim, name resourceapi.QualifiedName) resource.Quantity {
	for _, r := range claim.Spec.Devices.Requests {
		if r.Exactly != nil && r.Exactly.Capacity != nil {
			return r.Exactly.Capacity.Requests[name]
		}
	}
	return resource.Quantity{}
}

// checkLabels: the pod carries its node's topology and the swap behavior
// its device publishes.
func checkLabels(v *violations, pod *corev1.Pod, node *corev1.Node, device *resourceapi.Device) {
	behavior := ""
	if a, ok := device.Attributes[v1alpha1.AttrSwapBehavior]; ok && a.StringValue != nil {
		behavior = *a.StringValue
	}
	want := map[string]string{
		podlabels.Hostname:         node.Labels[podlabels.Hostname],
		podlabels.Zone:             node.Labels[podlabels.Zone],
		podlabels.Region:           node.Labels[podlabels.Region],
		v1alpha1.LabelSwapBehavior: behavior,
	}
	for _, k := range []string{podlabels.Hostname, podlabels.Zone, podlabels.Region, v1alpha1.LabelSwapBehavior} {
		if got, ok := pod.Labels[k]; !ok || got != want[k] {
			v.add("pod %s on node %s: label %s=%q, want %q", pod.Name, node.Name, k, got, want[k])
		}
	}
}
