package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/conformance"
)

// The lines around docs/conformance.md's generated list.
const (
	conformanceBegin = "<!-- The list below is generated from test/e2e by `make conformance-docs`; do not edit it. -->"
	conformanceEnd   = "<!-- End of the generated list. -->"
)

// TestConformanceList: docs/conformance.md lists the e2e suite's tests as
// the conformance suite runs them, what `e2e.test -list-conformance`
// prints: read from the suite's source (what each test checks, which it
// skips and why). With UPDATE_GOLDEN=1 (make conformance-docs) it writes
// the list instead.
func TestConformanceList(t *testing.T) {
	tests, err := conformance.List(os.DirFS(filepath.Join(repoRoot, "test", "e2e")))
	if err != nil {
		t.Fatal(err)
	}
	// Blank lines around the table, so that Markdown ends it before the
	// closing comment.
	want := "\n" + conformance.Markdown(tests) + "\n"
	path := filepath.Join(repoRoot, "docs", "conformance.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, got, after, ok := block(string(data), conformanceBegin, conformanceEnd)
	if !ok {
		t.Fatalf("docs/conformance.md has no list between the lines\n%s\nand\n%s", conformanceBegin, conformanceEnd)
	}
	if got == want {
		return
	}
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(before+want+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the list to docs/conformance.md")
		return
	}
	t.Errorf("docs/conformance.md's list of the conformance suite's tests is stale: run make conformance-docs. It should read:\n%s", want)
}

// block splits doc into the lines up to and including the line begin,
// the lines between it and the line end, and the rest from end on.
func block(doc, begin, end string) (before, inner, after string, ok bool) {
	i := strings.Index(doc, "\n"+begin+"\n")
	if i < 0 {
		return "", "", "", false
	}
	start := i + len(begin) + 2
	j := strings.Index("\n"+doc[start:], "\n"+end+"\n")
	if j < 0 {
		return "", "", "", false
	}
	return doc[:start], doc[start : start+j], doc[start+j:], true
}
