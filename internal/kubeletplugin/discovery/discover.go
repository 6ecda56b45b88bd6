package discovery

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
)

// Host files that discovery reads, relative to Options.Root.
const (
	procSwapsPath    = "/proc/swaps"
	osreleasePath    = "/proc/sys/kernel/osrelease"
	bootIDPath       = "/proc/sys/kernel/random/boot_id"
	zswapEnabledPath = "/sys/module/zswap/parameters/enabled"
)

// Options says where Discover finds the host's files.
type Options struct {
	// Root is the host's root filesystem ("/" in production, a temp dir
	// in tests). All paths below are read under Root. Empty means "/".
	Root string
	// KubeletConfigPath is the kubelet's --config file, absolute host
	// path; empty when the kubelet has none (see ReadSwapBehavior).
	KubeletConfigPath string
	// KubeletConfigDir is the kubelet's optional --config-dir drop-in
	// directory (absolute host path, may be empty). Files ending in .conf
	// are applied in lexical order over the main file, as the kubelet
	// does.
	KubeletConfigDir string
}

// Discover reads the node's swap facts from the host filesystem at
// opts.Root. Missing or malformed /proc/swaps, osrelease or boot_id is an
// error; a medium that cannot be determined is MediumUnknown; a kubelet
// configuration that cannot be read is recorded as SwapBehaviorUnknown,
// with the reason in SwapBehaviorProblem.
func Discover(ctx context.Context, opts Options) (Facts, error) {
	root := opts.Root
	devices, err := readDevices(root)
	if err != nil {
		return Facts{}, err
	}
	facts := Facts{Devices: devices, Medium: MediumUnknown}
	if facts.TotalBytes, facts.UsedBytes, err = sumSizes(devices); err != nil {
		return Facts{}, fmt.Errorf("%s: %w", hostPath(root, procSwapsPath), err)
	}
	if i := preferredDevice(devices); i >= 0 {
		facts.Medium = devices[i].Medium
	}
	if facts.Zswap, err = zswapEnabled(root); err != nil {
		return Facts{}, err
	}
	cg, err := detectCgroup(root)
	if err != nil {
		return Facts{}, err
	}
	facts.CgroupVersion, facts.SwapControl, facts.SwapPeak, facts.ZswapWriteback = cg.version, cg.swapControl, cg.swapPeak, cg.zswapWriteback
	facts.MemoryReclaim, facts.MemoryPressure = cg.reclaim, cg.pressure
	kernel, err := readKernelVersion(root)
	if err != nil {
		return Facts{}, err
	}
	facts.KernelVersion, facts.TmpfsNoswap = kernel.String(), kernel.hasTmpfsNoswap()
	if facts.BootID, err = readBootID(root); err != nil {
		return Facts{}, err
	}
	facts.SwapBehavior, err = ReadSwapBehavior(root, opts.KubeletConfigPath, opts.KubeletConfigDir)
	if err != nil {
		facts.SwapBehaviorProblem = err.Error()
		facts.KubeletConfigReplaced = errors.Is(err, ErrKubeletConfigReplaced)
	}
	return facts, nil
}

// readDevices parses /proc/swaps and determines each device's medium.
func readDevices(root string) ([]SwapDevice, error) {
	path := hostPath(root, procSwapsPath)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read swap table: %w", err)
	}
	defer f.Close()
	devices, err := ParseProcSwaps(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range devices {
		devices[i].Medium = deviceMedium(root, devices[i])
	}
	return devices, nil
}

// sumSizes returns the total and used bytes of devices.
func sumSizes(devices []SwapDevice) (total, used int64, err error) {
	for _, d := range devices {
		if d.SizeBytes > math.MaxInt64-total || d.UsedBytes > math.MaxInt64-used {
			return 0, 0, errors.New("total swap size overflows int64")
		}
		total += d.SizeBytes
		used += d.UsedBytes
	}
	return total, used, nil
}

// preferredDevice returns the index of the device the kernel fills first,
// the one with the highest priority (the first listed on ties), or -1
// when there is none.
func preferredDevice(devices []SwapDevice) int {
	best := -1
	for i, d := range devices {
		if best < 0 || d.Priority > devices[best].Priority {
			best = i
		}
	}
	return best
}

// zswapEnabled reports whether the zswap module parameter "enabled" is
// set; false when zswap is not built in.
func zswapEnabled(root string) (bool, error) {
	v, err := readTrimmed(hostPath(root, zswapEnabledPath))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read zswap state: %w", err)
	}
	return v == "Y" || v == "1", nil
}

// readKernelVersion parses the running kernel's release.
func readKernelVersion(root string) (kernelVersion, error) {
	path := hostPath(root, osreleasePath)
	data, err := os.ReadFile(path)
	if err != nil {
		return kernelVersion{}, fmt.Errorf("read kernel release: %w", err)
	}
	v, err := parseKernelVersion(string(data))
	if err != nil {
		return kernelVersion{}, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readBootID returns the identifier of the current boot.
func readBootID(root string) (string, error) {
	path := hostPath(root, bootIDPath)
	id, err := readTrimmed(path)
	if err != nil {
		return "", fmt.Errorf("read boot ID: %w", err)
	}
	if id == "" {
		return "", fmt.Errorf("read boot ID: %s is empty", path)
	}
	return id, nil
}
