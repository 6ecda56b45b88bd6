package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/dra-driver-swap/dra-driver-swap/test/docs/mdblock"
	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

// TestDocCommands: every fenced block of README.md, docs/*.md and the
// chart's README is output (```text), or a command or manifest that the
// e2e test TestDocCommands runs on the e2e cluster (```sh, ```yaml), or
// marked on the line before its fence with why it is not run there
// (<!-- not run: reason -->). A block that is run must be runnable: a
// shell block bash parses, with no placeholder but those the e2e test
// fills in, of simple commands of the programs it knows how to run
// (mdblock.Commands, mdblock.Programs); a manifest of whole objects.
func TestDocCommands(t *testing.T) {
	blocks, err := mdblock.Load(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	var run, marked, output int
	for _, b := range blocks {
		switch {
		case !slices.Contains(mdblock.Langs, b.Lang):
			t.Errorf("%s: a block is output (```text), a command (```sh) or a manifest (```yaml), not %q: "+
				"TestDocCommands (test/e2e) runs each ```sh and ```yaml block unless the line before its fence says why not (<!-- not run: reason -->)", b, b.Lang)
		case b.Lang == mdblock.Text && b.NotRun != "":
			t.Errorf("%s: output (```text) is never run: drop its <!-- not run --> marker", b)
		case b.Lang == mdblock.Text:
			output++
		case b.NotRun != "":
			marked++
		default:
			run++
			checkRunnable(t, b)
		}
	}
	t.Logf("%d blocks: %d run by the e2e test TestDocCommands, %d marked not run, %d output", len(blocks), run, marked, output)
	if run == 0 {
		t.Errorf("no block is run: the parser found none")
	}
}

// checkRunnable fails a block the e2e test could not run as it is.
func checkRunnable(t *testing.T, b mdblock.Block) {
	t.Helper()
	for _, p := range b.Placeholders() {
		if _, ok := mdblock.Substitutions[p]; !ok {
			t.Errorf("%s: placeholder %s: the e2e test fills in only %v; use one of them or mark the block", b, p, slices.Sorted(mapKeys(mdblock.Substitutions)))
		}
	}
	switch b.Lang {
	case mdblock.Shell:
		values := map[string]string{}
		for p := range mdblock.Substitutions {
			values[p] = "placeholder.example"
		}
		text := b.Substitute(values)
		cmds, err := mdblock.Commands(text)
		if err != nil {
			t.Errorf("%s: %v: mark the block <!-- not run: reason --> or split it", b, err)
		}
		for _, c := range cmds {
			if !slices.Contains(mdblock.Programs, c.Args[0]) {
				t.Errorf("%s: %s: TestDocCommands runs only %v; mark the block <!-- not run: reason --> (what runs it instead, or why nothing can)", b, c.Text, mdblock.Programs)
			}
		}
		cmd := exec.Command("bash", "-n")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: bash cannot parse the block: %v\n%s", b, err, out)
		}
	case mdblock.YAML:
		objs, err := manifest.Decode(b.Text)
		if err != nil {
			t.Errorf("%s: %v", b, err)
			return
		}
		if len(objs) == 0 {
			t.Errorf("%s: the manifest holds no object", b)
		}
		if m := examplesLink.FindStringSubmatch(b.Before); m != nil {
			sameAsExample(t, b, objs, m[1])
		}
		for i, o := range objs {
			if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
				t.Errorf("%s: document %d is not a whole object (apiVersion, kind, metadata.name): mark a fragment <!-- not run: a fragment of … -->", b, i+1)
			}
		}
	}
}

// examplesLink ends the text that shows a file of examples/ in a block:
// "… ([examples/swap-claim.yaml](examples/swap-claim.yaml)):".
var examplesLink = regexp.MustCompile(`\(\[examples/([A-Za-z0-9._-]+\.yaml)\]\([^)]*\)\):$`)

// sameAsExample fails a block that shows a file of examples/ (which
// TestExamples applies) but holds other objects than the file: the file
// is the one source, the block its copy.
func sameAsExample(t *testing.T, b mdblock.Block, objs []*unstructured.Unstructured, name string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "examples", name))
	if err != nil {
		t.Errorf("%s: %v", b, err)
		return
	}
	want, err := manifest.Decode(string(data))
	if err != nil {
		t.Errorf("examples/%s: %v", name, err)
		return
	}
	if len(objs) != len(want) {
		t.Errorf("%s shows examples/%s with %d objects; the file holds %d", b, name, len(objs), len(want))
		return
	}
	for i := range objs {
		if !reflect.DeepEqual(objs[i].Object, want[i].Object) {
			t.Errorf("%s shows examples/%s, but its %s %s differs from the file's: copy the file", b, name, objs[i].GetKind(), objs[i].GetName())
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
