package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

const (
	releaseVersion = "0.2.0"
	// releaseEpoch is the SOURCE_DATE_EPOCH of the test's releases.
	releaseEpoch = "1700000000"
	// maxLayoutFileBytes bounds a file extracted from a release's image tar.
	maxLayoutFileBytes = 512 << 20
)

// releaseTestArches is the environment variable that narrows TestRelease
// to fewer architectures than a release's (make test: the host's only,
// since compiling the driver for a second architecture is some 500 CPU
// seconds; every architecture's binaries are checked by the image tool
// itself in make release, checkBinaries).
const releaseTestArches = "RELEASE_TEST_ARCHES"

// releaseArch is one of the image index's platforms, with the ELF machine
// of its binaries.
type releaseArch struct {
	arch    string
	machine elf.Machine
}

// testedArches are the platforms TestRelease builds, in the index's order,
// and their comma-separated list (hack/release.sh's ARCHES): a release's
// (amd64,arm64), or $RELEASE_TEST_ARCHES.
func testedArches(t *testing.T) ([]releaseArch, string) {
	t.Helper()
	list := cmp.Or(os.Getenv(releaseTestArches), "amd64,arm64")
	names, err := parseArches(list)
	if err != nil {
		t.Fatalf("%s: %v", releaseTestArches, err)
	}
	var arches []releaseArch
	for _, a := range names {
		arches = append(arches, releaseArch{a, elfMachines[a]})
	}
	t.Logf("releases for %s (%s)", list, releaseTestArches)
	return arches, list
}

