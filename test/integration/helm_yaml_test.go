package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestChartStrictYAML parses every rendering of the chart (the value sets
// TestChart renders) and deployments/static the way the tools that consume
// them do: go-yaml v3 (kustomize, yq, GitOps pipelines), node by node
// refusing a mapping key that appears twice, and sigs.k8s.io/yaml
// strictly (YAMLToJSONStrict, which refuses duplicate keys too). Helm and
// kubectl keep the last of two equal keys silently; these tools refuse the
// whole manifest.
func TestChartStrictYAML(t *testing.T) {
	t.Parallel()
	renderings := map[string]string{}
	for name, values := range chartValueSets() {
		out, err := runHelm(t, append([]string{"template", "dra-driver-swap", chartDir, "--namespace", "dra-swap",
			"--api-versions", "monitoring.coreos.com/v1", "--api-versions", "cert-manager.io/v1"}, values...)...)
		if err != nil {
			t.Fatalf("helm template with %s values: %v", name, err)
		}
		renderings[name+" values"] = out
	}
	static, err := os.ReadFile(staticManifest)
	if err != nil {
		t.Fatal(err)
	}
	renderings[staticManifest] = string(static)
	for name, manifest := range renderings {
		t.Run(name, func(t *testing.T) {
			errs := strictYAMLErrors(manifest)
			for _, err := range errs {
				t.Error(err)
			}
			if len(errs) == 0 && strings.Count(manifest, "\nkind: ") < 10 {
				t.Errorf("only %d objects parsed: not the chart's output", strings.Count(manifest, "\nkind: "))
			}
		})
	}
}

// TestStrictYAMLErrors proves the checker TestChartStrictYAML relies on:
// it refuses a key twice in one mapping, at any depth, in any document,
// with either parser, and accepts the same key in sibling mappings.
func TestStrictYAMLErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, manifest string
		want           []string
	}{
		{"sibling mappings", "kind: A\nmetadata:\n  labels: {a: x}\n  annotations: {a: x}\n---\nkind: B\n", nil},
		{"top level", "kind: A\nkind: B\n", []string{`go-yaml v3: document 1 (A ): line 2: mapping key "kind" already defined at line 1`, `sigs.k8s.io/yaml strict: `, `key "kind" already set in map`}},
		{"pod template labels", "kind: DaemonSet\nmetadata: {name: p}\nspec:\n  template:\n    metadata:\n      labels:\n        app.kubernetes.io/instance: r\n        app.kubernetes.io/instance: r\n",
			[]string{`go-yaml v3: document 1 (DaemonSet p): line 8: mapping key "app.kubernetes.io/instance" already defined at line 7 (in spec.template.metadata.labels)`,
				`sigs.k8s.io/yaml strict: DaemonSet p: `, `key "app.kubernetes.io/instance" already set in map`}},
		{"second document, in a list", "kind: A\n---\nkind: B\nlist:\n- {x: 1, x: 2}\n", []string{`go-yaml v3: document 2 (B ): line 5: mapping key "x" already defined at line 5 (in list[0])`, `sigs.k8s.io/yaml strict: B : `, `key "x" already set in map`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, err := range strictYAMLErrors(c.manifest) {
				got = append(got, err.Error())
			}
			if len(c.want) == 0 && len(got) > 0 {
				t.Errorf("refused: %q", got)
			}
			all := strings.Join(got, "\n")
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("errors %q do not say %q", got, w)
				}
			}
		})
	}
}

// strictYAMLErrors parses a multi-document manifest with go-yaml v3 (each
// document as a node tree, every mapping checked for a repeated key, then
// decoded, which refuses one too) and with sigs.k8s.io/yaml's
// YAMLToJSONStrict per document; it returns every refusal.
func strictYAMLErrors(manifest string) []error {
	var errs []error
	dec := yamlv3.NewDecoder(strings.NewReader(manifest))
	for i := 1; ; i++ {
		var doc yamlv3.Node
		if err := dec.Decode(&doc); err != nil {
			if !errors.Is(err, io.EOF) {
				errs = append(errs, fmt.Errorf("go-yaml v3: document %d: %w", i, err))
			}
			break
		}
		what := fmt.Sprintf("document %d (%s %s)", i, scalarAt(&doc, "kind"), scalarAt(&doc, "metadata", "name"))
		for _, err := range duplicateKeys(&doc, "") {
			errs = append(errs, fmt.Errorf("go-yaml v3: %s: %w", what, err))
		}
		var v any
		if err := doc.Decode(&v); err != nil {
			errs = append(errs, fmt.Errorf("go-yaml v3: %s: decode: %w", what, err))
		}
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				errs = append(errs, fmt.Errorf("sigs.k8s.io/yaml strict: split documents: %w", err))
			}
			break
		}
		if _, err := sigsyaml.YAMLToJSONStrict(doc); err != nil {
			// Name the object as far as a lenient parse can.
			var obj struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			_ = sigsyaml.Unmarshal(doc, &obj)
			errs = append(errs, fmt.Errorf("sigs.k8s.io/yaml strict: %s %s: %w", obj.Kind, obj.Metadata.Name, err))
		}
	}
	return errs
}

// duplicateKeys walks a node tree and reports each mapping key that an
// earlier key of the same mapping already defined.
func duplicateKeys(n *yamlv3.Node, path string) []error {
	var errs []error
	switch n.Kind {
	case yamlv3.DocumentNode:
		for _, c := range n.Content {
			errs = append(errs, duplicateKeys(c, path)...)
		}
	case yamlv3.SequenceNode:
		for i, c := range n.Content {
			errs = append(errs, duplicateKeys(c, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case yamlv3.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if line, ok := seen[k.Value]; ok {
				where := ""
				if path != "" {
					where = " (in " + path + ")"
				}
				errs = append(errs, fmt.Errorf("line %d: mapping key %q already defined at line %d%s", k.Line, k.Value, line, where))
			} else {
				seen[k.Value] = k.Line
			}
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			errs = append(errs, duplicateKeys(v, child)...)
		}
	}
	return errs
}

// scalarAt is the scalar at a path of mapping keys in a document, or "".
func scalarAt(n *yamlv3.Node, keys ...string) string {
	if n.Kind == yamlv3.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for _, key := range keys {
		if n.Kind != yamlv3.MappingNode {
			return ""
		}
		var next *yamlv3.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
				break
			}
		}
		if next == nil {
			return ""
		}
		n = next
	}
	if n.Kind != yamlv3.ScalarNode {
		return ""
	}
	return n.Value
}
