package pressure

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// parseKeyedLines reads r line by line and hands each line whose first
// field is one of keys to parse, with the key and the fields after it.
// Other lines are ignored. Each key must appear exactly once: a repeated
// line, a line parse rejects (the error quotes it) or a missing one is an
// error; what names the file in read errors.
func parseKeyedLines(r io.Reader, what string, keys []string, parse func(key string, fields []string) error) error {
	seen := make(map[string]bool, len(keys))
	scanner := bufio.NewScanner(r)
	for lineNo := 1; scanner.Scan(); lineNo++ {
		line := scanner.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 || !slices.Contains(keys, fields[0]) {
			continue
		}
		if seen[fields[0]] {
			return fmt.Errorf("line %d %q: repeated %q line", lineNo, line, fields[0])
		}
		seen[fields[0]] = true
		if err := parse(fields[0], fields[1:]); err != nil {
			return fmt.Errorf("line %d %q: %w", lineNo, line, err)
		}
	}
	if err := scanner.Err(); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	for _, key := range keys {
		if !seen[key] {
			return fmt.Errorf("missing %q line", key)
		}
	}
	return nil
}