// TestRelease runs hack/release.sh (make release) twice, pushing to a
// loopback registry that wants credentials, under a repository path
// (REGISTRY=127.0.0.1:PORT/some/path): once with a docker config whose
// credential helper has them, which both the image's push and helm's use,
// and once with a docker config without them, whose push fails saying so.
// It checks the artifacts as a user gets them: the checksums, the image
// index (both platforms, each image's binaries of its architecture, the
// labels), the SBOM referrer (the modules and go.sum hashes each binary
// links), the chart (version, appVersion, lint), what the registry serves
// to a client with the credentials and not without, that helm renders the
// chart from there with the credentials of a docker config, and that the
// second run's image tar is the first's byte for byte. The script builds
// helm and cyclonedx-gomod into _output/bin unless HELM and CYCLONEDX_GOMOD
// name them.
func TestRelease(t *testing.T) {
	ctx := t.Context()
	root := repoRoot(t)
	host := startRegistry(t, &basicAuth{user: testUser, password: testPassword})
	registry := host + "/some/path"
	helperDir, helperLog := credentialHelper(t, host, testUser, testPassword)
	// helm looks in its own registry config first: an empty one here.
	helmConfig := "HELM_REGISTRY_CONFIG=" + filepath.Join(t.TempDir(), "registry.json")
	withHelper := []string{"DOCKER_CONFIG=" + dockerConfig(t, helperConfig(host)), helmConfig,
		"PATH=" + helperDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	withAuths := []string{"DOCKER_CONFIG=" + dockerConfig(t, authsConfig(host, testUser, testPassword)), helmConfig}
	without := []string{"DOCKER_CONFIG=" + dockerConfig(t, `{"auths": {}}`), helmConfig}
	creds := remote.WithAuth(&authn.Basic{Username: testUser, Password: testPassword})

	releaseArches, archList := testedArches(t)
	withHelper, without = append(withHelper, "ARCHES="+archList), append(without, "ARCHES="+archList)

	dir := t.TempDir()
	pushed := filepath.Join(dir, "pushed")
	again := filepath.Join(dir, "again")
	pushOut := runRelease(ctx, t, root, pushed, registry, withHelper, "")
	runRelease(ctx, t, root, again, registry, without, "the docker config has none for "+host)

	imageTar := "dra-driver-swap-" + releaseVersion + ".oci.tar"
	chartTgz := "dra-driver-swap-" + releaseVersion + ".tgz"
	sums := checkSums(t, pushed, []string{imageTar, chartTgz})

	lp := extractLayout(t, filepath.Join(pushed, imageTar), t.TempDir())
	idxDesc, sbomDesc := layoutEntries(t, lp)
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	driver, err := idx.ImageIndex(idxDesc.Digest)
	if err != nil {
		t.Fatalf("the image index: %v", err)
	}

	t.Run("the same sources give the same image tar", func(t *testing.T) {
		againSums := checkSums(t, again, []string{imageTar, chartTgz})
		if sums[imageTar] != againSums[imageTar] {
			t.Errorf("two releases of the same sources have %s sha256 %s and %s", imageTar, sums[imageTar], againSums[imageTar])
		}
		againIdx, _ := layoutEntries(t, extractLayout(t, filepath.Join(again, imageTar), t.TempDir()))
		if againIdx.Digest != idxDesc.Digest {
			t.Errorf("two releases of the same sources have image indexes %s and %s", idxDesc.Digest, againIdx.Digest)
		}
	})

	// binaries[arch][name] is the content of each binary of each image.
	binaries := map[string]map[string][]byte{}
	t.Run("the index has an image per platform with binaries of its architecture", func(t *testing.T) {
		im, err := driver.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if im.MediaType != types.OCIImageIndex {
			t.Errorf("the index has media type %s, want %s", im.MediaType, types.OCIImageIndex)
		}
		wantAnnotations := map[string]string{
			"org.opencontainers.image.title":       driverImage,
			"org.opencontainers.image.description": "dra.swap, a Kubernetes DRA driver for per-container swap: kubelet plugin, controller, OCI hook",
			"org.opencontainers.image.source":      defaultSource,
			"org.opencontainers.image.version":     releaseVersion,
			"org.opencontainers.image.revision":    testRevision,
			"org.opencontainers.image.licenses":    "Apache-2.0",
		}
		if !maps.Equal(im.Annotations, wantAnnotations) {
			t.Errorf("the index's annotations are %v, want %v", im.Annotations, wantAnnotations)
		}
		if len(im.Manifests) != len(releaseArches) {
			t.Fatalf("the index lists %d manifests, want %d", len(im.Manifests), len(releaseArches))
		}
		for i, want := range releaseArches {
			desc := im.Manifests[i]
			if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != want.arch {
				t.Errorf("manifest %d of the index has platform %+v, want linux/%s", i, desc.Platform, want.arch)
				continue
			}
			img, err := driver.Image(desc.Digest)
			if err != nil {
				t.Fatalf("linux/%s: %v", want.arch, err)
			}
			checkManifest(t, img)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatalf("linux/%s: config: %v", want.arch, err)
			}
			if cf.OS != "linux" || cf.Architecture != want.arch {
				t.Errorf("linux/%s: the config says %s/%s", want.arch, cf.OS, cf.Architecture)
			}
			if !maps.Equal(cf.Config.Labels, wantAnnotations) {
				t.Errorf("linux/%s: labels %v, want %v", want.arch, cf.Config.Labels, wantAnnotations)
			}
			files := map[string][]byte{}
			eachFile(t, img, func(hdr *tar.Header, r io.Reader) {
				data, err := io.ReadAll(r)
				if err != nil {
					t.Fatalf("linux/%s: %s: %v", want.arch, hdr.Name, err)
				}
				files[hdr.Name] = data
			})
			if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, []string{"dra-swap-controller", "dra-swap-hook", "dra-swap-kubeletplugin"}) {
				t.Errorf("linux/%s holds %q, want the three commands", want.arch, got)
			}
			for file, data := range files {
				if err := checkELF(file, bytes.NewReader(data), want.machine); err != nil {
					t.Errorf("linux/%s: %v", want.arch, err)
				}
			}
			binaries[want.arch] = files
		}
	})

	t.Run("the SBOM lists the module versions of go.sum that each binary links", func(t *testing.T) {
		if len(binaries) != len(releaseArches) {
			t.Fatal("no binaries to compare with")
		}
		goSum := readGoSum(t, filepath.Join(root, "go.sum"))
		art, err := idx.Image(sbomDesc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		m, err := art.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.ArtifactType != sbomArtifactType || m.Config.MediaType != emptyMediaType || m.Config.Size != 2 {
			t.Errorf("the SBOM manifest has artifactType %q and config %+v, want %s and the empty descriptor", m.ArtifactType, m.Config, sbomArtifactType)
		}
		if m.Subject == nil || m.Subject.Digest != idxDesc.Digest || m.Subject.Size != idxDesc.Size || m.Subject.MediaType != types.OCIImageIndex {
			t.Errorf("the SBOM's subject is %+v, want the image index %s", m.Subject, idxDesc.Digest)
		}
		var titles []string
		for i, layer := range m.Layers {
			title := layer.Annotations[titleAnnotation]
			titles = append(titles, title)
			if layer.MediaType != sbomArtifactType {
				t.Errorf("SBOM layer %s has media type %s", title, layer.MediaType)
			}
			bin, arch, ok := strings.Cut(strings.TrimSuffix(title, ".cdx.json"), "_linux_")
			data, found := binaries[arch][bin]
			if !ok || !found {
				t.Errorf("SBOM layer %d is titled %q, which names no binary of the index", i, title)
				continue
			}
			l, err := art.LayerByDigest(layer.Digest)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := l.Compressed()
			if err != nil {
				t.Fatal(err)
			}
			doc, err := io.ReadAll(io.LimitReader(rc, maxSBOMBytes))
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			checkSBOM(t, title, doc, arch, bin, data, goSum)
		}
		var want []string
		for _, a := range releaseArches {
			for _, bin := range []string{"dra-swap-kubeletplugin", "dra-swap-controller", "dra-swap-hook"} {
				want = append(want, sbomFileName(bin, a.arch))
			}
		}
		if !slices.Equal(titles, want) {
			t.Errorf("the SBOM's layers are %q, want %q", titles, want)
		}
	})

	t.Run("the chart is packaged as VERSION and lints", func(t *testing.T) {
		chart := chartYAML(t, filepath.Join(pushed, chartTgz))
		if chart.Name != "dra-driver-swap" || chart.Version != releaseVersion || chart.AppVersion != releaseVersion {
			t.Errorf("the packaged Chart.yaml says name %q version %q appVersion %q, want dra-driver-swap %s %s", chart.Name, chart.Version, chart.AppVersion, releaseVersion, releaseVersion)
		}
		if out, err := exec.CommandContext(ctx, helmTool(root), "lint", "--strict", filepath.Join(pushed, chartTgz)).CombinedOutput(); err != nil {
			t.Errorf("helm lint --strict %s: %v\n%s", chartTgz, err, out)
		}
	})

	t.Run("the registry serves the index, its SBOM and the chart", func(t *testing.T) {
		calls, err := os.ReadFile(helperLog)
		if err != nil {
			t.Fatal(err)
		}
		for _, caller := range []string{"dra-swap-images", "helm"} {
			if !strings.Contains(string(calls), caller+" get "+host+"\n") {
				t.Errorf("%s did not ask the credential helper for %s; its calls:\n%s", caller, host, calls)
			}
		}
		wantOut := []string{
			registry + "/dra-driver-swap:" + releaseVersion + "@" + idxDesc.Digest.String(),
			registry + "/dra-driver-swap@" + sbomDesc.Digest.String(),
		}
		if got := strings.Fields(pushOut); !slices.Equal(got, wantOut) {
			t.Errorf("make release printed %q, want %q", got, wantOut)
		}
		tag, err := name.NewTag(registry+"/dra-driver-swap:"+releaseVersion, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Get(tag, remote.WithContext(ctx)); err == nil {
			t.Errorf("%s was pulled without credentials", tag)
		}
		desc, err := remote.Get(tag, remote.WithContext(ctx), creds)
		if err != nil {
			t.Fatalf("pulling %s: %v", tag, err)
		}
		if desc.Digest != idxDesc.Digest || desc.MediaType != types.OCIImageIndex {
			t.Errorf("%s is %s %s, want the index %s", tag, desc.MediaType, desc.Digest, idxDesc.Digest)
		}
		refs, err := remote.Referrers(tag.Context().Digest(idxDesc.Digest.String()), remote.WithContext(ctx), creds)
		if err != nil {
			t.Fatalf("the referrers of %s: %v", idxDesc.Digest, err)
		}
		rim, err := refs.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(rim.Manifests) != 1 || rim.Manifests[0].Digest != sbomDesc.Digest || rim.Manifests[0].ArtifactType != sbomArtifactType {
			t.Errorf("the registry lists the referrers %+v of the index, want the SBOM %s (%s)", rim.Manifests, sbomDesc.Digest, sbomArtifactType)
		}

		chartRef, err := name.NewTag(registry+"/charts/dra-driver-swap:"+releaseVersion, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		chartImg, err := remote.Image(chartRef, remote.WithContext(ctx), creds)
		if err != nil {
			t.Fatalf("pulling %s: %v", chartRef, err)
		}
		cm, err := chartImg.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if cm.Config.MediaType != "application/vnd.cncf.helm.config.v1+json" || len(cm.Layers) != 1 || cm.Layers[0].Digest.Hex != sums[chartTgz] {
			t.Errorf("%s has config %s and layers %+v, want a helm chart whose layer is %s (sha256 %s)", chartRef, cm.Config.MediaType, cm.Layers, chartTgz, sums[chartTgz])
		}

		chartURL := "oci://" + registry + "/charts/dra-driver-swap"
		helm := func(env []string, args ...string) (string, error) {
			cmd := exec.CommandContext(ctx, helmTool(root), args...)
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := helm(without, "show", "chart", chartURL, "--version", releaseVersion, "--plain-http"); err == nil {
			t.Errorf("helm show chart %s --version %s without credentials succeeded:\n%s", chartURL, releaseVersion, out)
		}
		out, err := helm(withAuths, "show", "chart", chartURL, "--version", releaseVersion, "--plain-http")
		if err != nil || !strings.Contains(out, "\nversion: "+releaseVersion+"\n") {
			t.Errorf("helm show chart %s --version %s: %v\n%s", chartURL, releaseVersion, err, out)
		}
		// What `helm install` renders, with the image from the same
		// registry and a Secret that lets the nodes pull it.
		out, err = helm(withAuths, "template", "dra-driver-swap", chartURL, "--version", releaseVersion, "--plain-http",
			"--namespace", "dra-swap", "--set", "image.repository="+registry+"/dra-driver-swap", "--set", "imagePullSecrets[0].name=regcred")
		if err != nil {
			t.Fatalf("helm template %s --version %s: %v\n%s", chartURL, releaseVersion, err, out)
		}
		// The plugin's, the controller's and the cleanup Job's pod
		// templates, and the helm test's pod, which also names the
		// Secret for its probes.
		wantImage := "image: " + registry + "/dra-driver-swap:" + releaseVersion + "\n"
		pullSecret := regexp.MustCompile(`imagePullSecrets:\n\s+- name: regcred\n`)
		if n, secrets := strings.Count(out, wantImage), len(pullSecret.FindAllString(out, -1)); n != 4 || secrets != 4 ||
			!strings.Contains(out, `"--image-pull-secrets=regcred"`) {
			t.Errorf("helm template of %s: %d containers of %q and %d with the pull secret, want the plugin's, the controller's, the cleanup Job's and the helm test's, whose probes get the Secret too:\n%s",
				chartURL, n, strings.TrimSpace(wantImage), secrets, out)
		}
	})
}

// runRelease runs hack/release.sh with the test's version, revision and
// epoch into dir, pushing to registry if given, with env added to the
// test's environment, and returns its stdout. With wantErr, the script
// must fail with it on stderr.
func runRelease(ctx context.Context, t *testing.T, root, dir, registry string, env []string, wantErr string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "release.sh"))
	cmd.Env = append(os.Environ(), "VERSION="+releaseVersion, "REVISION="+testRevision,
		"SOURCE_DATE_EPOCH="+releaseEpoch, "RELEASE_DIR="+dir, "REGISTRY="+registry)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("hack/release.sh (REGISTRY=%q): %v\n%s", registry, err, stderr.String())
	case wantErr != "" && (err == nil || !strings.Contains(stderr.String(), wantErr)):
		t.Fatalf("hack/release.sh (REGISTRY=%q): %v, want a failure saying %q\n%s", registry, err, wantErr, stderr.String())
	}
	return stdout.String()
}

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// helmTool is the helm that hack/release.sh used: $HELM or _output/bin/helm.
func helmTool(root string) string {
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	return filepath.Join(root, "_output", "bin", "helm")
}

