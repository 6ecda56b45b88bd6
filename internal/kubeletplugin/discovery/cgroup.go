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

// detectCgroup returns the cgroup version that holds the memory controller
// (2 for the unified hierarchy, 1 for a legacy or hybrid one, 0 when
// neither is mounted) and whether the swap control file exists.
func detectCgroup(root string) (version int, swapControl bool, err error) {
	mount := hostPath(root, cgroupMount)
	controllers, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	switch {
	case err == nil:
		swapControl, err := unifiedSwapControl(mount, string(controllers))
		return 2, swapControl, err
	case !errors.Is(err, fs.ErrNotExist):
		return 0, false, fmt.Errorf("read cgroup v2 controllers: %w", err)
	}
	if !isDir(filepath.Join(mount, "memory")) {
		return 0, false, nil
	}
	return 1, exists(filepath.Join(mount, "memory", swapControlV1)), nil
}

// unifiedSwapControl reports whether a cgroup v2 hierarchy mounted at
// mount controls swap: the memory controller is available and a child
// cgroup has memory.swap.max (the root cgroup never has one).
func unifiedSwapControl(mount, controllers string) (bool, error) {
	if !slices.Contains(strings.Fields(controllers), "memory") {
		return false, nil
	}
	entries, err := os.ReadDir(mount)
	if err != nil {
		return false, fmt.Errorf("list cgroup v2 root: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && exists(filepath.Join(mount, e.Name(), swapControlV2)) {
			return true, nil
		}
	}
	return false, nil
}
