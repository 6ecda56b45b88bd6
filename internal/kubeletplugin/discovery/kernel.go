package discovery

import (
	"fmt"
	"strconv"
	"strings"
)

// kernelVersion is a parsed kernel release.
type kernelVersion struct {
	major, minor, patch int
}

// String formats v as semver.
func (v kernelVersion) String() string {
	return fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch)
}

// hasTmpfsNoswap reports whether tmpfs accepts the noswap mount option on
// this kernel (Linux 6.4 and later).
func (v kernelVersion) hasTmpfsNoswap() bool {
	return v.major > 6 || v.major == 6 && v.minor >= 4
}

// ParseKernelVersion returns the semver (major.minor.patch) of a kernel
// release string as found in /proc/sys/kernel/osrelease: "6.1.0-25-amd64"
// gives "6.1.0" and "6.8" gives "6.8.0". Anything after the numbers is
// dropped. It is an error when the string does not start with major.minor.
func ParseKernelVersion(osrelease string) (string, error) {
	v, err := parseKernelVersion(osrelease)
	if err != nil {
		return "", err
	}
	return v.String(), nil
}

// parseKernelVersion is ParseKernelVersion without the formatting.
func parseKernelVersion(osrelease string) (kernelVersion, error) {
	s := strings.TrimSpace(osrelease)
	var nums [3]int
	rest := s
	for i := range nums {
		digits := leadingDigits(rest)
		if digits == "" {
			if i < 2 {
				return kernelVersion{}, fmt.Errorf("kernel release %q does not start with major.minor", s)
			}
			break
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return kernelVersion{}, fmt.Errorf("kernel release %q: %w", s, err)
		}
		nums[i] = n
		rest = rest[len(digits):]
		if i == 2 || !strings.HasPrefix(rest, ".") {
			if i < 1 {
				return kernelVersion{}, fmt.Errorf("kernel release %q does not start with major.minor", s)
			}
			break
		}
		rest = rest[1:]
	}
	return kernelVersion{major: nums[0], minor: nums[1], patch: nums[2]}, nil
}

// leadingDigits returns the ASCII digits at the start of s.
func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
