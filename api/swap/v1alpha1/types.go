package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// GroupName is the API group of the driver's configuration, equal to
	// the driver name.
	GroupName = DriverName
	// Version is this package's API version.
	Version = "v1alpha1"
	// Kind is the kind of the configuration object.
	Kind = "SwapConfig"
)

// SchemeGroupVersion is the group and version of SwapConfig.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// ZswapMode says whether a container's swapped-out pages may be kept in the
// kernel's compressed zswap cache before they reach the swap device.
type ZswapMode string

const (
	// ZswapInherit leaves the container's cgroup as the node configured it.
	ZswapInherit ZswapMode = "Inherit"
	// ZswapEnabled lets the container use zswap without a cgroup bound
	// (cgroup v2 memory.zswap.max = max).
	ZswapEnabled ZswapMode = "Enabled"
	// ZswapDisabled keeps the container's pages out of zswap, so they go
	// straight to the swap device (cgroup v2 memory.zswap.max = 0).
	// Useful for latency-insensitive batch work that should not compete
	// for the compressed cache.
	ZswapDisabled ZswapMode = "Disabled"
	// ZswapCompressedOnly keeps the container's swapped-out pages
	// compressed in memory and never writes them to the swap device
	// (cgroup v2 memory.zswap.writeback = 0), for workloads that must not
	// touch a disk or wear an SSD. Each such page still holds a slot of the
	// node's swap (counted in memory.swap.current and bounded by the
	// claim), and its compressed copy is charged to the container's
	// memory. A page that does not compress, or finds the zswap pool full,
	// stays in memory. Needs cgroup v2, Linux 6.8 or later and zswap
	// enabled on the node.
	ZswapCompressedOnly ZswapMode = "CompressedOnly"
)

// Offload asks the kubelet plugin to move the cold memory of the claim's
// containers into the swap the claim holds, ahead of need, while their
// memory stalls stay within a budget: each interval (the plugin's
// --offload-interval) it reads a container's memory pressure stall
// information (cgroup v2 memory.pressure, "some") and, while the stall
// is within MaxStallPercent, asks the kernel to reclaim a step of the
// container's memory (memory.reclaim, anonymous memory where the kernel
// allows it), a smaller step the nearer the stall is to half the budget
// (the rest is room for the stall of pages a step moved that the
// container uses again), none from there to the budget; it pauses while
// the stall is above the budget or the container's swap is near its
// limit. It never moves more than the claim's swap (the limit
// bounds it). Needs cgroup v2, Linux 5.19 or later (memory.reclaim) and
// pressure stall information (PSI) on the node.
type Offload struct {
	// MaxStallPercent is the claim's pressure budget: the share of wall
	// time, in percent, in which at least one of a container's tasks may
	// wait for memory (PSI "some") while the plugin offloads it. 0.01 to
	// 100 with at most two decimal places (PSI's own resolution), as a
	// number (0.5) or a string ("0.5"). Default 0.1: the target of Meta's
	// TMO and of katalyst's TMO plugin (Senpai's default is 0.17).
	// +optional
	MaxStallPercent *StallPercent `json:"maxStallPercent,omitempty"`
}

// DefaultMaxStall is Offload.MaxStallPercent's default: 0.1 %.
const DefaultMaxStall StallPercent = 10

// SwapConfig tunes how the swap a claim grants is applied to the
// containers that use the claim. The amount of swap itself is not part of
// it: that is the claim's capacity request (capacity.requests.swap).
//
// Each field maps to one kernel cgroup knob. A field that the node's cgroup
// version does not offer makes preparation fail with a message naming the
// field (a DeviceClass CEL selector on the cgroupVersion attribute keeps
// such claims off those nodes).
type SwapConfig struct {
	metav1.TypeMeta `json:",inline"`

	// SwapHighPercent sets cgroup v2 memory.swap.high to this percentage
	// (1-100) of the container's swap limit. Above it the kernel throttles
	// the container's allocations and reclaims hard, so a workload slows
	// down before it reaches its swap limit instead of being OOM-killed
	// there. Unset: no throttle (memory.swap.high stays "max").
	// cgroup v2 only.
	// +optional
	SwapHighPercent *int32 `json:"swapHighPercent,omitempty"`

	// Zswap controls the container's use of the compressed swap cache:
	// Inherit (default), Enabled or Disabled (cgroup v2 memory.zswap.max
	// "max" or "0"), or CompressedOnly (memory.zswap.writeback "0": pages
	// stay compressed in memory, never written to the swap device).
	// Enabled or Disabled need cgroup v2 and Linux 5.19 or later,
	// CompressedOnly Linux 6.8 or later and zswap enabled on the node.
	// +optional
	Zswap ZswapMode `json:"zswap,omitempty"`

	// Swappiness sets cgroup v1 memory.swappiness (0-100): how readily the
	// kernel swaps this container's anonymous memory rather than dropping
	// page cache. 0 still allows swap under pressure but strongly prefers
	// reclaiming cache. cgroup v1 only (cgroup v2 has no per-cgroup
	// swappiness).
	// +optional
	Swappiness *int64 `json:"swappiness,omitempty"`

	// Offload, when set, has the kubelet plugin move the containers' cold
	// memory into the claim's swap ahead of need, within a pressure budget
	// (see Offload). Unset: swap is used only when the kernel reclaims on
	// its own (at the container's memory limit, or when the node runs
	// short). cgroup v2 only.
	// +optional
	Offload *Offload `json:"offload,omitempty"`
}

// DeepCopyInto copies the receiver into out.
func (in *SwapConfig) DeepCopyInto(out *SwapConfig) {
	*out = *in
	if in.SwapHighPercent != nil {
		v := *in.SwapHighPercent
		out.SwapHighPercent = &v
	}
	if in.Swappiness != nil {
		v := *in.Swappiness
		out.Swappiness = &v
	}
	if in.Offload != nil {
		o := *in.Offload
		if o.MaxStallPercent != nil {
			v := *o.MaxStallPercent
			o.MaxStallPercent = &v
		}
		out.Offload = &o
	}
}

// DeepCopy returns a copy of the receiver.
func (in *SwapConfig) DeepCopy() *SwapConfig {
	if in == nil {
		return nil
	}
	out := new(SwapConfig)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *SwapConfig) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}
