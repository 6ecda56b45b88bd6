package discovery

import (
	"fmt"
	"os"
	"path/filepath"
)

// Files of a v2 memory cgroup that the offload loop needs
// (internal/kubeletplugin/offload).
const (
	// reclaimV2 is memory.reclaim (Linux 5.19).
	reclaimV2 = "memory.reclaim"
	// pressureV2 is memory.pressure: the kernel shows it only where
	// pressure stall information is on (not with psi=0 at boot).
	pressureV2 = "memory.pressure"
)

// offloadFiles reports whether the containers of a cgroup v2 hierarchy
// have memory.reclaim and memory.pressure, as a child cgroup of its root
// that controls swap (memory.swap.max; the kubelet's kubepods cgroup, or
// system.slice) has them: the root cgroup has neither.
func offloadFiles(root string) (reclaim, pressure bool, err error) {
	mount := hostPath(root, cgroupMount)
	entries, err := os.ReadDir(mount)
	if err != nil {
		return false, false, fmt.Errorf("list cgroup v2 root: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(mount, e.Name())
		if e.IsDir() && exists(filepath.Join(dir, swapControlV2)) {
			return exists(filepath.Join(dir, reclaimV2)), exists(filepath.Join(dir, pressureV2)), nil
		}
	}
	return false, false, nil
}
