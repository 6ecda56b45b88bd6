package pressure

import (
	"fmt"
	"math"
	"strconv"
)

// maxTaintValueLen is the longest device taint value the API accepts (a
// label value).
const maxTaintValueLen = 63

// pressureValue formats an avg10 stall percentage as a taint value:
// "some-42.1", "full-12.0". A figure outside 0..100, which ParsePSI never
// returns, is clamped (NaN to 0) so that the value stays valid.
func pressureValue(kind string, avg10 float64) string {
	if math.IsNaN(avg10) {
		avg10 = 0
	}
	avg10 = min(max(avg10, 0), 100)
	return kind + "-" + strconv.FormatFloat(avg10, 'f', 1, 64)
}

// swapValue formats a whole percentage of swap in use as a taint value:
// "used-92".
func swapValue(percent uint64) string {
	return fmt.Sprintf("used-%d", percent)
}

// validTaintValue reports whether s is a valid device taint value, that
// is a valid label value: at most 63 characters, empty or starting and
// ending with an ASCII letter or digit, with only letters, digits, '-',
// '_' and '.' in between.
func validTaintValue(s string) bool {
	if len(s) > maxTaintValueLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if alnum {
			continue
		}
		if i == 0 || i == len(s)-1 || (c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return true
}
