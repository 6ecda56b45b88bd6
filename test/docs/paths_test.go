package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/test/docs/mdblock"
)

var (
	// A path in this repository, in backquotes: `internal/controller/podlabels`,
	// `api/swap/v1alpha1/names.go`, `internal/kubeletplugin/pressure.DefaultConfig`.
	repoPath = regexp.MustCompile("`((?:api|cmd|internal|test|hack|deployments|examples)/[A-Za-z0-9_./-]*)`")
	// A symbol named in a file: "`LabelSwapBehavior` in `api/swap/v1alpha1/names.go`".
	symbolIn = regexp.MustCompile("`([A-Z][A-Za-z0-9_]*)` in\\s+`([A-Za-z0-9_./-]+\\.go)`")
	// A package path and one of its symbols: pressure.DefaultConfig.
	pkgSymbol = regexp.MustCompile(`^(.*)\.([A-Z][A-Za-z0-9_]*)$`)
)

// notOurs are paths the docs name that are not in this repository.
var notOurs = map[string]string{
	"hack/local-up-cluster.sh": "Kubernetes' script, which the demo's cluster follows",
}

// TestDocPaths: every path of this repository that the docs name in
// backquotes exists, and every symbol they name in a file or package is
// declared there, so that a move or a rename cannot leave a reader looking
// for what is gone (usage.md once named a constant that had moved).
func TestDocPaths(t *testing.T) {
	files, err := mdblock.Documents(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("deployments", "helm", "dra-driver-swap", "README.md.gotmpl"))
	var paths, symbols int
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
			p := strings.TrimSuffix(m[1], "/")
			if _, ok := notOurs[p]; ok {
				continue
			}
			paths++
			if s := pkgSymbol.FindStringSubmatch(p); s != nil && !strings.Contains(filepath.Base(s[1]), ".") {
				symbols++
				if !declares(t, s[1], s[2]) {
					t.Errorf("%s: `%s`: no Go file of %s declares %s", f, m[1], s[1], s[2])
				}
				continue
			}
			if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
				t.Errorf("%s: `%s` is not in the repository (%v)", f, m[1], err)
			}
		}
		for _, m := range symbolIn.FindAllStringSubmatch(text, -1) {
			symbols++
			if !declares(t, m[2], m[1]) {
				t.Errorf("%s: `%s` in `%s`: not declared there", f, m[1], m[2])
			}
		}
	}
	t.Logf("%d paths, %d symbols named in the docs", paths, symbols)
}

// declares reports whether a Go file (or a package directory's Go files,
// tests left out) declares name at the top level.
func declares(t *testing.T, path, name string) bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^(?:func|type|var|const)\s+(?:\([^)]*\)\s*)?` + name + `\b|^\s+` + name + `\s*(?:=|[A-Za-z*\[])`)
	full := filepath.Join(repoRoot, path)
	files := []string{full}
	if st, err := os.Stat(full); err == nil && st.IsDir() {
		files, _ = filepath.Glob(filepath.Join(full, "*.go"))
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if decl.Match(data) {
			return true
		}
	}
	return false
}