// checkSums verifies dir's SHA256SUMS (sha256sum's format) and that it
// lists exactly files, which with it are all dir holds; it returns the
// sums by file.
func checkSums(t *testing.T, dir string, files []string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for line := range strings.Lines(string(data)) {
		sum, file, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("SHA256SUMS line %q is not <sha256>  <file>", line)
		}
		sums[file] = sum
		f, err := os.Open(filepath.Join(dir, filepath.Base(file)))
		if err != nil {
			t.Errorf("SHA256SUMS lists %s: %v", file, err)
			continue
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sum {
			t.Errorf("%s has sha256 %s, SHA256SUMS says %s", file, got, sum)
		}
	}
	if got := slices.Sorted(maps.Keys(sums)); !slices.Equal(got, files) {
		t.Errorf("SHA256SUMS lists %q, want %q", got, files)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := append([]string{"SHA256SUMS"}, files...); !slices.Equal(names, slices.Sorted(slices.Values(want))) {
		t.Errorf("%s holds %q, want %q", dir, names, want)
	}
	return sums
}

// extractLayout unpacks an OCI layout tar into dir.
func extractLayout(t *testing.T, tarPath, dir string) layout.Path {
	t.Helper()
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading %s: %v", tarPath, err)
		}
		clean := path.Clean(hdr.Name)
		if !filepath.IsLocal(clean) || hdr.Uid != 0 || hdr.Gid != 0 {
			t.Fatalf("%s holds %q owned by %d:%d, want local names owned by 0:0", tarPath, hdr.Name, hdr.Uid, hdr.Gid)
		}
		p := filepath.Join(dir, filepath.FromSlash(clean))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			data, err := io.ReadAll(io.LimitReader(tr, maxLayoutFileBytes))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s holds %q of type %c, want files and directories", tarPath, hdr.Name, hdr.Typeflag)
		}
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("%s is not an OCI layout: %v", tarPath, err)
	}
	return lp
}

