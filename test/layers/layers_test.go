// Package layers holds the import rules the package layout promises
// (docs/design.md, "Layout") as a test over `go list -deps`, which
// `make verify` runs. A rule is about every package a program links, not
// only its direct imports (which is all golangci-lint's depguard sees), and
// a broken rule is told with the import chain that breaks it. Tests' own
// imports are not counted.
package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the module's root, two levels above this package.
const repoRoot = "../.."

// pkg is what the rules read of one package of `go list -deps -json`.
type pkg struct {
	ImportPath string
	Imports    []string
	Standard   bool
	DepOnly    bool // not one of the patterns' packages: only a dependency of one
}

// rule forbids the packages named by patterns (relative to the module's
// root) to depend on any package for which forbidden is true.
type rule struct {
	name     string // the subtest's
	promise  string // what the rule promises
	patterns []string
	goos     string // GOOS for go list; empty: the host's
	// forbidden reports whether the roots may not depend on p; mod is the
	// module's path.
	forbidden func(mod string, p pkg) bool
	hint      string // what to do instead, told with a violation
}

// under reports whether path is prefix or a package below it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

var rules = []rule{
	{
		name:     "contract",
		promise:  "the contract (api/...) imports nothing under internal/",
		patterns: []string{"./api/..."},
		forbidden: func(mod string, p pkg) bool {
			return under(p.ImportPath, mod+"/internal")
		},
		hint: "what the contract needs belongs in api/",
	},
	{
		name:     "limits",
		promise:  "api/swap/v1alpha1/limits, which the OCI hook links, uses the standard library only",
		patterns: []string{"./api/swap/v1alpha1/limits"},
		forbidden: func(mod string, p pkg) bool {
			return !p.Standard && p.ImportPath != mod+"/api/swap/v1alpha1/limits"
		},
		hint: "keep the bounds and validators free of other modules and of the module's other packages",
	},
	{
		name:     "hook",
		promise:  "dra-swap-hook, which the runtime starts at every container start, links no Kubernetes package (k8s.io/...)",
		patterns: []string{"./cmd/dra-swap-hook"},
		goos:     "linux",
		forbidden: func(_ string, p pkg) bool {
			return strings.HasPrefix(p.ImportPath, "k8s.io/")
		},
		hint: "keep what the hook needs apart from the plugin's Kubernetes code (the hook writes internal/hookrecord; internal/kubeletplugin/podevents, in the plugin, emits the events)",
	},
}

// program is one of the three programs and the directory under internal/
// that holds the packages only it links.
type program struct {
	name string // the subtest's
	cmd  string // its main package
	dir  string // its group of packages
}

// programs are the three programs; every other package under internal/
// is shared (docs/design.md, "Layout").
var programs = []program{
	{name: "kubeletplugin", cmd: "cmd/dra-swap-kubeletplugin", dir: "internal/kubeletplugin"},
	{name: "controller", cmd: "cmd/dra-swap-controller", dir: "internal/controller"},
	{name: "hook", cmd: "cmd/dra-swap-hook", dir: "internal/hook"},
}

