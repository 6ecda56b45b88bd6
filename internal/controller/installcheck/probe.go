package installcheck

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
)

// Report is what a probe container found in its own cgroup and
// environment; it writes it, as JSON, to its termination message.
type Report struct {
	// CgroupVersion is 1 or 2 (0 when neither could be read).
	CgroupVersion int `json:"cgroupVersion"`
	// Cgroup is the directory the limits were read from, as the container
	// sees it.
	Cgroup string `json:"cgroup,omitempty"`
	// SwapLimitBytes is the container's swap limit: v2 memory.swap.max,
	// v1 memory.memsw.limit_in_bytes − memory.limit_in_bytes; -1 when
	// unlimited ("max", or memsw unlimited).
	SwapLimitBytes int64 `json:"swapLimitBytes"`
	// Files are the raw cgroup files the limit came from.
	Files map[string]string `json:"files,omitempty"`
	// EnvSet says whether DRA_SWAP_LIMIT_BYTES is set, Env is its value.
	EnvSet bool   `json:"envSet"`
	Env    string `json:"env,omitempty"`
	// Error says why the limit could not be read.
	Error string `json:"error,omitempty"`
}

// unlimitedV1 is the smallest value cgroup v1 shows for "no limit".
const unlimitedV1 = int64(1) << 62

// maxCgroupLines bounds the lines of /proc/self/cgroup read (a v1 host
// has one per hierarchy).
const maxCgroupLines = 64

// ReadSelf reports the calling process's own cgroup swap limit and its
// DRA_SWAP_LIMIT_BYTES, reading under root ("/" in a container): cgroup
// v2 where root/sys/fs/cgroup/cgroup.controllers exists, else v1's memory
// hierarchy. The cgroup is the one /proc/self/cgroup names, under the
// mount, where that directory exists (a runtime without a cgroup
// namespace), else the mount's root (in its own cgroup namespace, v2, or
// the container's own cgroup bind-mounted there, v1). The limit is read
// as the plugin's verifier reads it (cgroupswap.ReadLimit).
func ReadSelf(root string, getenv func(string) (string, bool)) Report {
	var r Report
	r.Env, r.EnvSet = getenv(v1alpha1.EnvSwapLimit)
	mount := filepath.Join(root, "sys", "fs", "cgroup")
	r.CgroupVersion = 1
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err == nil {
		r.CgroupVersion = 2
	}
	hierarchy, limitFile, memFile := mount, "memory.swap.max", "memory.max"
	if r.CgroupVersion == 1 {
		hierarchy, limitFile, memFile = filepath.Join(mount, "memory"), "memory.memsw.limit_in_bytes", "memory.limit_in_bytes"
	}
	group := "/"
	if own, err := ownCgroup(filepath.Join(root, "proc", "self", "cgroup"), r.CgroupVersion); err == nil && own != "/" {
		if info, err := os.Stat(filepath.Join(hierarchy, own)); err == nil && info.IsDir() {
			group = own
		}
	}
	r.Cgroup = path.Join("/sys/fs/cgroup", strings.TrimPrefix(hierarchy, mount), group)
	r.Files = map[string]string{}
	for _, f := range []string{limitFile, memFile} {
		data, err := os.ReadFile(filepath.Join(hierarchy, group, f))
		if err != nil {
			r.Error = fmt.Sprintf("cgroup v%d: %s: %v", r.CgroupVersion, path.Join(r.Cgroup, f), cleanPathError(err))
			if errors.Is(err, fs.ErrNotExist) && r.CgroupVersion == 1 && f == limitFile {
				r.Error += " (no swap accounting: the kernel needs swapaccount=1)"
			}
			r.CgroupVersion = 0
			return r
		}
		r.Files[f] = strings.TrimSpace(string(data))
	}
	limit, err := cgroupswap.ReadLimit(r.CgroupVersion, mount, group)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if r.CgroupVersion == 1 {
		if memsw, err := strconv.ParseInt(r.Files[limitFile], 10, 64); err == nil && memsw >= unlimitedV1 {
			limit = -1
		}
	}
	r.SwapLimitBytes = limit
	return r
}

// cleanPathError drops the path of a *fs.PathError, which the caller names
// as the container sees it.
func cleanPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ownCgroup reads the process's cgroup of the given version from a
// /proc/<pid>/cgroup file: v2 "0::<path>", v1 "<id>:...memory...:<path>".
func ownCgroup(file string, version int) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for i := 0; i < maxCgroupLines && s.Scan(); i++ {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		switch {
		case version == 2 && parts[0] == "0" && parts[1] == "":
			return parts[2], nil
		case version == 1:
			for _, c := range strings.Split(parts[1], ",") {
				if c == "memory" {
					return parts[2], nil
				}
			}
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s names no cgroup v%d memory cgroup", file, version)
}

// Encode is r as the JSON a probe writes to its termination message.
func (r Report) Encode() []byte {
	data, err := json.Marshal(r)
	if err != nil {
		// A Report always encodes; keep the probe's output valid anyway.
		return []byte(`{"error":"encoding the report failed"}`)
	}
	return data
}

// ParseReport reads a probe's termination message: the report, or, where
// the kubelet took the log's tail instead, its last line that is one.
func ParseReport(message string) (Report, error) {
	var r Report
	lines := strings.Split(strings.TrimSpace(message), "\n")
	var err error
	for i := len(lines) - 1; i >= 0; i-- {
		if err = json.Unmarshal([]byte(strings.TrimSpace(lines[i])), &r); err == nil {
			return r, nil
		}
	}
	return r, fmt.Errorf("the probe's termination message %q is no report: %w", truncate(message, 200), err)
}
