//go:build tools

// Package tools pins CRI-O, the second container runtime of the e2e
// cluster's cgroup v2 node (GUEST_RUNTIME=crio), built from source.
package tools

import (
	_ "github.com/cri-o/cri-o/cmd/crio"
)