// programRules are the rules that keep the programs apart: a program (its
// command and its group) links no package of another program's group, and
// the shared packages (api/ and internal/'s other directories) link none
// of any group, so that what two programs share is in plain sight.
func programRules(t *testing.T) []rule {
	t.Helper()
	inGroup := func(mod, path string, groups []program) bool {
		for _, g := range groups {
			if under(path, mod+"/"+g.dir) {
				return true
			}
		}
		return false
	}
	var out []rule
	for _, prog := range programs {
		others := slices.DeleteFunc(slices.Clone(programs), func(q program) bool { return q == prog })
		out = append(out, rule{
			name:     "programs/" + prog.name,
			promise:  fmt.Sprintf("%s and %s/... link no package of another program (%s)", prog.cmd, prog.dir, dirs(others)),
			patterns: []string{"./" + prog.cmd, "./" + prog.dir + "/..."},
			goos:     "linux",
			forbidden: func(mod string, p pkg) bool {
				return inGroup(mod, p.ImportPath, others)
			},
			hint: "what two programs share moves out of the program's directory, to a shared package directly under internal/ (or to the contract, api/swap/v1alpha1)",
		})
	}
	shared := []string{"./api/..."}
	entries, err := os.ReadDir(filepath.Join(repoRoot, "internal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !slices.ContainsFunc(programs, func(q program) bool { return q.dir == "internal/"+e.Name() }) {
			shared = append(shared, "./internal/"+e.Name()+"/...")
		}
	}
	out = append(out, rule{
		name:     "programs/shared",
		promise:  fmt.Sprintf("the shared packages (%s) link no program's package (%s)", strings.Join(shared, " "), dirs(programs)),
		patterns: shared,
		goos:     "linux",
		forbidden: func(mod string, p pkg) bool {
			return inGroup(mod, p.ImportPath, programs)
		},
		hint: "a package that needs one program's package belongs to that program: move it under the program's directory",
	})
	return out
}

// dirs names the programs' directories.
func dirs(progs []program) string {
	var names []string
	for _, p := range progs {
		names = append(names, p.dir)
	}
	return strings.Join(names, ", ")
}

// TestImportRules: every rule holds for the tree as it is.
func TestImportRules(t *testing.T) {
	mod := modulePath(t)
	for _, r := range append(slices.Clone(rules), programRules(t)...) {
		t.Run(r.name, func(t *testing.T) {
			pkgs, err := goListDeps(r.goos, r.patterns)
			if err != nil {
				t.Fatal(err)
			}
			if len(pkgs) == 0 {
				t.Fatalf("go list -deps %s lists no package", strings.Join(r.patterns, " "))
			}
			if msg := check(pkgs, func(p pkg) bool { return r.forbidden(mod, p) }, mod); msg != "" {
				t.Errorf("%s, but %s%s.", r.promise, msg, r.hint)
			} else {
				t.Logf("%d packages, none forbidden", len(pkgs))
			}
		})
	}
}

