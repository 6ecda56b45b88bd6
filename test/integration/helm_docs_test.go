package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// helmDocsArgs are the arguments `make chart-docs` gives helm-docs, after
// --chart-search-root.
var helmDocsArgs = []string{"--sort-values-order", "file", "--log-level", "warning"}

// helmDocsBinary is $HELM_DOCS (`make integration` builds it with
// hack/build-tools.sh).
func helmDocsBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HELM_DOCS")
	if bin == "" {
		bin = "../../_output/bin/helm-docs"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no helm-docs binary at %s (%v): run `hack/build-tools.sh helm-docs` or set HELM_DOCS", bin, err)
	}
	return bin
}

// TestChartREADME: the chart's README.md is what helm-docs generates from
// README.md.gotmpl and values.yaml's comments now (`make chart-docs`),
// generated in a copy of the chart without a warning.
func TestChartREADME(t *testing.T) {
	t.Parallel()
	bin := helmDocsBinary(t)
	dir := filepath.Join(t.TempDir(), "dra-driver-swap")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "README.md")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--chart-search-root", dir}, helmDocsArgs...)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm-docs: %v\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("helm-docs warned:\n%s", stderr.String())
	}
	generated, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatalf("helm-docs wrote no README.md: %v", err)
	}
	checkedIn, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(generated, checkedIn) {
		t.Errorf("%s/README.md is not what helm-docs generates from values.yaml and README.md.gotmpl: run `make chart-docs`\n%s",
			chartDir, firstDifference(string(checkedIn), string(generated)))
	}
	// Every value is documented.
	for _, line := range strings.Split(string(generated), "\n") {
		if strings.HasPrefix(line, "| ") && strings.HasSuffix(line, " |  |") {
			t.Errorf("a value without a description (a `# --` comment in values.yaml): %s", line)
		}
	}
}

// firstDifference describes the first line where two texts differ.
func firstDifference(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(h) || i < len(w); i++ {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl {
			return fmt.Sprintf("first difference at line %d:\n  checked in: %s\n  generated:  %s", i+1, hl, wl)
		}
	}
	return ""
}

// schemaArgs are the arguments `make chart-schema` gives
// helm-values-schema-json (CHART_SCHEMA_ARGS), after --values and --output.
var schemaArgs = []string{"--draft", "7", "--indent", "2", "--use-helm-docs",
	"--schema-root.title", "dra-driver-swap values", "--schema-root.additional-properties=false"}

// TestChartSchema: the chart's values.schema.json is what
// helm-values-schema-json generates from values.yaml (its `# @schema`
// annotations and `# --` descriptions) now (`make chart-schema`).
func TestChartSchema(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("HELM_VALUES_SCHEMA_JSON")
	if bin == "" {
		bin = "../../_output/bin/helm-values-schema-json"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no helm-values-schema-json binary at %s (%v): run `hack/build-tools.sh helm-values-schema-json` or set HELM_VALUES_SCHEMA_JSON", bin, err)
	}
	// Absolute: the command runs in another directory.
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	values, err := filepath.Abs(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "values.schema.json")
	cmd := exec.Command(bin, append([]string{"--values", values, "--output", out}, schemaArgs...)...)
	// Its working directory holds no .schema.yaml (the generator's
	// configuration file, read from there when present).
	cmd.Dir = dir
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm-values-schema-json: %v\n%s", err, output)
	}
	generated, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("helm-values-schema-json wrote no schema: %v", err)
	}
	checkedIn, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(generated, checkedIn) {
		t.Errorf("%s/values.schema.json is not what helm-values-schema-json generates from values.yaml: run `make chart-schema`\n%s",
			chartDir, firstDifference(string(checkedIn), string(generated)))
	}
}
