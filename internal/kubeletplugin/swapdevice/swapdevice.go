// Package swapdevice turns a node's swap facts into the ResourceSlice content
// that the kubelet plugin publishes: one pool named after the node with at
// most one shareable device, "swap", whose consumable capacity is the swap
// offered to workloads. It is pure: no I/O, so every decision is unit-tested.
package swapdevice

import (
	"fmt"
	"math"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
)

// DefaultRequestBytes is the swap a claim gets when its request names no
// capacity.
const DefaultRequestBytes int64 = 1 << 30

// TopologyLabels are the Node labels copied onto the device as fully
// qualified attributes, so DeviceClass and claim selectors can use them.
var TopologyLabels = []string{
	"topology.kubernetes.io/zone",
	"topology.kubernetes.io/region",
	"kubernetes.io/hostname",
}

// Policy is the admin's configuration of what a node offers.
type Policy struct {
	// OvercommitRatio multiplies the node's active swap (default 1.0).
	// Above 1 the sum of the limits may exceed the swap that exists,
	// which is safe as long as workloads rarely use their whole limit.
	OvercommitRatio float64
	// ReservedBytes is kept back for system daemons and subtracted after
	// the ratio.
	ReservedBytes int64
	// DefaultRequestBytes is granted to a request without a capacity
	// (1Gi when zero); capped at the offer.
	DefaultRequestBytes int64
	// Offload: the plugin runs its offload loop (--offload-interval), so
	// the node offloads the claims that ask for it where the kernel can.
	Offload bool
}

// Validate checks the policy's values.
func (p Policy) Validate() error {
	if math.IsNaN(p.OvercommitRatio) || math.IsInf(p.OvercommitRatio, 0) || p.OvercommitRatio <= 0 || p.OvercommitRatio > 100 {
		return fmt.Errorf("overcommit ratio %v must be greater than 0 and at most 100", p.OvercommitRatio)
	}
	if p.ReservedBytes < 0 {
		return fmt.Errorf("reserved swap %d must not be negative", p.ReservedBytes)
	}
	if p.DefaultRequestBytes < 0 {
		return fmt.Errorf("default swap request %d must not be negative", p.DefaultRequestBytes)
	}
	return nil
}

// Offer is the swap, in bytes and a multiple of Step, that the node offers
// to workloads: total active swap × ratio − reserve, rounded down. It is
// zero when nothing is left.
func (p Policy) Offer(totalBytes int64) int64 {
	scaled := float64(totalBytes) * p.OvercommitRatio
	if scaled >= math.MaxInt64/2 {
		scaled = math.MaxInt64 / 2
	}
	offer := int64(scaled) - p.ReservedBytes
	if offer < v1alpha1.CapacityStep {
		return 0
	}
	return offer / v1alpha1.CapacityStep * v1alpha1.CapacityStep
}

// Device returns the node's swap device. A node that offers swap gets a
// shareable device whose consumable "swap" capacity is the offer. A node
// that offers none still gets the device, so that its attributes (the
// kubelet's swap behavior above all) reach the controller and DeviceClass
// selectors, but with zero capacity, usable=false and the NoSchedule taint
// TaintNoUsableSwap, so the scheduler never allocates it; the returned
// reason says why it is unusable ("" when usable).
func Device(facts discovery.Facts, nodeLabels map[string]string, p Policy) (*resourceapi.Device, string) {
	attrs := attributes(facts, nodeLabels)
	attrs[v1alpha1.AttrOffload] = resourceapi.DeviceAttribute{BoolValue: ptr.To(Support(facts, p).Offload == "")}
	offer := int64(0)
	reason := ""
	if ok, why := facts.Usable(); !ok {
		reason = why
	} else if offer = p.Offer(facts.TotalBytes); offer == 0 {
		reason = fmt.Sprintf("nothing left to offer: %d bytes of swap × overcommit ratio %v minus %d reserved bytes is less than %d bytes",
			facts.TotalBytes, p.OvercommitRatio, p.ReservedBytes, v1alpha1.CapacityStep)
	}
	attrs[v1alpha1.AttrUsable] = resourceapi.DeviceAttribute{BoolValue: ptr.To(reason == "")}
	device := &resourceapi.Device{
		Name:                     v1alpha1.DeviceName,
		AllowMultipleAllocations: ptr.To(true),
		Attributes:               attrs,
	}
	if reason != "" {
		// No request policy: its range could not be valid with zero
		// capacity. The taint keeps claims away; prepare refuses a claim
		// that tolerates it, because it would consume 0 bytes.
		device.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			v1alpha1.CapacitySwap: {Value: *resource.NewQuantity(0, resource.BinarySI)},
		}
		device.Taints = []resourceapi.DeviceTaint{{
			Key:    v1alpha1.TaintNoUsableSwap,
			Effect: resourceapi.DeviceTaintEffectNoSchedule,
		}}
		return device, reason
	}
	def := p.DefaultRequestBytes
	if def == 0 {
		def = DefaultRequestBytes
	}
	def = min(max(def/v1alpha1.CapacityStep*v1alpha1.CapacityStep, v1alpha1.CapacityStep), offer)
	device.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		v1alpha1.CapacitySwap: {
			Value: *resource.NewQuantity(offer, resource.BinarySI),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default: resource.NewQuantity(def, resource.BinarySI),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{
					Min:  resource.NewQuantity(v1alpha1.CapacityStep, resource.BinarySI),
					Max:  resource.NewQuantity(offer, resource.BinarySI),
					Step: resource.NewQuantity(v1alpha1.CapacityStep, resource.BinarySI),
				},
			},
		},
	}
	return device, ""
}

