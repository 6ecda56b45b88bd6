package v1alpha1

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// StallPercent is a share of wall time in hundredths of a percent (50 is
// 0.5 %, 10000 is 100 %). Its JSON form is the percentage: a number with at
// most two decimal places (0.5, 2, 0.25) or the same as a string ("0.5").
// Pressure stall information reports percentages with two decimals, and a
// fixed-point value reads back exactly what was written, which a float
// would not promise.
type StallPercent int32

// Bounds of a stall budget.
const (
	MinStallPercent StallPercent = 1     // 0.01 %
	MaxStallPercent StallPercent = 10000 // 100 %
)

// String is the percentage as its JSON form writes it: "0.5", "2", "0.25".
func (p StallPercent) String() string {
	sign := ""
	v := int64(p)
	if v < 0 {
		sign, v = "-", -v
	}
	whole, frac := v/100, v%100
	if frac == 0 {
		return fmt.Sprintf("%s%d", sign, whole)
	}
	return strings.TrimRight(fmt.Sprintf("%s%d.%02d", sign, whole, frac), "0")
}

// PartsPerMillion is the share as parts per million of wall time:
// microseconds of stall per second.
func (p StallPercent) PartsPerMillion() int64 { return int64(p) * 100 }

// MarshalJSON writes the percentage as a JSON number.
func (p StallPercent) MarshalJSON() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalJSON reads a percentage with at most two decimal places from a
// JSON number or string. Exponents, signs and more decimals are errors that
// name the field; the range is Validate's.
func (p *StallPercent) UnmarshalJSON(data []byte) error {
	text := string(bytes.TrimSpace(data))
	if unquoted, err := strconv.Unquote(text); err == nil && strings.HasPrefix(text, `"`) {
		text = unquoted
	}
	v, err := ParseStallPercent(text)
	if err != nil {
		return fmt.Errorf("maxStallPercent: %w", err)
	}
	*p = v
	return nil
}

// ParseStallPercent reads a percentage with at most two decimal places
// ("0.5", "2", "0.25", "100"). At most 6 digits before the point: the
// range is checked by the caller.
func ParseStallPercent(s string) (StallPercent, error) {
	whole, frac, dotted := strings.Cut(s, ".")
	if whole == "" || len(whole) > 6 || !digits(whole) || dotted && (frac == "" || !digits(frac)) {
		return 0, fmt.Errorf("%q is not a percentage such as 0.5 or 2", s)
	}
	if len(frac) > 2 {
		return 0, fmt.Errorf("%q has more than two decimal places (pressure stall information has two)", s)
	}
	w, _ := strconv.ParseInt(whole, 10, 32)
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac, 10, 32)
		if len(frac) == 1 {
			f *= 10
		}
	}
	return StallPercent(w*100 + f), nil
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
