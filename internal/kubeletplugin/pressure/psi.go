package pressure

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// PSILine is one line of a pressure stall information file: the share of
// wall time in which tasks were stalled waiting for memory, averaged over
// the last 10, 60 and 300 seconds, and the total stall time.
type PSILine struct {
	// Avg10 is the stall percentage (0..100) averaged over 10 seconds.
	Avg10 float64
	// Avg60 is the stall percentage (0..100) averaged over 60 seconds.
	Avg60 float64
	// Avg300 is the stall percentage (0..100) averaged over 300 seconds.
	Avg300 float64
	// Total is the accumulated stall time in microseconds.
	Total uint64
}

// PSI is the content of /proc/pressure/memory or of a cgroup v2
// memory.pressure file.
type PSI struct {
	// Some covers the time in which at least one task was stalled.
	Some PSILine
	// Full covers the time in which all non-idle tasks were stalled at
	// once, that is time in which no useful work was done.
	Full PSILine
}

// Keys of a PSI line. Other keys are ignored so that a kernel adding a
// field does not break parsing.
const (
	keyAvg10  = "avg10"
	keyAvg60  = "avg60"
	keyAvg300 = "avg300"
	keyTotal  = "total"
)

// ParsePSI parses a memory pressure file:
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//
// Both lines are required (every kernel with PSI writes them for memory);
// lines of another kind are ignored. Each line needs avg10, avg60, avg300
// and total; unknown keys are ignored. An average that is not a finite
// number within 0..100, a total that is not an unsigned integer, a
// repeated key or line, or a missing one is an error that quotes the
// line.
func ParsePSI(r io.Reader) (PSI, error) {
	var psi PSI
	err := parseKeyedLines(r, "pressure stall information", []string{"some", "full"}, func(key string, fields []string) error {
		line, err := parsePSILine(fields)
		if key == "some" {
			psi.Some = line
		} else {
			psi.Full = line
		}
		return err
	})
	if err != nil {
		return PSI{}, err
	}
	return psi, nil
}

// parsePSILine converts the key=value fields that follow "some" or
// "full".
func parsePSILine(fields []string) (PSILine, error) {
	var (
		line PSILine
		seen = map[string]bool{}
	)
	for _, f := range fields {
		key, value, ok := strings.Cut(f, "=")
		if !ok {
			return PSILine{}, fmt.Errorf("field %q is not key=value", f)
		}
		var avg *float64
		switch key {
		case keyAvg10:
			avg = &line.Avg10
		case keyAvg60:
			avg = &line.Avg60
		case keyAvg300:
			avg = &line.Avg300
		case keyTotal:
		default:
			continue // a key added by a newer kernel
		}
		if seen[key] {
			return PSILine{}, fmt.Errorf("repeated key %s", key)
		}
		seen[key] = true
		var err error
		if avg != nil {
			*avg, err = parsePercent(value)
		} else {
			line.Total, err = strconv.ParseUint(value, 10, 64)
		}
		if err != nil {
			return PSILine{}, fmt.Errorf("%s: %w", key, err)
		}
	}
	for _, key := range []string{keyAvg10, keyAvg60, keyAvg300, keyTotal} {
		if !seen[key] {
			return PSILine{}, fmt.Errorf("missing key %s", key)
		}
	}
	return line, nil
}

// parsePercent parses a stall percentage, a finite number within 0..100.
func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 100 {
		return 0, fmt.Errorf("%q is not a percentage within 0..100", s)
	}
	return v, nil
}
