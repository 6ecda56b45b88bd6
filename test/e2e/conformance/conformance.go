// Package conformance lists the e2e suite's tests as the conformance suite
// runs them (E2E_CONFORMANCE=1: against any cluster where the driver is
// installed, given KUBECONFIG, without access to its nodes): what each test
// checks, and which it skips and why. It reads the suite's source, where
// each test says what it needs beyond the API and what its pods see of
// their own cgroups: loadCluster(t, needsNode("why")), needsOurCluster("why")
// or checksOnNode("what"). `e2e.test -list-conformance` prints the list,
// docs/conformance.md holds it (test/docs keeps the two equal), and the
// suite's skips use the same words (Requirement.Skip).
package conformance

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Kind is what a test needs beyond the API and its pods' own view.
type Kind string

// The kinds, named after the e2e suite's functions that declare them.
const (
	// NodeAccess: the test reads or writes the node's files or runs
	// programs there (cgroup trees, CDI specs, the checkpoint, swap areas,
	// systemctl, the node's processes). Skipped by the conformance suite.
	NodeAccess Kind = "needsNode"
	// OurCluster: the test needs this repository's e2e cluster (its
	// scripts, its helm release and registry, its two nodes, its driver
	// settings), or changes the driver's installation. Skipped by the
	// conformance suite.
	OurCluster Kind = "needsOurCluster"
	// NodeChecks: the test runs in the conformance suite, but some of its
	// checks read the node and are left out there.
	NodeChecks Kind = "checksOnNode"
)

// Requirement is one loadCluster option of a test.
type Requirement struct {
	Kind Kind
	// Text says why (NodeAccess, OurCluster) or what is left out
	// (NodeChecks).
	Text string
}

// Skip is the reason the conformance suite skips a test with r, or "" when
// it runs the test.
func (r Requirement) Skip() string {
	switch r.Kind {
	case NodeAccess:
		return "needs access to the node: " + r.Text
	case OurCluster:
		return "needs this repository's e2e cluster: " + r.Text
	}
	return ""
}

// Test is one test of the e2e suite as the conformance suite runs it.
type Test struct {
	Name string
	// Checks is the first sentence of the test's doc comment.
	Checks string
	// Requirements are its loadCluster options, in order.
	Requirements []Requirement
}

// Skip is why the conformance suite skips the test ("" when it runs it).
func (t Test) Skip() string {
	var why []string
	for _, r := range t.Requirements {
		if s := r.Skip(); s != "" {
			why = append(why, s)
		}
	}
	return strings.Join(why, "; ")
}

// LeftOut is what the conformance suite leaves out of a test it runs.
func (t Test) LeftOut() string {
	var what []string
	for _, r := range t.Requirements {
		if r.Kind == NodeChecks {
			what = append(what, r.Text)
		}
	}
	return strings.Join(what, "; ")
}

// loader is the suite's function that connects a test to the cluster.
const loader = "loadCluster"

