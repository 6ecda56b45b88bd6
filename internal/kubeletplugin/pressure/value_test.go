package pressure

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/validate/content"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// TestValidTaintValue checks the helper against the API server's own
// label value validation, which DeviceTaint.Value uses.
func TestValidTaintValue(t *testing.T) {
	tests := []struct {
		value string
		want  bool
	}{
		{"", true},
		{"a", true},
		{"9", true},
		{"some-42.1", true},
		{"full-12.0", true},
		{"used-92", true},
		{"psi-unavailable", true},
		{"A_b.c-D", true},
		{strings.Repeat("x", 63), true},
		{strings.Repeat("x", 64), false},
		{"some=42.1%", false},
		{"92%", false},
		{"-42", false},
		{"42-", false},
		{".5", false},
		{"5.", false},
		{"_a", false},
		{"a b", false},
		{"a/b", false},
		{"é", false},
		{"some-+Inf", false},
	}
	for _, tt := range tests {
		if got := validTaintValue(tt.value); got != tt.want {
			t.Errorf("validTaintValue(%q) = %v, want %v", tt.value, got, tt.want)
		}
		if apiValid := len(content.IsLabelValue(tt.value)) == 0; apiValid != tt.want {
			t.Errorf("content.IsLabelValue(%q) valid = %v, the table says %v", tt.value, apiValid, tt.want)
		}
	}
	// Random strings over an alphabet around the boundaries.
	const alphabet = "aZ09-_.%= /+é"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(70) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		s := b.String()
		if got, want := validTaintValue(s), len(content.IsLabelValue(s)) == 0; got != want {
			t.Errorf("validTaintValue(%q) = %v, API says %v", s, got, want)
		}
	}
}

func TestTaintValues(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{pressureValue("some", 42.1), "some-42.1"},
		{pressureValue("full", 12), "full-12.0"},
		{pressureValue("some", 0), "some-0.0"},
		{pressureValue("some", 99.96), "some-100.0"},
		{pressureValue("full", 100), "full-100.0"},
		{pressureValue("some", math.NaN()), "some-0.0"},
		{pressureValue("some", math.Inf(1)), "some-100.0"},
		{pressureValue("some", -3), "some-0.0"},
		{swapValue(0), "used-0"},
		{swapValue(92), "used-92"},
		{swapValue(100), "used-100"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("value = %q, want %q", tt.got, tt.want)
		}
		if !validTaintValue(tt.got) {
			t.Errorf("value %q is not a valid taint value", tt.got)
		}
	}
	for i := range 100001 {
		if v := pressureValue("full", float64(i)/1000); !validTaintValue(v) {
			t.Fatalf("pressureValue(%v) = %q is not a valid taint value", float64(i)/1000, v)
		}
	}
}

func TestTaintKeys(t *testing.T) {
	for _, key := range []string{v1alpha1.TaintMemoryPressure, v1alpha1.TaintSwapFull} {
		if errs := content.IsLabelKey(key); len(errs) > 0 {
			t.Errorf("taint key %q is invalid: %v", key, errs)
		}
	}
}

func TestUsedPercent(t *testing.T) {
	tests := []struct {
		total, used int64
		want        uint64
	}{
		{1, 0, 0},
		{1, 1, 100},
		{3, 1, 33},
		{3, 2, 66},
		{100, 90, 90},
		{8000 << 20, 7200 << 20, 90},
		{math.MaxInt64, math.MaxInt64, 100},
		{math.MaxInt64, math.MaxInt64 - 1, 99},
		{math.MaxInt64, math.MaxInt64 / 2, 49},
	}
	for _, tt := range tests {
		if got := usedPercent(tt.total, tt.used); got != tt.want {
			t.Errorf("usedPercent(%d, %d) = %d, want %d", tt.total, tt.used, got, tt.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536 << 20, "1.5 GiB"},
		{8 << 30, "8.0 GiB"},
		{math.MaxInt64, "8.0 EiB"},
	}
	for _, tt := range tests {
		if got := formatBytes(tt.n); got != tt.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
