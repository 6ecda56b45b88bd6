package conformance

import (
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

// suite is a source file of a suite as the e2e package writes it.
const suite = `package e2e

import "testing"

func loadCluster(t *testing.T, reqs ...requirement) *env { return nil }
func needsNode(why string) requirement { return requirement{} }
func needsOurCluster(why string) requirement { return requirement{} }
func checksOnNode(what string) requirement { return requirement{} }

// loadTwo is a loader of the suite's own.
func loadTwo(t *testing.T) *env {
	return loadCluster(t, needsOurCluster("two " + "nodes"))
}

// loadTwoMore wraps a wrapper.
func loadTwoMore(t *testing.T) *env { return loadTwo(t) }

// TestPortable is KEP-5359's story. It says more.
func TestPortable(t *testing.T) {
	c := loadCluster(t)
	_ = c
}

// TestNode: reads the node's files. More.
func TestNode(t *testing.T) {
	loadCluster(t, needsNode("reads | files"))
}

// TestPartly checks a thing
// over two lines. And more.
func TestPartly(t *testing.T) {
	loadCluster(t, checksOnNode("the pod cgroup"))
}

// TestTwo: the two nodes.
func TestTwo(t *testing.T) { loadTwoMore(t) }

// TestPure does not connect.
func TestPure(t *testing.T) {}

func helper(t *testing.T) { loadCluster(t, needsNode("helper")) }
`

func TestList(t *testing.T) {
	tests, err := List(fstest.MapFS{"a_test.go": {Data: []byte(suite)}, "notes.md": {Data: []byte("not Go")}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Test{
		{Name: "TestNode", Checks: "Reads the node's files.", Requirements: []Requirement{{NodeAccess, "reads | files"}}},
		{Name: "TestPartly", Checks: "Checks a thing over two lines.", Requirements: []Requirement{{NodeChecks, "the pod cgroup"}}},
		{Name: "TestPortable", Checks: "KEP-5359's story.", Requirements: nil},
		{Name: "TestTwo", Checks: "The two nodes.", Requirements: []Requirement{{OurCluster, "two nodes"}}},
	}
	if !reflect.DeepEqual(tests, want) {
		t.Errorf("List:\n got %+v\nwant %+v", tests, want)
	}
	md := Markdown(tests)
	for _, line := range []string{
		"The conformance suite runs 2 of these 4 tests and skips 2.",
		"| `TestNode` | Reads the node's files. | skipped: needs access to the node: reads \\| files |",
		"| `TestPartly` | Checks a thing over two lines. | runs, without the checks that read the node: the pod cgroup |",
		"| `TestPortable` | KEP-5359's story. | runs |",
		"| `TestTwo` | The two nodes. | skipped: needs this repository's e2e cluster: two nodes |",
	} {
		if !strings.Contains(md, line+"\n") {
			t.Errorf("Markdown lacks the line %q:\n%s", line, md)
		}
	}
}

func TestListRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"computed text", `func TestX(t *testing.T) { why := "x"; loadCluster(t, needsNode(why)) }`, "string literal"},
		{"empty text", `func TestX(t *testing.T) { loadCluster(t, needsNode(" ")) }`, "empty"},
		{"unknown option", `func TestX(t *testing.T) { loadCluster(t, needsLuck("x")) }`, "unknown loadCluster option needsLuck"},
		{"not a call", `func TestX(t *testing.T) { loadCluster(t, opt) }`, "must be a call"},
		{"two requirements", `func TestX(t *testing.T) { loadCluster(t); loadCluster(t, needsNode("x")) }`, "twice with different requirements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "package e2e\nimport \"testing\"\n" + tc.body + "\n"
			_, err := List(fstest.MapFS{"x_test.go": {Data: []byte(src)}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := List(fstest.MapFS{}); err == nil {
		t.Error("no files: got no error")
	}
}

func TestRequirementSkip(t *testing.T) {
	for _, tc := range []struct {
		r    Requirement
		want string
	}{
		{Requirement{NodeAccess, "why"}, "needs access to the node: why"},
		{Requirement{OurCluster, "why"}, "needs this repository's e2e cluster: why"},
		{Requirement{NodeChecks, "what"}, ""},
	} {
		if got := tc.r.Skip(); got != tc.want {
			t.Errorf("%+v.Skip() = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestFirstSentence(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"TestX: a thing, e.g. this. Then more.", "A thing, e.g. this."},
		{"TestX is a story: told.\n\nAnother paragraph.", "A story: told."},
		{"TestX checks\nthat v1.2 works", "Checks that v1.2 works"},
		{"Something else first. TestX.", "Something else first."},
		{"", ""},
	} {
		if got := firstSentence("TestX", tc.doc); got != tc.want {
			t.Errorf("firstSentence(%q) = %q, want %q", tc.doc, got, tc.want)
		}
	}
}