// List reads the e2e suite's test files (*_test.go at fsys's root) and
// returns every test that connects to the cluster (through loadCluster,
// directly or through a function of the suite that calls it), sorted by
// name. Tests that do not connect to a cluster are left out. A
// requirement's text must be a string literal (or literals joined with +),
// so that the list says exactly what the suite skips.
func List(fsys fs.FS) ([]Test, error) {
	names, err := fs.Glob(fsys, "*_test.go")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no *_test.go files")
	}
	fset := token.NewFileSet()
	var funcs []*ast.FuncDecl
	for _, name := range names {
		src, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path.Base(name), src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				funcs = append(funcs, fd)
			}
		}
	}
	// Which functions connect (loaders): loadCluster itself, and every
	// function that calls a loader, with the requirements of that call.
	// Iterated to a fixed point, bounded by the number of functions.
	loaders := map[string][]Requirement{loader: nil}
	for range len(funcs) + 1 {
		grew := false
		for _, fd := range funcs {
			name := fd.Name.Name
			if _, known := loaders[name]; known || isTest(fd) {
				continue
			}
			reqs, found, err := loaderCall(fset, fd, loaders)
			if err != nil {
				return nil, err
			}
			if found {
				loaders[name] = reqs
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	var tests []Test
	for _, fd := range funcs {
		if !isTest(fd) {
			continue
		}
		reqs, found, err := loaderCall(fset, fd, loaders)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		tests = append(tests, Test{Name: fd.Name.Name, Checks: firstSentence(fd.Name.Name, fd.Doc.Text()), Requirements: reqs})
	}
	slices.SortFunc(tests, func(a, b Test) int { return strings.Compare(a.Name, b.Name) })
	return tests, nil
}

// isTest: func TestX(t *testing.T).
func isTest(fd *ast.FuncDecl) bool {
	if fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "Test") || fd.Name.Name == "TestMain" {
		return false
	}
	params := fd.Type.Params.List
	if len(params) != 1 {
		return false
	}
	star, ok := params[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "T"
}

// loaderCall finds the calls of loaders in fd's body and returns the
// requirements they carry: the loader's own and the call's options. All
// calls must carry the same.
func loaderCall(fset *token.FileSet, fd *ast.FuncDecl, loaders map[string][]Requirement) (reqs []Requirement, found bool, err error) {
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if err != nil {
			return false
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		id, ok := call.Fun.(*ast.Ident)
		if !ok {
			return true
		}
		inherited, isLoader := loaders[id.Name]
		if !isLoader {
			return true
		}
		got := slices.Clone(inherited)
		if id.Name == loader {
			for _, arg := range call.Args[min(1, len(call.Args)):] {
				r, rerr := requirement(arg)
				if rerr != nil {
					err = fmt.Errorf("%s: %s: %w", fset.Position(arg.Pos()), fd.Name.Name, rerr)
					return false
				}
				got = append(got, r)
			}
		}
		if found && !slices.Equal(got, reqs) {
			err = fmt.Errorf("%s: %s connects to the cluster twice with different requirements (%v, then %v)", fset.Position(call.Pos()), fd.Name.Name, reqs, got)
			return false
		}
		reqs, found = got, true
		return true
	})
	return reqs, found, err
}

// requirement reads one loadCluster option: needsNode("…"),
// needsOurCluster("…") or checksOnNode("…").
func requirement(arg ast.Expr) (Requirement, error) {
	call, ok := arg.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return Requirement{}, fmt.Errorf("a loadCluster option must be a call of %s, %s or %s with one string", NodeAccess, OurCluster, NodeChecks)
	}
	id, ok := call.Fun.(*ast.Ident)
	if !ok {
		return Requirement{}, fmt.Errorf("a loadCluster option must be a call of %s, %s or %s", NodeAccess, OurCluster, NodeChecks)
	}
	kind := Kind(id.Name)
	switch kind {
	case NodeAccess, OurCluster, NodeChecks:
	default:
		return Requirement{}, fmt.Errorf("unknown loadCluster option %s", id.Name)
	}
	text, err := stringLiteral(call.Args[0])
	if err != nil {
		return Requirement{}, fmt.Errorf("%s: %w", kind, err)
	}
	if strings.TrimSpace(text) == "" {
		return Requirement{}, fmt.Errorf("%s: the text is empty", kind)
	}
	return Requirement{Kind: kind, Text: text}, nil
}

// stringLiteral evaluates a string literal or literals joined with +.
func stringLiteral(e ast.Expr) (string, error) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind == token.STRING {
			return strconv.Unquote(v.Value)
		}
	case *ast.ParenExpr:
		return stringLiteral(v.X)
	case *ast.BinaryExpr:
		if v.Op == token.ADD {
			a, err := stringLiteral(v.X)
			if err != nil {
				return "", err
			}
			b, err := stringLiteral(v.Y)
			if err != nil {
				return "", err
			}
			return a + b, nil
		}
	}
	return "", fmt.Errorf("the text must be a string literal, so that the list says what the suite does")
}

// firstSentence is the doc comment's first sentence, on one line, without
// the test's name and the colon or "is" that follows it.
func firstSentence(name, doc string) string {
	para, _, _ := strings.Cut(strings.TrimSpace(doc), "\n\n")
	s := strings.Join(strings.Fields(para), " ")
	// The sentence ends at ". " before an upper-case letter, else with
	// the paragraph.
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '.' && s[i+1] == ' ' {
			if r, _ := utf8.DecodeRuneInString(s[i+2:]); unicode.IsUpper(r) {
				s = s[:i+1]
				break
			}
		}
	}
	if rest, ok := strings.CutPrefix(s, name); ok {
		rest = strings.TrimPrefix(strings.TrimLeft(rest, ": "), "is ")
		if r, size := utf8.DecodeRuneInString(rest); size > 0 {
			s = string(unicode.ToUpper(r)) + rest[size:]
		}
	}
	return s
}

// Markdown is the list as docs/conformance.md shows it: one table row per
// test.
func Markdown(tests []Test) string {
	run, skipped := 0, 0
	for _, t := range tests {
		if t.Skip() == "" {
			run++
		} else {
			skipped++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The conformance suite runs %d of these %d tests and skips %d.\n\n", run, len(tests), skipped)
	b.WriteString("| test | what it checks | in the conformance suite |\n|---|---|---|\n")
	for _, t := range tests {
		verdict := "runs"
		switch skip, left := t.Skip(), t.LeftOut(); {
		case skip != "":
			verdict = "skipped: " + skip
		case left != "":
			verdict = "runs, without the checks that read the node: " + left
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", t.Name, cell(t.Checks), cell(verdict))
	}
	return b.String()
}

// cell escapes what would end a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
