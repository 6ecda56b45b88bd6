package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// A release's version, x.y.z with an optional pre-release or build suffix.
const versionRE = `[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.-]+)?`

var (
	// The Makefile's default VERSION.
	makefileVersion = regexp.MustCompile(`(?m)^VERSION \?= (\S+)$`)
	// hack/cluster/lib.sh's default DRIVER_VERSION.
	clusterVersion = regexp.MustCompile(`(?m)^DRIVER_VERSION="\$\{DRIVER_VERSION:-\$\{VERSION:-([^}]+)\}\}"$`)
	// CHANGELOG.md's sections: "## 0.2.0 - Unreleased", "## [0.2.0] - 2026-12-01".
	changelogSection = regexp.MustCompile(`^## \[?(` + versionRE + `)\]?(?:\s|$)`)
	// Where the docs name the version a user installs or builds: helm's
	// --version, make's VERSION=, the release's file names and image tag,
	// and what --version prints.
	docVersion = regexp.MustCompile(`(?:--version |\bVERSION=|\bdra-driver-swap[-:])(` + versionRE + `)|\b(` + versionRE + `) \(revision`)
)

// versionSource is one place that names the version of the release the
// tree is (or is about to become).
type versionSource struct {
	where   string
	version string
}

// TestOneVersion: Chart.yaml's version and appVersion, the Makefile's
// default VERSION (the images' tag and the binaries' --version), the
// cluster scripts' default, CHANGELOG.md's top section and every command
// of the docs that names a version of the driver agree. Mentions of an
// older release (upgrading from 0.1.0) are not matched.
func TestOneVersion(t *testing.T) {
	sources := readVersionSources(t)
	want := sources[0]
	for _, s := range sources[1:] {
		if s.version != want.version {
			t.Errorf("%s says %s, %s says %s: every place names the release the tree is (see CHANGELOG.md's top section)", s.where, s.version, want.where, want.version)
		}
	}
	if !t.Failed() {
		t.Logf("%d places say %s", len(sources), want.version)
	}
}

// readVersionSources returns, the CHANGELOG's top section first, every
// place that names the tree's version.
func readVersionSources(t *testing.T) []versionSource {
	t.Helper()
	var sources []versionSource
	changelog := readRepoFile(t, "CHANGELOG.md")
	top := ""
	for line := range strings.Lines(changelog) {
		if m := changelogSection.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			top = m[1]
			break
		}
	}
	if top == "" {
		t.Fatalf(`CHANGELOG.md has no section "## x.y.z - ..."`)
	}
	sources = append(sources, versionSource{"CHANGELOG.md's top section", top})

	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(readRepoFile(t, chartDir, "Chart.yaml")), &chart); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	sources = append(sources,
		versionSource{"Chart.yaml's version", chart.Version},
		versionSource{"Chart.yaml's appVersion", chart.AppVersion})

	for _, f := range []struct {
		path []string
		re   *regexp.Regexp
		what string
	}{
		{[]string{"Makefile"}, makefileVersion, "the Makefile's default VERSION"},
		{[]string{"hack", "cluster", "lib.sh"}, clusterVersion, "hack/cluster/lib.sh's default DRIVER_VERSION"},
	} {
		m := f.re.FindStringSubmatch(readRepoFile(t, f.path...))
		if m == nil {
			t.Fatalf("%s: no line matches %s", filepath.Join(f.path...), f.re)
		}
		sources = append(sources, versionSource{f.what, m[1]})
	}

	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, chartDir, "README.md"))
	for _, path := range docs {
		sources = append(sources, docVersions(t, path)...)
	}
	return sources
}

// chartDir is the chart's directory, relative to the module's root.
const chartDir = "deployments/helm/dra-driver-swap"

func readRepoFile(t *testing.T, path ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(append([]string{repoRoot}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// docVersions returns each version docVersion finds in the file at path.
func docVersions(t *testing.T, path string) []versionSource {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel, err := filepath.Rel(repoRoot, path)
	if err != nil {
		t.Fatal(err)
	}
	var out []versionSource
	scanner := bufio.NewScanner(f)
	for line := 1; scanner.Scan(); line++ {
		for _, m := range docVersion.FindAllStringSubmatch(scanner.Text(), -1) {
			out = append(out, versionSource{fmt.Sprintf("%s:%d (%q)", rel, line, m[0]), m[1] + m[2]})
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDocVersion: what the docs' pattern takes for a version, and what it
// leaves (another release, other tools' versions).
func TestDocVersion(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"make release VERSION=0.2.0 REGISTRY=r", []string{"0.2.0"}},
		{"helm install x oci://r/charts/dra-driver-swap --version 0.2.0 \\", []string{"0.2.0"}},
		{"oci-archive:dra-driver-swap-0.2.0.oci.tar:dra-driver-swap:0.2.0", []string{"0.2.0", "0.2.0"}},
		{"(`dra-swap-kubeletplugin 0.3.0-rc.1 (revision <commit>, go1.26.8)`", []string{"0.3.0-rc.1"}},
		{"API fields that users wrote against it since 0.1.0 (and the", nil},
		{"make helm    # the helm v4.3.1 CLI", nil},
		{"Kubernetes v1.37.1 (kube-apiserver", nil},
		{"the image `registry.example/swap-workload:v1`", nil},
	}
	for _, tt := range tests {
		var got []string
		for _, m := range docVersion.FindAllStringSubmatch(tt.line, -1) {
			got = append(got, m[1]+m[2])
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("%q: found %q, want %q", tt.line, got, tt.want)
		}
	}
}
