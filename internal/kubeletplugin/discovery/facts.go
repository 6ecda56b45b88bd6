// Package discovery reads a node's swap facts from a host root filesystem:
// /proc/swaps, sysfs, the cgroup mount and the kubelet configuration. Every
// function takes the root as a parameter so that tests run against temporary
// directories; malformed host data is returned as an error, never a panic.
package discovery

// Medium is the kind of storage that backs swap.
type Medium string

const (
	MediumZram    Medium = "zram"
	MediumSSD     Medium = "ssd"
	MediumHDD     Medium = "hdd"
	MediumUnknown Medium = "unknown"
)

// SwapDevice is one active entry of /proc/swaps.
type SwapDevice struct {
	// Path as listed in /proc/swaps (a block device or a file).
	Path string
	// Type is "partition" or "file" as listed in /proc/swaps.
	Type      string
	SizeBytes int64
	UsedBytes int64
	Priority  int
	Medium    Medium
}

// Facts is everything the driver knows about a node's swap.
type Facts struct {
	// Devices are the active swap areas, in /proc/swaps order.
	Devices []SwapDevice
	// TotalBytes is the sum of the devices' sizes.
	TotalBytes int64
	// UsedBytes is the sum of the devices' used bytes.
	UsedBytes int64
	// Medium of the highest-priority device (the one the kernel fills
	// first); MediumUnknown when there is no device.
	Medium Medium
	// Zswap is true when the zswap compressed cache is enabled.
	Zswap bool
	// CgroupVersion is 1 or 2 (the hierarchy that holds the memory
	// controller), 0 when unknown.
	CgroupVersion int
	// SwapControl is true when the cgroup swap control file exists:
	// memory.memsw.limit_in_bytes (v1) or memory.swap.max (v2).
	SwapControl bool
	// SwapPeak is true when a container can read its peak swap use,
	// memory.swap.peak (cgroup v2, Linux 6.5 and later).
	SwapPeak bool
	// ZswapWriteback is true when a cgroup can keep zswap from writing its
	// pages to the swap device, memory.zswap.writeback (cgroup v2, Linux
	// 6.8 and later).
	ZswapWriteback bool
	// KernelVersion is the running kernel's version as semver
	// (major.minor.patch), taken from /proc/sys/kernel/osrelease.
	KernelVersion string
	// TmpfsNoswap is true when the kernel supports tmpfs' noswap
	// mount option (Linux 6.4 and later).
	TmpfsNoswap bool
	// MemoryReclaim and MemoryPressure are true when a container's v2
	// memory cgroup has memory.reclaim (Linux 5.19 and later) and
	// memory.pressure (pressure stall information on): what the offload
	// loop reads and writes.
	MemoryReclaim, MemoryPressure bool
	// SwapBehavior is the kubelet's memorySwap.swapBehavior, or
	// SwapBehaviorUnknown when the configuration could not be read.
	SwapBehavior string
	// SwapBehaviorProblem says why SwapBehavior is unknown (empty when
	// it is known), for the caller to report once rather than each scan.
	SwapBehaviorProblem string
	// KubeletConfigReplaced is true when the kubelet's configuration read
	// was replaced on the host after the plugin's container mounted it
	// (ErrKubeletConfigReplaced): what the plugin sees is stale until its
	// container restarts.
	KubeletConfigReplaced bool
	// BootID identifies the current boot (/proc/sys/kernel/random/boot_id).
	BootID string
	// HookProblem, when set, says why the OCI hook cannot run where the
	// kubelet plugin installed it (the plugin's check, not Discover's):
	// every container with a swap claim would fail to start.
	HookProblem string
}
