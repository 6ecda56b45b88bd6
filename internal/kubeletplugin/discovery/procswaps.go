package discovery

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// procSwapsFields is the number of whitespace-separated fields of a
// /proc/swaps line: Filename Type Size Used Priority.
const procSwapsFields = 5

// ParseProcSwaps parses the content of /proc/swaps. The header line
// ("Filename Type Size Used Priority") is skipped; a table with only the
// header (or nothing at all) yields no devices. Sizes are converted from
// KiB to bytes and octal escapes in paths (the kernel writes a space as
// \040) are decoded. Medium is left empty: it depends on the host, not on
// this table. A line that does not have five fields or has a malformed
// number is an error that quotes the line.
func ParseProcSwaps(r io.Reader) ([]SwapDevice, error) {
	var devices []SwapDevice
	scanner := bufio.NewScanner(r)
	first := true
	for lineNo := 1; scanner.Scan(); lineNo++ {
		line := scanner.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if first && fields[0] == "Filename" {
			first = false
			continue
		}
		first = false
		dev, err := parseProcSwapsLine(fields)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", lineNo, line, err)
		}
		devices = append(devices, dev)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("read swap table: %w", err)
	}
	return devices, nil
}

// parseProcSwapsLine converts the fields of one /proc/swaps line.
func parseProcSwapsLine(fields []string) (SwapDevice, error) {
	if len(fields) != procSwapsFields {
		return SwapDevice{}, fmt.Errorf("want %d fields (Filename Type Size Used Priority), got %d", procSwapsFields, len(fields))
	}
	size, err := parseKiB(fields[2])
	if err != nil {
		return SwapDevice{}, fmt.Errorf("size: %w", err)
	}
	used, err := parseKiB(fields[3])
	if err != nil {
		return SwapDevice{}, fmt.Errorf("used: %w", err)
	}
	prio, err := strconv.Atoi(fields[4])
	if err != nil {
		return SwapDevice{}, fmt.Errorf("priority: %w", err)
	}
	return SwapDevice{
		Path:      unescapeOctal(fields[0]),
		Type:      fields[1],
		SizeBytes: size,
		UsedBytes: used,
		Priority:  prio,
	}, nil
}

// parseKiB parses a non-negative number of KiB and returns it in bytes.
func parseKiB(s string) (int64, error) {
	kib, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if kib < 0 {
		return 0, fmt.Errorf("negative size %d KiB", kib)
	}
	if kib > math.MaxInt64/1024 {
		return 0, fmt.Errorf("size %d KiB overflows a byte count", kib)
	}
	return kib * 1024, nil
}

// unescapeOctal decodes the \ooo escapes the kernel's seq_file writes for
// whitespace and backslashes in paths (mangle in fs/seq_file.c). A
// backslash that does not start a valid three-digit escape is kept as is.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) && isOctalEscape(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isOctalEscape reports whether d is three octal digits that fit a byte
// (\000 to \377).
func isOctalEscape(d string) bool {
	return len(d) == 3 && d[0] >= '0' && d[0] <= '3' &&
		d[1] >= '0' && d[1] <= '7' && d[2] >= '0' && d[2] <= '7'
}
