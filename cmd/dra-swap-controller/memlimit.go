package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The controller's memory is its informer caches, whose size follows the
// cluster, and the garbage its reconcilers and webhooks make, which the Go
// runtime lets grow to as much again before it collects (GOGC=100). To keep
// the garbage from taking the container to its limit (a scale-up, a flood
// of reviews), the controller sets the runtime's soft memory limit to two
// fifths of its cgroup's memory limit, unless GOMEMLIMIT says otherwise:
// the runtime then collects sooner as its memory nears that share, and not
// at all sooner below it. Two fifths, not half: the limit counts only the
// runtime's own memory, and the binary's resident pages (some 30 MiB) come
// on top of it in the container's usage; at 5,000 nodes with the chart's
// 512 MiB, half let the process reach 283 MiB.

// cgroupMemoryLimit is the memory limit of the cgroup mounted at root (as
// a container sees its own: cgroup v2's memory.max, or v1's
// memory/memory.limit_in_bytes); 0 when there is none.
func cgroupMemoryLimit(root string) (int64, error) {
	for _, file := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		data, err := os.ReadFile(filepath.Join(root, file))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		v := strings.TrimSpace(string(data))
		if v == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", file, err)
		}
		if n >= 1<<62 { // cgroup v1's "no limit" (page-rounded max int64)
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}

// softMemoryLimit is the soft memory limit for a process in the cgroup
// mounted at root: two fifths of its memory limit (SoftLimitShare); 0
// (none) when GOMEMLIMIT is set, the cgroup has no limit, or it cannot be
// read.
func softMemoryLimit(root string, getenv func(string) string) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit, err := cgroupMemoryLimit(root)
	if err != nil || limit <= 0 {
		return 0
	}
	return limit * 2 / 5
}
