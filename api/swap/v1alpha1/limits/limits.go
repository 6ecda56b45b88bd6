// Package limits holds the bounds and validators of the dra.swap/v1alpha1
// contract that the OCI hook needs: the largest swap value, the largest
// allocation result index, and what a claim or pod UID and a container ID
// look like. The kubelet plugin writes values within them into CDI specs
// and hook records; the hook and the plugin's readers refuse anything
// outside them. It imports only the standard library, so that the hook,
// which runs at every container start, links none of the Kubernetes API
// machinery that package v1alpha1 needs for SwapConfig.
//
// Its stability is that of package v1alpha1.
package limits

import "regexp"

const (
	// MaxSwapBytes is the largest swap value the driver hands on or
	// accepts (1 PiB): a claim's consumed capacity, one result's share, a
	// container's or pod's sum. It is far above any real swap size and far
	// enough below the int64 range that a sum of thousands of shares, or a
	// cgroup v1 memory limit plus a sum, cannot overflow.
	MaxSwapBytes = int64(1) << 50
	// MaxResultIndex bounds an allocation result's index in device IDs,
	// hook arguments and record names (the API allows 32 results per
	// claim; the bound leaves room).
	MaxResultIndex = 9999
)

var (
	uidPattern         = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	containerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
)

// IsUID reports whether s is a Kubernetes object UID (a claim's, a pod's)
// as the API server generates them: lower-case hexadecimal in 8-4-4-4-12.
func IsUID(s string) bool {
	return uidPattern.MatchString(s)
}

// IsContainerID reports whether s is a container ID that may name a
// directory: 1 to 128 letters, digits, '_', '.' or '-', starting with a
// letter or digit.
func IsContainerID(s string) bool {
	return containerIDPattern.MatchString(s)
}
