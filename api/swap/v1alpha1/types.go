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
)

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
	// "max" or "0"). Enabled or Disabled need cgroup v2 and Linux 5.19 or
	// later.
	// +optional
	Zswap ZswapMode `json:"zswap,omitempty"`

	// Swappiness sets cgroup v1 memory.swappiness (0-100): how readily the
	// kernel swaps this container's anonymous memory rather than dropping
	// page cache. 0 still allows swap under pressure but strongly prefers
	// reclaiming cache. cgroup v1 only (cgroup v2 has no per-cgroup
	// swappiness).
	// +optional
	Swappiness *int64 `json:"swappiness,omitempty"`
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