// layoutEntries are the release layout's two manifests: the image index
// named dra-driver-swap:VERSION and the unnamed SBOM artifact.
func layoutEntries(t *testing.T, lp layout.Path) (index, sbom v1.Descriptor) {
	t.Helper()
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("the layout lists %d manifests, want the image index and its SBOM", len(im.Manifests))
	}
	index, sbom = im.Manifests[0], im.Manifests[1]
	if index.Annotations[refNameAnnotation] != "dra-driver-swap:"+releaseVersion || index.MediaType != types.OCIImageIndex {
		t.Errorf("the layout's first manifest is %s named %q, want the image index dra-driver-swap:%s", index.MediaType, index.Annotations[refNameAnnotation], releaseVersion)
	}
	if sbom.ArtifactType != sbomArtifactType || sbom.Annotations[refNameAnnotation] != "" {
		t.Errorf("the layout's second manifest has artifactType %q and name %q, want an unnamed %s", sbom.ArtifactType, sbom.Annotations[refNameAnnotation], sbomArtifactType)
	}
	return index, sbom
}

// cdxDoc is what the test reads of a CycloneDX document.
type cdxDoc struct {
	BOMFormat string `json:"bomFormat"`
	Metadata  struct {
		Component  cdxComponent  `json:"component"`
		Properties []cdxProperty `json:"properties"`
	} `json:"metadata"`
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Hashes  []struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	} `json:"hashes"`
}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// checkSBOM checks the CycloneDX document doc of binary bin (content data)
// of arch: the main module at v+VERSION, the binary's name, architecture
// and sha256, and as components exactly the modules the binary's build
// information lists, each at the version it links, which go.sum holds with
// the hash the component carries.
func checkSBOM(t *testing.T, title string, doc []byte, arch, bin string, data []byte, goSum map[string]string) {
	t.Helper()
	var d cdxDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Errorf("%s: %v", title, err)
		return
	}
	if d.BOMFormat != "CycloneDX" || d.Metadata.Component.Name != modulePath || d.Metadata.Component.Version != "v"+releaseVersion {
		t.Errorf("%s: format %q, main component %s %s; want CycloneDX, %s v%s", title, d.BOMFormat, d.Metadata.Component.Name, d.Metadata.Component.Version, modulePath, releaseVersion)
	}
	sum := sha256.Sum256(data)
	props := map[string]string{}
	for _, p := range d.Metadata.Properties {
		props[p.Name] = p.Value
	}
	for prop, want := range map[string]string{
		"cdx:gomod:binary:name":           bin,
		"cdx:gomod:build:env:GOARCH":      arch,
		"cdx:gomod:build:env:GOOS":        "linux",
		"cdx:gomod:binary:hash:SHA-256":   hex.EncodeToString(sum[:]),
		"cdx:gomod:build:env:CGO_ENABLED": "0",
	} {
		if props[prop] != want {
			t.Errorf("%s: property %s is %q, want %q", title, prop, props[prop], want)
		}
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: the build information of %s: %v", title, bin, err)
	}
	linked := map[string]string{}
	for _, dep := range bi.Deps {
		if dep.Replace != nil {
			t.Errorf("%s: %s links %s replaced by %s", title, bin, dep.Path, dep.Replace.Path)
		}
		linked[dep.Path] = dep.Version
	}
	listed := map[string]string{}
	for _, c := range d.Components {
		listed[c.Name] = c.Version
		h1, ok := goSum[c.Name+" "+c.Version]
		if !ok {
			t.Errorf("%s: component %s %s is not in go.sum", title, c.Name, c.Version)
			continue
		}
		var sha string
		for _, h := range c.Hashes {
			if h.Alg == "SHA-256" {
				sha = h.Content
			}
		}
		if sha != h1 {
			t.Errorf("%s: component %s %s has SHA-256 %q, go.sum's h1 is %s", title, c.Name, c.Version, sha, h1)
		}
	}
	if len(listed) == 0 || !maps.Equal(listed, linked) {
		t.Errorf("%s: the SBOM lists the modules %v, the binary links %v", title, listed, linked)
	}
}

