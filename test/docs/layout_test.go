// Package docs checks that the documentation says what the tree is.
package docs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the module's root, two levels above this package.
const repoRoot = "../.."

// layoutRow is one row of docs/design.md's layout table.
type layoutRow struct {
	line    int
	imports []string // the module's packages it imports, by path under internal/ (api/... in full)
}

var backticked = regexp.MustCompile("`([^`]+)`")

// readLayout returns the rows of the "## Layout" table of docs/design.md
// whose first cell names a directory, by that directory.
func readLayout(t *testing.T) map[string]layoutRow {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]layoutRow{}
	inLayout := false
	scanner := bufio.NewScanner(f)
	for line := 1; scanner.Scan(); line++ {
		text := scanner.Text()
		if strings.HasPrefix(text, "## ") {
			inLayout = text == "## Layout"
			continue
		}
		if !inLayout || !strings.HasPrefix(text, "| `") {
			continue
		}
		cells := strings.Split(text, "|")
		if len(cells) < 6 {
			t.Fatalf("docs/design.md:%d: a layout row has four cells (package, what it does, I/O, imports): %q", line, text)
		}
		dir := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var imports []string
		for _, m := range backticked.FindAllStringSubmatch(cells[4], -1) {
			imports = append(imports, expandBraces(m[1])...)
		}
		if _, dup := rows[dir]; dup {
			t.Errorf("docs/design.md:%d: %s has two rows", line, dir)
		}
		rows[dir] = layoutRow{line: line, imports: imports}
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal(`docs/design.md has no "## Layout" table`)
	}
	return rows
}

// expandBraces expands one {a,b} group: "x/{a,b}" is x/a and x/b,
// "v1alpha1{,/limits}" is v1alpha1 and v1alpha1/limits.
func expandBraces(s string) []string {
	open, end := strings.Index(s, "{"), strings.Index(s, "}")
	if open < 0 || end < open {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[open+1:end], ",") {
		out = append(out, s[:open]+alt+s[end+1:])
	}
	return out
}

// TestDesignLayoutMatchesTree: every package of the product (api, internal,
// cmd) has a row in docs/design.md's layout table, every row naming a Go
// package names one that exists, and its imports column lists exactly the
// module's packages it imports (tests aside).
func TestDesignLayoutMatchesTree(t *testing.T) {
	rows := readLayout(t)
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./api/...", "./internal/...", "./cmd/...")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	modCmd := exec.Command("go", "list", "-m")
	modCmd.Dir = repoRoot
	mod, err := modCmd.Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	prefix := strings.TrimSpace(string(mod)) + "/"
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], prefix)
		seen[pkg] = true
		row, ok := rows[pkg]
		if !ok {
			t.Errorf("docs/design.md: the layout table has no row for %s", pkg)
			continue
		}
		var got []string
		for _, imp := range fields[1:] {
			if rel, ok := strings.CutPrefix(imp, prefix); ok {
				got = append(got, strings.TrimPrefix(rel, "internal/"))
			}
		}
		want := slices.Clone(row.imports)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("docs/design.md:%d: %s imports %q, its row says %q", row.line, pkg, got, want)
		}
	}
	for dir, row := range rows {
		if seen[dir] {
			continue
		}
		goFiles, _ := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
		_, statErr := os.Stat(filepath.Join(repoRoot, dir))
		switch {
		case statErr != nil:
			t.Errorf("docs/design.md:%d: the layout table names %s, which is not in the tree", row.line, dir)
		case len(goFiles) > 0 && (strings.HasPrefix(dir, "api/") || strings.HasPrefix(dir, "internal/") || strings.HasPrefix(dir, "cmd/")):
			t.Errorf("docs/design.md:%d: %s is not a package of the product", row.line, dir)
		}
	}
}

func TestExpandBraces(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"cdi", []string{"cdi"}},
		{"kubeletplugin/{checkpoint,nri}", []string{"kubeletplugin/checkpoint", "kubeletplugin/nri"}},
		{"api/swap/v1alpha1{,/limits}", []string{"api/swap/v1alpha1", "api/swap/v1alpha1/limits"}},
	}
	for _, tt := range tests {
		if got := expandBraces(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("expandBraces(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
