// Package swapsettings is what the dra.swap driver gives a container's
// cgroup: one type from the claim to the cgroup. The kubelet plugin makes it
// from a claim's SwapConfig and allocation (internal/kubeletplugin/prepare);
// the claim's CDI spec carries it to the OCI hook as arguments
// (internal/kubeletplugin/cdi formats them with internal/hookargs.FormatArgs, the hook parses
// them back with hookargs.ParseArgs); the hook records it per share
// (internal/hookstate), sums a container's shares and applies the sum
// (internal/cgroupswap).
//
// It imports only the standard library and the contract's limits: the
// hook, which runs at every container start, links it.
package swapsettings

import (
	"encoding/json"
	"fmt"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
)

// MaxSwappiness is the largest cgroup v1 memory.swappiness.
const MaxSwappiness = 100

// Bounds of OffloadMaxStall, in hundredths of a percent of wall time
// (the contract's v1alpha1.StallPercent).
const (
	MinOffloadMaxStall = 1
	MaxOffloadMaxStall = 10000
)

// Settings is what a container's cgroup gets: from one claim's allocation
// result (a share), or from all of a container's shares summed. The JSON
// form is the hook's record of a share (internal/hookstate), which outlives
// a release: it never changes.
type Settings struct {
	// LimitBytes is the swap limit in bytes: cgroup v2 memory.swap.max,
	// or what cgroup v1 memory.memsw.limit_in_bytes adds to the memory
	// limit.
	LimitBytes int64 `json:"swapLimit"`
	// HighBytes, if set, is cgroup v2 memory.swap.high, at most LimitBytes.
	HighBytes *int64 `json:"swapHigh,omitempty"`
	// Zswap sets cgroup v2 memory.zswap.max.
	Zswap Zswap `json:"zswap,omitempty"`
	// Swappiness, if set, is cgroup v1 memory.swappiness (0 to
	// MaxSwappiness).
	Swappiness *uint64 `json:"swappiness,omitempty"`
	// ZswapWritebackOff sets cgroup v2 memory.zswap.writeback to 0: the
	// container's swapped-out pages stay compressed in zswap and never
	// reach the swap device (SwapConfig zswap CompressedOnly).
	ZswapWritebackOff bool `json:"zswapWritebackOff,omitempty"`
	// OffloadMaxStall, if set, asks the kubelet plugin's offload loop to
	// move the container's cold memory into swap while its memory stall
	// stays within this budget, in hundredths of a percent of wall time
	// (MinOffloadMaxStall to MaxOffloadMaxStall; SwapConfig offload). The
	// hook records it and writes nothing for it.
	OffloadMaxStall *int32 `json:"offloadMaxStall,omitempty"`
}

// Validate checks every value against its bounds: the limit within
// 0..limits.MaxSwapBytes, swap.high within 0..the limit, a known zswap
// value, swappiness within 0..MaxSwappiness and the offload budget within
// MinOffloadMaxStall..MaxOffloadMaxStall.
func (s Settings) Validate() error {
	if s.LimitBytes < 0 || s.LimitBytes > limits.MaxSwapBytes {
		return fmt.Errorf("swap limit %d out of range 0..%d", s.LimitBytes, limits.MaxSwapBytes)
	}
	if s.HighBytes != nil && (*s.HighBytes < 0 || *s.HighBytes > s.LimitBytes) {
		return fmt.Errorf("swap high %d out of range 0..%d", *s.HighBytes, s.LimitBytes)
	}
	if !s.Zswap.Valid() {
		return fmt.Errorf("zswap %s is none of unchanged, on and off", s.Zswap)
	}
	if s.Swappiness != nil && *s.Swappiness > MaxSwappiness {
		return fmt.Errorf("swappiness %d out of range 0..%d", *s.Swappiness, MaxSwappiness)
	}
	if s.OffloadMaxStall != nil && (*s.OffloadMaxStall < MinOffloadMaxStall || *s.OffloadMaxStall > MaxOffloadMaxStall) {
		return fmt.Errorf("offload max stall %d out of range %d..%d", *s.OffloadMaxStall, MinOffloadMaxStall, MaxOffloadMaxStall)
	}
	return nil
}

// Zswap is what a container's cgroup v2 memory.zswap.max is set to.
type Zswap int8

const (
	// ZswapUnchanged leaves memory.zswap.max as the node has it.
	ZswapUnchanged Zswap = iota
	// ZswapOn sets memory.zswap.max to "max".
	ZswapOn
	// ZswapOff sets memory.zswap.max to 0.
	ZswapOff
)

// Valid reports whether z is one of ZswapUnchanged, ZswapOn and ZswapOff.
func (z Zswap) Valid() bool { return z == ZswapUnchanged || z == ZswapOn || z == ZswapOff }

// String is the hook's --zswap value: "on" or "off"; "" for
// ZswapUnchanged, which the hook's arguments leave out.
func (z Zswap) String() string {
	switch z {
	case ZswapUnchanged:
		return ""
	case ZswapOn:
		return "on"
	case ZswapOff:
		return "off"
	}
	return fmt.Sprintf("Zswap(%d)", int8(z))
}

// ParseZswap reads a String value back; "" is ZswapUnchanged.
func ParseZswap(s string) (Zswap, error) {
	switch s {
	case "":
		return ZswapUnchanged, nil
	case "on":
		return ZswapOn, nil
	case "off":
		return ZswapOff, nil
	}
	return ZswapUnchanged, fmt.Errorf("zswap %q must be on or off", s)
}

// MarshalJSON writes the record's form: true for on, false for off, null
// for unchanged (which a record leaves out: omitempty).
func (z Zswap) MarshalJSON() ([]byte, error) {
	switch z {
	case ZswapUnchanged:
		return []byte("null"), nil
	case ZswapOn:
		return []byte("true"), nil
	case ZswapOff:
		return []byte("false"), nil
	}
	return nil, fmt.Errorf("zswap %s is none of unchanged, on and off", z)
}

// UnmarshalJSON reads the record's form: a boolean, or null for unchanged.
func (z *Zswap) UnmarshalJSON(data []byte) error {
	var on *bool
	if err := json.Unmarshal(data, &on); err != nil {
		return fmt.Errorf("zswap: %w", err)
	}
	switch {
	case on == nil:
		*z = ZswapUnchanged
	case *on:
		*z = ZswapOn
	default:
		*z = ZswapOff
	}
	return nil
}
