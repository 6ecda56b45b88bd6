package v1alpha1

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
)

// DriverName is the DRA driver's name: the driver of its ResourceSlices and
// allocation results, the default DeviceClass's name, the domain of its
// attributes, label, annotation and taint keys, and the API group of
// SwapConfig. The kubelet plugin's --driver-name may publish under another
// name; the controller and the chart's defaults use this one.
const DriverName = "dra.swap"

// The device and its capacity.
const (
	// DeviceName is the name of the one device in each node's pool.
	DeviceName = "swap"
	// CapacitySwap is the consumable capacity that claims request
	// (capacity.requests.swap), in bytes.
	CapacitySwap resourceapi.QualifiedName = "swap"
	// CapacityStep is the allocation granularity: requests are rounded up
	// to a multiple of it and every published quantity is a multiple of it.
	CapacityStep int64 = 1 << 20
)

// Attribute names of the device, in the driver's domain (a selector reads
// device.attributes["dra.swap"].<name>). The device also carries the node's
// topology labels as fully qualified attributes.
const (
	// AttrSwapBehavior is the kubelet's memorySwap.swapBehavior: one of
	// SwapBehaviorNoSwap, SwapBehaviorLimitedSwap,
	// SwapBehaviorWorkloadControlledSwap, SwapBehaviorUnknown.
	AttrSwapBehavior resourceapi.QualifiedName = "swapBehavior"
	// AttrTotalBytes is the node's active swap, in bytes.
	AttrTotalBytes resourceapi.QualifiedName = "totalBytes"
	// AttrDevices is the number of active swap devices.
	AttrDevices resourceapi.QualifiedName = "devices"
	// AttrMedium is what backs swap: zram, ssd, hdd or unknown.
	AttrMedium resourceapi.QualifiedName = "medium"
	// AttrZswap is true where the kernel's zswap cache is enabled.
	AttrZswap resourceapi.QualifiedName = "zswap"
	// AttrCgroupVersion is the node's cgroup version, 1 or 2.
	AttrCgroupVersion resourceapi.QualifiedName = "cgroupVersion"
	// AttrKernelVersion is the node's kernel version (a semantic version).
	AttrKernelVersion resourceapi.QualifiedName = "kernelVersion"
	// AttrTmpfsNoswap is true where tmpfs supports the noswap option.
	AttrTmpfsNoswap resourceapi.QualifiedName = "tmpfsNoswap"
	// AttrSwapLimitExact is true where a container's swap limit bounds
	// its swap alone (cgroup v2 memory.swap.max), false where it bounds
	// memory and swap together (v1 memory.memsw.limit_in_bytes = memory
	// limit + claim: global reclaim may swap out up to the memory limit on
	// top of the claim).
	AttrSwapLimitExact resourceapi.QualifiedName = "swapLimitExact"
	// AttrSwapPeak is true where a container can read its peak swap use
	// from its cgroup (v2 memory.swap.peak, Linux 6.5 and later).
	AttrSwapPeak resourceapi.QualifiedName = "swapPeak"
	// AttrZswapWriteback is true where a cgroup can keep zswap from
	// writing its pages out to the swap device (v2 memory.zswap.writeback,
	// Linux 6.8 and later).
	AttrZswapWriteback resourceapi.QualifiedName = "zswapWriteback"
	// AttrUsable is false on a node that offers no swap.
	AttrUsable resourceapi.QualifiedName = "usable"
	// AttrOffload is true where the kubelet plugin offloads the claims
	// that ask for it (SwapConfig offload): cgroup v2 with memory.reclaim
	// and pressure stall information, and the plugin's offload loop on.
	AttrOffload resourceapi.QualifiedName = "offload"
)

// Swap behaviours, the values of AttrSwapBehavior and of the
// LabelSwapBehavior label: the kubelet's memorySwap.swapBehavior. A node
// offers swap to claims only under SwapBehaviorNoSwap unless the kubelet
// plugin is told to offer it under another (--unsafe-offer-swap-under):
// under the others the kubelet gives containers swap of its own, so the
// node's swap would be promised twice.
const (
	SwapBehaviorNoSwap = "NoSwap"
	// SwapBehaviorLimitedSwap: the kubelet gives every Burstable
	// container a share of the node's swap proportional to its memory
	// request.
	SwapBehaviorLimitedSwap = "LimitedSwap"
	// SwapBehaviorWorkloadControlledSwap (KEP-5359, alpha targeted for
	// Kubernetes 1.38): the kubelet writes each container's swap limit
	// itself, from the container's resources.limits.swap.
	SwapBehaviorWorkloadControlledSwap = "WorkloadControlledSwap"
	// SwapBehaviorUnknown: the kubelet configuration could not be read
	// (published as the attribute, never as a label).
	SwapBehaviorUnknown = "Unknown"
)

// Device taint keys: the kubelet plugin taints the node's swap device
// (effect NoSchedule) while one of these holds.
const (
	// TaintNoUsableSwap: the node offers no swap.
	TaintNoUsableSwap = DriverName + "/no-usable-swap"
	// TaintKubeletSwapBehavior: the node offers no swap because its
	// kubelet's swap behavior (the taint's value: LimitedSwap,
	// WorkloadControlledSwap or Unknown) gives containers swap of its own.
	TaintKubeletSwapBehavior = DriverName + "/kubelet-swap-behavior"
	// TaintMemoryPressure: the node (or its kubepods cgroup) stalls on
	// memory.
	TaintMemoryPressure = DriverName + "/memory-pressure"
	// TaintSwapFull: the node's swap is nearly full.
	TaintSwapFull = DriverName + "/swap-full"
	// TaintOvercommitted: the node's claims hold more swap than it offers
	// (swap was turned off or shrank after they were allocated).
	TaintOvercommitted = DriverName + "/overcommitted"
)

// Node and pod label and annotation keys the controller sets.
const (
	// LabelSwapBehavior is the node label KEP-5425 proposed (closed
	// unmerged; docs/usage.md says why the key stays), also copied onto
	// pods.
	LabelSwapBehavior = "node.kubernetes.io/swap-behavior"
	// LabelCapacity is the swap a node offers, in binary units ("4Gi").
	LabelCapacity = DriverName + "/capacity"
	// AnnotationManagedLabels on a pod lists, comma-separated and sorted,
	// the label keys the driver set, so that it removes only its own.
	AnnotationManagedLabels = DriverName + "/managed-labels"
)

// Environment variables a container that uses a claim gets.
const (
	// EnvSwapLimit is the swap limit, in bytes, that the container's
	// claims grant it.
	EnvSwapLimit = "DRA_SWAP_LIMIT_BYTES"
	// EnvAdminAccess marks a container that uses a claim allocated with
	// admin access: such a claim is not charged and grants no swap.
	EnvAdminAccess = "DRA_SWAP_ADMIN_ACCESS"
)

// DriverSelector is a CEL expression for a DeviceClass selector that
// matches the devices of the named driver.
func DriverSelector(driverName string) string {
	return fmt.Sprintf("device.driver == %q", driverName)
}
