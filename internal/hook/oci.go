package hook

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
)

// MaxStateBytes bounds what is read from stdin.
const MaxStateBytes = 1 << 20

// ParseState decodes and validates the OCI state that the runtime writes
// to the hook's stdin.
func ParseState(r io.Reader) (*specs.State, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxStateBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read OCI state from stdin: %w", err)
	}
	if len(data) > MaxStateBytes {
		return nil, fmt.Errorf("OCI state on stdin exceeds %d bytes", MaxStateBytes)
	}
	var state specs.State
	if err := json.Unmarshal(data, &state); err != nil {
		return nil, fmt.Errorf("decode OCI state from stdin: %w", err)
	}
	if !limits.IsContainerID(state.ID) {
		return nil, fmt.Errorf("OCI state: container id %q is not a valid container ID", state.ID)
	}
	return &state, nil
}

// ContainerName names the container for messages: namespace/pod/container
// from the CRI annotations (containerd or CRI-O), else its ID.
func ContainerName(state *specs.State) string {
	a := state.Annotations
	for _, keys := range [][3]string{
		{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.container-name"},
		{"io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name"},
	} {
		if a[keys[2]] != "" {
			return a[keys[0]] + "/" + a[keys[1]] + "/" + a[keys[2]]
		}
	}
	return state.ID
}

// ParseProcCgroup reads /proc/<pid>/cgroup and returns the cgroup version
// that holds the memory controller and the container's path in it.
func ParseProcCgroup(r io.Reader) (int, string, error) {
	s := bufio.NewScanner(io.LimitReader(r, MaxStateBytes))
	unified := ""
	for s.Scan() {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				group, err := checkGroup(parts[2])
				if err != nil {
					return 0, "", err
				}
				return 1, group, nil
			}
		}
	}
	if err := s.Err(); err != nil {
		return 0, "", err
	}
	if unified != "" {
		group, err := checkGroup(unified)
		if err != nil {
			return 0, "", err
		}
		return 2, group, nil
	}
	return 0, "", errors.New("no memory controller and no cgroup v2 entry")
}

func checkGroup(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "..") || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("cgroup path %q is not an absolute path within the hierarchy", p)
	}
	return filepath.Clean(p), nil
}
