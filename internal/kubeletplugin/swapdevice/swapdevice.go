// Package swapdevice turns a node's swap facts into the ResourceSlice content
// that the kubelet plugin publishes: one pool named after the node with at
// most one shareable device, "swap", whose consumable capacity is the swap
// offered to workloads. It is pure: no I/O, so every decision is unit-tested.
package swapdevice

import (
	"fmt"
	"math"
	"slices"
	"strings"

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
	// UnsafeOfferUnder lists the kubelet swap behaviors besides NoSwap
	// (UnsafeSwapBehaviors) under which the node still offers its swap.
	// Under each of them the kubelet gives containers swap of its own
	// from the same swap the claims are promised (or, Unknown, may), so
	// claims that add up to the offer and containers without a claim
	// can exhaust swap together, and a claimed container is OOM-killed
	// below its claim. Empty, the default: the node offers swap under
	// NoSwap only.
	UnsafeOfferUnder []string
	// Offload: the plugin runs its offload loop (--offload-interval), so
	// the node offloads the claims that ask for it where the kernel can.
	Offload bool
}

// UnsafeSwapBehaviors are the kubelet swap behaviors under which a node
// offers no swap unless Policy.UnsafeOfferUnder names them.
func UnsafeSwapBehaviors() []string {
	return []string{v1alpha1.SwapBehaviorLimitedSwap, v1alpha1.SwapBehaviorWorkloadControlledSwap, v1alpha1.SwapBehaviorUnknown}
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
	for _, b := range p.UnsafeOfferUnder {
		if !slices.Contains(UnsafeSwapBehaviors(), b) {
			return fmt.Errorf("kubelet swap behavior %q to offer swap under is none of %s (under %s swap is always offered)",
				b, strings.Join(UnsafeSwapBehaviors(), ", "), v1alpha1.SwapBehaviorNoSwap)
		}
	}
	return nil
}

// Withheld says, in one short line, why the node offers no swap under
// the kubelet's swap behavior b and what fixes it; "" when b is NoSwap or
// listed in UnsafeOfferUnder. SwapBehaviorRisk says it at length.
func (p Policy) Withheld(b string) string {
	if b == v1alpha1.SwapBehaviorNoSwap || slices.Contains(p.UnsafeOfferUnder, b) {
		return ""
	}
	switch b {
	case v1alpha1.SwapBehaviorLimitedSwap:
		return "the kubelet's swapBehavior LimitedSwap gives Burstable containers without a claim swap of their own, so swap sold to claims would be promised twice: set it to NoSwap"
	case v1alpha1.SwapBehaviorWorkloadControlledSwap:
		return "the kubelet's swapBehavior WorkloadControlledSwap (KEP-5359) sets containers' swap limits itself, which this driver does not coexist with yet: set it to NoSwap"
	default:
		return fmt.Sprintf("the kubelet's swapBehavior is %s (its configuration cannot be read); under LimitedSwap swap sold to claims would be promised twice: "+
			"point kubeletPlugin.kubeletConfig at a configuration with NoSwap", b)
	}
}

// SwapBehaviorRisk says what the kubelet's swap behavior b does to the
// swap the node sells to claims ("" under NoSwap).
func SwapBehaviorRisk(b string) string {
	const twice = "so swap sold to claims is promised twice, and a claimed container can be OOM-killed below its claim when swap runs out"
	switch b {
	case v1alpha1.SwapBehaviorNoSwap:
		return ""
	case v1alpha1.SwapBehaviorLimitedSwap:
		return "the kubelet's memorySwap.swapBehavior is LimitedSwap: it gives every Burstable container without a swap claim its own share of the node's swap, " + twice
	case v1alpha1.SwapBehaviorWorkloadControlledSwap:
		return "the kubelet's memorySwap.swapBehavior is WorkloadControlledSwap (KEP-5359): the kubelet sets each container's swap limit itself, from its resources.limits.swap, " +
			"and this driver does not coexist with it yet: containers may get swap from both, " + twice
	default:
		return fmt.Sprintf("the kubelet's memorySwap.swapBehavior cannot be told (%s): under LimitedSwap the kubelet gives every Burstable container without a swap claim "+
			"its own share of the node's swap, %s", b, twice)
	}
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

// NodeOffer returns the swap the node offers (0 when it offers none) and,
// when it offers none, why.
func (p Policy) NodeOffer(facts discovery.Facts) (int64, string) {
	offer, _, reasons := p.offer(facts)
	return offer, strings.Join(reasons, "; ")
}

// offer is NodeOffer with each reason's taint.
func (p Policy) offer(facts discovery.Facts) (int64, []resourceapi.DeviceTaint, []string) {
	var taints []resourceapi.DeviceTaint
	var reasons []string
	offer := int64(0)
	if ok, why := facts.Usable(); !ok {
		reasons = append(reasons, why)
	} else if offer = p.Offer(facts.TotalBytes); offer == 0 {
		reasons = append(reasons, fmt.Sprintf("nothing left to offer: %d bytes of swap × overcommit ratio %v minus %d reserved bytes is less than %d bytes",
			facts.TotalBytes, p.OvercommitRatio, p.ReservedBytes, v1alpha1.CapacityStep))
	}
	if len(reasons) > 0 {
		taints = append(taints, resourceapi.DeviceTaint{Key: v1alpha1.TaintNoUsableSwap, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if why := p.Withheld(facts.SwapBehavior); why != "" {
		reasons = append(reasons, why)
		taints = append(taints, resourceapi.DeviceTaint{Key: v1alpha1.TaintKubeletSwapBehavior, Value: facts.SwapBehavior,
			Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if len(reasons) > 0 {
		offer = 0
	}
	return offer, taints, reasons
}

// Device returns the node's swap device. A node that offers swap gets a
// shareable device whose consumable "swap" capacity is the offer. A node
// that offers none still gets the device, so that its attributes (the
// kubelet's swap behavior above all) reach the controller and DeviceClass
// selectors, but with zero capacity, usable=false and a NoSchedule taint
// per cause, so the scheduler never allocates it: TaintNoUsableSwap when
// the node has no usable swap, TaintKubeletSwapBehavior (valued with the
// behavior) when the kubelet's swap behavior is not NoSwap and the policy
// does not offer swap under it. The returned reason says why it is
// unusable ("" when usable).
func Device(facts discovery.Facts, nodeLabels map[string]string, p Policy) (*resourceapi.Device, string) {
	attrs := attributes(facts, nodeLabels)
	attrs[v1alpha1.AttrOffload] = resourceapi.DeviceAttribute{BoolValue: ptr.To(Support(facts, p).Offload == "")}
	offer, taints, reasons := p.offer(facts)
	reason := strings.Join(reasons, "; ")
	attrs[v1alpha1.AttrUsable] = resourceapi.DeviceAttribute{BoolValue: ptr.To(reason == "")}
	device := &resourceapi.Device{
		Name:                     v1alpha1.DeviceName,
		AllowMultipleAllocations: ptr.To(true),
		Attributes:               attrs,
	}
	if reason != "" {
		// No request policy: its range could not be valid with zero
		// capacity. The taints keep claims away; prepare refuses a claim
		// that tolerates them, because it would consume 0 bytes.
		device.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			v1alpha1.CapacitySwap: {Value: *resource.NewQuantity(0, resource.BinarySI)},
		}
		device.Taints = taints
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
