package pressure

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Keys of the /proc/meminfo lines that ParseMeminfo reads.
const (
	meminfoSwapTotal = "SwapTotal:"
	meminfoSwapFree  = "SwapFree:"
)

// ParseMeminfo parses the content of /proc/meminfo and returns the total
// and used swap in bytes, from the lines
//
//	SwapTotal:       8388604 kB
//	SwapFree:        8388604 kB
//
// Other lines are ignored. A missing or repeated line, a value that is not
// an unsigned integer followed by "kB", a value that overflows int64
// bytes, or SwapFree above SwapTotal is an error that names the line.
func ParseMeminfo(r io.Reader) (total, used int64, err error) {
	var free int64
	err = parseKeyedLines(r, "meminfo", []string{meminfoSwapTotal, meminfoSwapFree}, func(key string, fields []string) error {
		v, err := parseMeminfoKiB(fields)
		if key == meminfoSwapTotal {
			total = v
		} else {
			free = v
		}
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	if free > total {
		return 0, 0, fmt.Errorf("SwapFree (%d bytes) exceeds SwapTotal (%d bytes)", free, total)
	}
	return total, total - free, nil
}

// parseMeminfoKiB converts the value fields of a meminfo line ("N kB") to
// bytes.
func parseMeminfoKiB(fields []string) (int64, error) {
	if len(fields) != 2 || fields[1] != "kB" {
		return 0, fmt.Errorf(`want "<number> kB", got %q`, strings.Join(fields, " "))
	}
	kib, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		return 0, err
	}
	if kib > math.MaxInt64/1024 {
		return 0, fmt.Errorf("%d kB overflows int64 bytes", kib)
	}
	return int64(kib) * 1024, nil
}