// readGoSum returns go.sum's module content hashes (not those of go.mod
// files), hex-encoded, by "<module> <version>".
func readGoSum(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || strings.HasSuffix(fields[1], "/go.mod") || !strings.HasPrefix(fields[2], "h1:") {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(fields[2], "h1:"))
		if err != nil {
			t.Fatalf("go.sum: %q: %v", sc.Text(), err)
		}
		sums[fields[0]+" "+fields[1]] = hex.EncodeToString(raw)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sums
}

// chartMeta is what the test reads of a Chart.yaml.
type chartMeta struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

// chartYAML reads <chart>/Chart.yaml from a packaged chart.
func chartYAML(t *testing.T, tgz string) chartMeta {
	t.Helper()
	f, err := os.Open(tgz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", tgz, err)
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s holds no dra-driver-swap/Chart.yaml", tgz)
		}
		if err != nil {
			t.Fatalf("%s: %v", tgz, err)
		}
		if hdr.Name != "dra-driver-swap/Chart.yaml" {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			t.Fatal(err)
		}
		var c chartMeta
		if err := yaml.Unmarshal(data, &c); err != nil {
			t.Fatalf("%s: Chart.yaml: %v", tgz, err)
		}
		return c
	}
}

// TestReleaseRefusesBadInput covers hack/release.sh's checks, which come
// before it builds anything.
func TestReleaseRefusesBadInput(t *testing.T) {
	root := repoRoot(t)
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "release")
	tests := []struct {
		name    string
		env     []string
		wantErr string
	}{
		{name: "no version", env: []string{"VERSION=", "RELEASE_DIR=" + out}, wantErr: "VERSION is required"},
		{name: "two-part version", env: []string{"VERSION=1.2", "RELEASE_DIR=" + out}, wantErr: "is not x.y.z"},
		{name: "v prefix", env: []string{"VERSION=v1.2.3", "RELEASE_DIR=" + out}, wantErr: "is not x.y.z"},
		{name: "build metadata", env: []string{"VERSION=1.2.3+build", "RELEASE_DIR=" + out}, wantErr: "is not x.y.z"},
		{name: "registry with a scheme", env: []string{"VERSION=1.2.3", "REGISTRY=https://registry.example", "RELEASE_DIR=" + out}, wantErr: "is not HOST[:PORT][/PATH]"},
		{name: "registry host without a dot or port", env: []string{"VERSION=1.2.3", "REGISTRY=myhost/team", "RELEASE_DIR=" + out}, wantErr: "is not HOST[:PORT][/PATH]"},
		{name: "registry path in capitals", env: []string{"VERSION=1.2.3", "REGISTRY=127.0.0.1:5000/Team", "RELEASE_DIR=" + out}, wantErr: "is not HOST[:PORT][/PATH]"},
		{name: "registry path with an empty component", env: []string{"VERSION=1.2.3", "REGISTRY=127.0.0.1:5000/a//b", "RELEASE_DIR=" + out}, wantErr: "is not HOST[:PORT][/PATH]"},
		{name: "registry path ending in a slash", env: []string{"VERSION=1.2.3", "REGISTRY=127.0.0.1:5000/a/", "RELEASE_DIR=" + out}, wantErr: "is not HOST[:PORT][/PATH]"},
		{name: "release dir holds other files", env: []string{"VERSION=1.2.3", "RELEASE_DIR=" + foreign}, wantErr: "refusing to replace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), filepath.Join(root, "hack", "release.sh"))
			cmd.Env = append(os.Environ(), tc.env...)
			got, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(got), tc.wantErr) {
				t.Errorf("hack/release.sh with %q: %v\n%s\nwant a refusal containing %q", tc.env, err, got, tc.wantErr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(foreign, "notes.txt")); err != nil {
		t.Errorf("the refused release directory lost its file: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused release created %s (stat: %v)", out, err)
	}
}

func TestParseArches(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "amd64", want: []string{"amd64"}},
		{in: "amd64,arm64", want: []string{"amd64", "arm64"}},
		{in: "arm64,amd64", want: []string{"arm64", "amd64"}},
		{in: "", wantErr: true},
		{in: "amd64,", wantErr: true},
		{in: "amd64,amd64", wantErr: true},
		{in: "amd64 arm64", wantErr: true},
		{in: "AMD64", wantErr: true},
		{in: "a,b,c,d,e,f,g,h,i", wantErr: true},
		{in: "amd64,ppc64le,s390x,riscv64,arm64", want: []string{"amd64", "ppc64le", "s390x", "riscv64", "arm64"}},
		{in: "mips64le", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parseArches(tc.in)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("parseArches(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestPushRefusesUnknownManifests: push names each image by its layout
// name, and an unnamed manifest only by the subject it refers to.
func TestPushRefusesUnknownManifests(t *testing.T) {
	img, err := packImage(imageSpec{name: "x", tag: "1"}, t.TempDir(), "amd64", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	imgDesc, err := manifestDescriptor(img)
	if err != nil {
		t.Fatal(err)
	}
	other := imgDesc
	other.Digest.Hex = strings.Repeat("0", 64)
	orphan, err := newArtifact(sbomArtifactType, []sbomDoc{{title: "a.cdx.json", content: []byte("{}")}}, other, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		add     func(layout.Path) error
		wantErr string
	}{
		{
			name:    "unnamed image",
			add:     func(lp layout.Path) error { return lp.AppendImage(img) },
			wantErr: "neither a " + refNameAnnotation + " annotation nor a subject",
		},
		{
			name: "artifact of an image the layout does not name",
			add: func(lp layout.Path) error {
				if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: "x:1"})); err != nil {
					return err
				}
				return lp.AppendImage(orphan)
			},
			wantErr: "which the layout does not name",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lp, err := layout.Write(t.TempDir(), empty.Index)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.add(lp); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- serveRegistry(ctx, ln, t.TempDir(), nil, io.Discard) }()
			err = push(ctx, string(lp), ln.Addr().String(), false, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("push: %v, want an error containing %q", err, tc.wantErr)
			}
			cancel()
			if err := <-served; err != nil {
				t.Errorf("registry: %v", err)
			}
		})
	}
}
