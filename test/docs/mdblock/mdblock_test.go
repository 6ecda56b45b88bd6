package mdblock

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    []Block
		wantErr bool
	}{
		{name: "none", content: "# title\n\ntext\n"},
		{
			name:    "languages and a marker",
			content: "a\n```sh\nls\n```\n<!-- not run: needs a cloud registry -->\n```yaml\nkind: Pod\n```\n```\nout\n```\n",
			want: []Block{
				{File: "f.md", Line: 2, Lang: "sh", Text: "ls\n", Before: "a"},
				{File: "f.md", Line: 6, Lang: "yaml", Text: "kind: Pod\n", NotRun: "needs a cloud registry", Before: "a"},
				{File: "f.md", Line: 9, Lang: "", Text: "out\n", Before: "a"},
			},
		},
		{
			name:    "a marker not right before the fence counts for nothing",
			content: "<!-- not run: far away -->\n\n```sh\nls\n```\n",
			want:    []Block{{File: "f.md", Line: 3, Lang: "sh", Text: "ls\n"}},
		},
		{
			name:    "a longer fence holds a shorter one",
			content: "````text\n```sh\n````\n",
			want:    []Block{{File: "f.md", Line: 1, Lang: "text", Text: "```sh\n"}},
		},
		{name: "unclosed", content: "```sh\nls\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse("f.md", tc.content)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %t", err, tc.wantErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRunAndPlaceholders(t *testing.T) {
	for _, tc := range []struct {
		b            Block
		run          bool
		placeholders []string
	}{
		{b: Block{Lang: Shell, Text: "helm install x oci://<registry>/c --version <x.y.z> --set r=<registry>/d\n"}, run: true, placeholders: []string{"<registry>", "<x.y.z>"}},
		{b: Block{Lang: YAML, Text: "kind: Pod\n"}, run: true},
		{b: Block{Lang: Shell, NotRun: "slow", Text: "make demo\n"}},
		{b: Block{Lang: Text, Text: "PASS <node>\n"}, placeholders: []string{"<node>"}},
		{b: Block{Lang: "", Text: "ls\n"}},
	} {
		if got := tc.b.Run(); got != tc.run {
			t.Errorf("%+v: Run() = %t, want %t", tc.b, got, tc.run)
		}
		if got := tc.b.Placeholders(); !reflect.DeepEqual(got, tc.placeholders) {
			t.Errorf("%+v: Placeholders() = %v, want %v", tc.b, got, tc.placeholders)
		}
	}
}

func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		name    string
		text    string
		want    []Command
		wantErr bool
	}{
		{
			name: "comments, continuation, quotes",
			text: "kubectl describe pod batch   # a comment\n\nhelm upgrade x c -n ns \\\n  --set 'a.b=c[\"d\"\\, \"e\"]' \\\n  --set \"f=g\"\n",
			want: []Command{
				{Line: 1, Text: "kubectl describe pod batch", Args: []string{"kubectl", "describe", "pod", "batch"}},
				{Line: 3, Text: `helm upgrade x c -n ns    --set 'a.b=c["d"\, "e"]'    --set "f=g"`, Args: []string{"helm", "upgrade", "x", "c", "-n", "ns", "--set", `a.b=c["d"\, "e"]`, "--set", "f=g"}},
			},
		},
		{name: "a pipe", text: "kubectl get pods | grep x\n", wantErr: true},
		{name: "a list", text: "kubectl create ns a && kubectl label ns a x=y\n", wantErr: true},
		{name: "a substitution", text: "digest=$(tar -xOf f index.json)\n", wantErr: true},
		{name: "a substitution in double quotes", text: "echo \"$HOME\"\n", wantErr: true},
		{name: "a redirection", text: "helm template x c > out.yaml\n", wantErr: true},
		{name: "unterminated", text: "helm install 'x\n", wantErr: true},
		{name: "a # within a word", text: "kubectl get pods a#b\n", want: []Command{{Line: 1, Text: "kubectl get pods a#b", Args: []string{"kubectl", "get", "pods", "a#b"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Commands(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %t", err, tc.wantErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestSubstitute(t *testing.T) {
	b := Block{Text: "helm install x oci://<registry>/c --version <x.y.z> --set r=<registry>/d <other>\n"}
	got := b.Substitute(map[string]string{"<registry>": "127.0.0.1:25000/p", "<x.y.z>": "0.2.0"})
	if want := "helm install x oci://127.0.0.1:25000/p/c --version 0.2.0 --set r=127.0.0.1:25000/p/d <other>\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