// Support is what the node can apply of a SwapConfig beyond its cgroup
// version (prepare's check, and the offload attribute): why it cannot
// offload, why it cannot keep pages compressed only ("" when it can).
func Support(facts discovery.Facts, p Policy) v1alpha1.NodeSupport {
	s := v1alpha1.NodeSupport{CgroupVersion: facts.CgroupVersion}
	switch {
	case facts.CgroupVersion != 2:
		s.Offload = fmt.Sprintf("it runs cgroup v%d; offload needs cgroup v2", facts.CgroupVersion)
	case !facts.MemoryReclaim:
		s.Offload = "the kernel has no memory.reclaim (Linux 5.19 or later)"
	case !facts.MemoryPressure:
		s.Offload = "its cgroups have no memory.pressure: pressure stall information is off (boot with psi=1)"
	case !p.Offload:
		s.Offload = "the kubelet plugin runs without its offload loop (--offload-interval=0; the chart's kubeletPlugin.offload.interval)"
	}
	switch {
	case facts.CgroupVersion != 2:
		s.CompressedOnly = fmt.Sprintf("it runs cgroup v%d; memory.zswap.writeback needs cgroup v2", facts.CgroupVersion)
	case !facts.ZswapWriteback:
		s.CompressedOnly = "the kernel has no memory.zswap.writeback (Linux 6.8 or later)"
	case !facts.Zswap:
		s.CompressedOnly = "zswap is disabled (/sys/module/zswap/parameters/enabled; boot with zswap.enabled=1)"
	}
	return s
}

// attributes are the device attributes every node publishes, usable or not.
func attributes(facts discovery.Facts, nodeLabels map[string]string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		v1alpha1.AttrSwapBehavior:   {StringValue: ptr.To(facts.SwapBehavior)},
		v1alpha1.AttrTotalBytes:     {IntValue: ptr.To(facts.TotalBytes)},
		v1alpha1.AttrDevices:        {IntValue: ptr.To(int64(len(facts.Devices)))},
		v1alpha1.AttrMedium:         {StringValue: ptr.To(string(facts.Medium))},
		v1alpha1.AttrZswap:          {BoolValue: ptr.To(facts.Zswap)},
		v1alpha1.AttrCgroupVersion:  {IntValue: ptr.To(int64(facts.CgroupVersion))},
		v1alpha1.AttrTmpfsNoswap:    {BoolValue: ptr.To(facts.TmpfsNoswap)},
		v1alpha1.AttrSwapPeak:       {BoolValue: ptr.To(facts.SwapPeak)},
		v1alpha1.AttrZswapWriteback: {BoolValue: ptr.To(facts.ZswapWriteback)},
		// Only cgroup v2 has a limit on swap alone.
		v1alpha1.AttrSwapLimitExact: {BoolValue: ptr.To(facts.CgroupVersion == 2)},
	}
	if facts.KernelVersion != "" {
		attrs[v1alpha1.AttrKernelVersion] = resourceapi.DeviceAttribute{VersionValue: ptr.To(facts.KernelVersion)}
	}
	for _, label := range TopologyLabels {
		if v, ok := nodeLabels[label]; ok && v != "" {
			attrs[resourceapi.QualifiedName(label)] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
		}
	}
	return attrs
}

// Resources is what the plugin publishes for its node: one pool named
// after the node with one slice holding the swap device (nil: no device).
func Resources(nodeName string, device *resourceapi.Device) resourceslice.DriverResources {
	var devices []resourceapi.Device
	if device != nil {
		devices = []resourceapi.Device{*device}
	}
	return resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{
			nodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
		},
	}
}
