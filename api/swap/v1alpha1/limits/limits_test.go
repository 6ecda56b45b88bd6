package limits

import (
	"strings"
	"testing"
)

func TestIsUID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"0f0e0d0c-1111-4222-8333-444455556666", true},
		{"0F0E0D0C-1111-4222-8333-444455556666", false},
		{"0f0e0d0c-1111-4222-8333-44445555666", false},
		{"0f0e0d0c-1111-4222-8333-4444555566667", false},
		{"0f0e0d0c11114222833344445555666600", false},
		{"../0e0d0c-1111-4222-8333-444455556666", false},
		{"0f0e0d0c-1111-4222-8333-444455556666\n", false},
		{"", false},
	} {
		if got := IsUID(tc.in); got != tc.want {
			t.Errorf("IsUID(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestIsContainerID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"0123abcdef", true},
		{"a", true},
		{"ctr_1.2-3", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{".hidden", false},
		{"-x", false},
		{"a/b", false},
		{"..", false},
		{"a\x00", false},
	} {
		if got := IsContainerID(tc.in); got != tc.want {
			t.Errorf("IsContainerID(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestMaxSwapBytesSums(t *testing.T) {
	// A container or pod sums at most a few thousand shares; the cgroup v1
	// limit adds a memory limit below 1<<62 to the sum.
	const shares = 1 << 12
	if MaxSwapBytes > (1<<62)/shares {
		t.Errorf("MaxSwapBytes %d: %d shares of it and a memory limit below 1<<62 could overflow int64", MaxSwapBytes, shares)
	}
}