// check returns, when the roots (the packages that are not DepOnly)
// depend on forbidden packages, a message naming how many and, for each
// place where the graph enters the forbidden set (an allowed package
// importing a forbidden one, or a forbidden root), the shortest import
// chain from a root to it; "" when none is forbidden. Paths are shown
// relative to mod when under it.
func check(pkgs []pkg, forbidden func(pkg) bool, mod string) string {
	byPath := make(map[string]pkg, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var bad []string
	for _, p := range pkgs {
		if forbidden(p) {
			bad = append(bad, p.ImportPath)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	// Breadth first from every root: parent[q] is the package through
	// which q was first reached, so following it gives a shortest chain.
	parent := map[string]string{}
	var queue []string
	for _, p := range pkgs {
		if !p.DepOnly {
			parent[p.ImportPath] = ""
			queue = append(queue, p.ImportPath)
		}
	}
	slices.Sort(queue)
	var entries []string // chains that end where the graph enters the forbidden set
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		p := byPath[path]
		if forbidden(p) {
			if parent[path] == "" { // a forbidden root
				entries = append(entries, chain(parent, path, mod))
			}
			continue // what a forbidden package imports is told through it
		}
		for _, imp := range p.Imports {
			if _, seen := parent[imp]; seen {
				if forbidden(byPath[imp]) {
					// Another way in to a forbidden package: told too.
					entries = append(entries, chain(parent, path, mod)+" -> "+short(imp, mod))
				}
				continue
			}
			if _, listed := byPath[imp]; !listed {
				continue // "C" and the like: no package of its own
			}
			parent[imp] = path
			queue = append(queue, imp)
			if forbidden(byPath[imp]) {
				entries = append(entries, chain(parent, imp, mod))
			}
		}
	}
	slices.Sort(entries)
	entries = slices.Compact(entries)
	var b strings.Builder
	fmt.Fprintf(&b, "it depends on %d forbidden packages (%s), through:\n", len(bad), summary(bad, mod))
	for _, e := range entries {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

// chain is the import chain from a root to path, "a -> b -> path".
func chain(parent map[string]string, path, mod string) string {
	var links []string
	// Bounded: every package is on the chain at most once.
	for p := path; p != "" && len(links) <= len(parent); p = parent[p] {
		links = append(links, short(p, mod))
	}
	slices.Reverse(links)
	return strings.Join(links, " -> ")
}

// short is path relative to the module's root, when under it.
func short(path, mod string) string {
	if rel, ok := strings.CutPrefix(path, mod+"/"); ok {
		return rel
	}
	return path
}

// summary names up to three of the forbidden packages.
func summary(bad []string, mod string) string {
	slices.Sort(bad)
	var names []string
	for _, b := range bad[:min(3, len(bad))] {
		names = append(names, short(b, mod))
	}
	if len(bad) > 3 {
		names = append(names, "...")
	}
	return strings.Join(names, ", ")
}

func modulePath(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// goListDeps lists the patterns' packages and all they depend on, as the
// static builds of the images compile them (CGO_ENABLED=0).
func goListDeps(goos string, patterns []string) ([]pkg, error) {
	args := append([]string{"list", "-deps", "-json=ImportPath,Imports,Standard,DepOnly"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if goos != "" {
		cmd.Env = append(cmd.Env, "GOOS="+goos)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding go list's output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// TestCheck: check tells each way into the forbidden set with a shortest
// chain, and nothing when no package is forbidden.
func TestCheck(t *testing.T) {
	const mod = "example.com/m"
	graph := []pkg{
		{ImportPath: mod + "/cmd/hook", Imports: []string{mod + "/a", mod + "/b", "fmt"}},
		{ImportPath: mod + "/a", Imports: []string{"k8s.io/klog", "fmt"}, DepOnly: true},
		{ImportPath: mod + "/b", Imports: []string{mod + "/c"}, DepOnly: true},
		{ImportPath: mod + "/c", Imports: []string{"k8s.io/api"}, DepOnly: true},
		{ImportPath: "k8s.io/api", Imports: []string{"k8s.io/klog"}, DepOnly: true},
		{ImportPath: "k8s.io/klog", Imports: []string{"fmt"}, DepOnly: true},
		{ImportPath: "fmt", Standard: true, DepOnly: true},
	}
	k8s := func(p pkg) bool { return strings.HasPrefix(p.ImportPath, "k8s.io/") }
	tests := []struct {
		name      string
		graph     []pkg
		forbidden func(pkg) bool
		want      string
	}{
		{
			name:      "none forbidden",
			graph:     graph,
			forbidden: func(pkg) bool { return false },
			want:      "",
		},
		{
			name:      "two ways in",
			graph:     graph,
			forbidden: k8s,
			want: "it depends on 2 forbidden packages (k8s.io/api, k8s.io/klog), through:\n" +
				"  cmd/hook -> a -> k8s.io/klog\n" +
				"  cmd/hook -> b -> c -> k8s.io/api\n",
		},
		{
			name:      "a second way in to a package already reached",
			graph:     append(slices.Clone(graph), pkg{ImportPath: mod + "/d", Imports: []string{"k8s.io/klog"}, DepOnly: true}, pkg{ImportPath: mod + "/cmd/other", Imports: []string{mod + "/d"}}),
			forbidden: k8s,
			want: "it depends on 2 forbidden packages (k8s.io/api, k8s.io/klog), through:\n" +
				"  cmd/hook -> a -> k8s.io/klog\n" +
				"  cmd/hook -> b -> c -> k8s.io/api\n" +
				"  cmd/other -> d -> k8s.io/klog\n",
		},
		{
			name:      "a forbidden root",
			graph:     graph,
			forbidden: func(p pkg) bool { return p.ImportPath == mod+"/cmd/hook" },
			want:      "it depends on 1 forbidden packages (cmd/hook), through:\n  cmd/hook\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := check(tt.graph, tt.forbidden, mod); got != tt.want {
				t.Errorf("check() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
