package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Cgroup control files whose presence shows that the kernel accounts and
// limits swap per cgroup.
const (
	swapControlV1 = "memory.memsw.limit_in_bytes"
	swapControlV2 = "memory.swap.max"
)

// cgroupMount is the host path where systemd and the kubelet mount the
// cgroup hierarchy.
const cgroupMount = "/sys/fs/cgroup"

// cgroupFacts is what detectCgroup finds.
type cgroupFacts struct {
	// version holds the memory controller: 2 for the unified hierarchy, 1
	// for a legacy or hybrid one, 0 when neither is mounted.
	version int
	// swapControl: the swap control file exists.
	swapControl bool
	// swapPeak, zswapWriteback: a v2 cgroup has memory.swap.peak (Linux
	// 6.5) and memory.zswap.writeback (Linux 6.8).
	swapPeak, zswapWriteback bool
	// reclaim, pressure: a v2 cgroup has memory.reclaim (Linux 5.19) and
	// memory.pressure (shown only where pressure stall information is on,
	// not with psi=0 at boot): what the offload loop reads and writes.
	reclaim, pressure bool
}

// Files of a v2 memory cgroup that only some kernels have.
const (
	swapPeakV2       = "memory.swap.peak"
	zswapWritebackV2 = "memory.zswap.writeback"
	reclaimV2        = "memory.reclaim"
	pressureV2       = "memory.pressure"
)

// detectCgroup returns the cgroup version that holds the memory
// controller, whether the swap control file exists, and on v2 which of
// the newer swap files a cgroup has.
func detectCgroup(root string) (cgroupFacts, error) {
	mount := hostPath(root, cgroupMount)
	controllers, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	switch {
	case err == nil:
		child, err := unifiedSwapControl(mount, string(controllers))
		if err != nil || child == "" {
			return cgroupFacts{version: 2}, err
		}
		return cgroupFacts{version: 2, swapControl: true,
			swapPeak: exists(filepath.Join(child, swapPeakV2)), zswapWriteback: exists(filepath.Join(child, zswapWritebackV2)),
			reclaim: exists(filepath.Join(child, reclaimV2)), pressure: exists(filepath.Join(child, pressureV2))}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return cgroupFacts{}, fmt.Errorf("read cgroup v2 controllers: %w", err)
	}
	if !isDir(filepath.Join(mount, "memory")) {
		return cgroupFacts{}, nil
	}
	return cgroupFacts{version: 1, swapControl: exists(filepath.Join(mount, "memory", swapControlV1))}, nil
}

// unifiedSwapControl returns a child cgroup of a cgroup v2 hierarchy
// mounted at mount that has memory.swap.max (the root cgroup never has
// one), or "" when there is none or the memory controller is not
// available: then the hierarchy does not control swap.
func unifiedSwapControl(mount, controllers string) (string, error) {
	if !slices.Contains(strings.Fields(controllers), "memory") {
		return "", nil
	}
	entries, err := os.ReadDir(mount)
	if err != nil {
		return "", fmt.Errorf("list cgroup v2 root: %w", err)
	}
	for _, e := range entries {
		if dir := filepath.Join(mount, e.Name()); e.IsDir() && exists(filepath.Join(dir, swapControlV2)) {
			return dir, nil
		}
	}
	return "", nil
}
