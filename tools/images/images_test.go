package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const testRevision = "0123456789abcdef0123456789abcdef01234567"

// TestImages builds the command, then image layouts with it, and checks
// the images, their reproducibility, and pushing them to a registry. The
// command runs as a child process, so that `go test -race` does not slow
// down its compression.
func TestImages(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the driver's commands")
	}
	ctx := t.Context()
	tool := buildTool(ctx, t)
	dir := t.TempDir()
	all := filepath.Join(dir, "all-0.1.0")
	driverAgain := filepath.Join(dir, "driver-0.1.0")
	allNext := filepath.Join(dir, "all-0.2.0")
	allDigests := buildLayout(ctx, t, tool, all, "0.1.0", "all")
	againDigests := buildLayout(ctx, t, tool, driverAgain, "0.1.0", "driver")
	nextDigests := buildLayout(ctx, t, tool, allNext, "0.2.0", "all")

	if want := []string{"dra-driver-swap:0.1.0", "pause:3.10", "swap-workload:v1"}; !slices.Equal(slices.Sorted(maps.Keys(allDigests)), want) {
		t.Fatalf("build -set all printed images %v, want %v", slices.Sorted(maps.Keys(allDigests)), want)
	}
	for ref, digest := range allDigests {
		if got := layoutImage(t, all, ref).digest; got != digest {
			t.Errorf("build printed %s %s, but the layout holds %s", ref, digest, got)
		}
	}

	t.Run("same inputs give the same digest", func(t *testing.T) {
		if a, b := allDigests["dra-driver-swap:0.1.0"], againDigests["dra-driver-swap:0.1.0"]; a != b {
			t.Errorf("two builds of dra-driver-swap:0.1.0 have digests %s and %s", a, b)
		}
		if len(againDigests) != 1 {
			t.Errorf("build -set driver printed %v, want dra-driver-swap:0.1.0 only", againDigests)
		}
	})

	t.Run("-index makes an index of one architecture", func(t *testing.T) {
		// What the e2e release is: the nodes' architecture only, as an
		// index, which holds the very image built without -index.
		dir := filepath.Join(t.TempDir(), "index")
		stdout := runTool(ctx, t, tool, "build", "-out", dir, "-version", "0.1.0", "-revision", testRevision, "-set", "driver", "-arch", runtime.GOARCH, "-index")
		lp, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		top, err := lp.IndexManifest()
		if err != nil || len(top.Manifests) != 1 || top.Manifests[0].MediaType != types.OCIImageIndex {
			t.Fatalf("build -index -arch %s: the layout lists %+v (%v), want one OCI image index", runtime.GOARCH, top, err)
		}
		if want := "dra-driver-swap:0.1.0 " + top.Manifests[0].Digest.String() + "\n"; stdout != want {
			t.Errorf("build -index printed %q, want %q", stdout, want)
		}
		idx, err := lp.ImageIndex(top.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != runtime.GOARCH ||
			im.Manifests[0].Digest.String() != allDigests["dra-driver-swap:0.1.0"] {
			t.Errorf("the one-architecture index lists %+v, want linux/%s at %s (the image built without -index)", im.Manifests, runtime.GOARCH, allDigests["dra-driver-swap:0.1.0"])
		}
	})

	t.Run("another version gives another digest", func(t *testing.T) {
		a, b := allDigests["dra-driver-swap:0.1.0"], nextDigests["dra-driver-swap:0.2.0"]
		if a == "" || b == "" || a == b {
			t.Fatalf("dra-driver-swap:0.1.0 has digest %q and dra-driver-swap:0.2.0 %q, want two different digests", a, b)
		}
	})

	t.Run("the tests' images do not change with the driver's version", func(t *testing.T) {
		for _, ref := range []string{"pause:3.10", "swap-workload:v1"} {
			if a, b := allDigests[ref], nextDigests[ref]; a == "" || a != b {
				t.Errorf("%s has digest %q beside dra-driver-swap:0.1.0 and %q beside 0.2.0, want one digest", ref, a, b)
			}
		}
	})

	t.Run("binaries report the version and revision", func(t *testing.T) {
		for version, dir := range map[string]string{"0.1.0": all, "0.2.0": allNext} {
			files := extractFiles(t, layoutImage(t, dir, "dra-driver-swap:"+version).image, t.TempDir())
			for _, file := range files {
				out, err := exec.CommandContext(ctx, file, "--version").Output()
				want := fmt.Sprintf("%s %s (revision %s, %s)\n", filepath.Base(file), version, testRevision, runtime.Version())
				if err != nil || string(out) != want {
					t.Errorf("%s of dra-driver-swap:%s --version: %q, %v; want %q", filepath.Base(file), version, out, err, want)
				}
			}
			if len(files) != 3 {
				t.Errorf("dra-driver-swap:%s holds %q, want the three commands", version, files)
			}
		}
	})

	t.Run("image contents", func(t *testing.T) {
		driverLabels := map[string]string{
			"org.opencontainers.image.title":       "dra-driver-swap",
			"org.opencontainers.image.description": "dra.swap, a Kubernetes DRA driver for per-container swap: kubelet plugin, controller, OCI hook",
			"org.opencontainers.image.source":      defaultSource,
			"org.opencontainers.image.version":     "0.1.0",
			"org.opencontainers.image.revision":    testRevision,
			"org.opencontainers.image.licenses":    "Apache-2.0",
		}
		tests := []struct {
			ref        string
			user       string
			entrypoint []string
			labels     map[string]string
			files      []string
		}{
			{
				ref:    "dra-driver-swap:0.1.0",
				user:   "65532:65532",
				labels: driverLabels,
				files:  []string{"dra-swap-controller", "dra-swap-hook", "dra-swap-kubeletplugin"},
			},
			{
				ref:        "pause:3.10",
				entrypoint: []string{"/pause"},
				labels:     map[string]string{"org.opencontainers.image.title": "pause", "org.opencontainers.image.source": defaultSource},
				files:      []string{"pause"},
			},
			{
				ref:        "swap-workload:v1",
				entrypoint: []string{"/workload"},
				labels:     map[string]string{"org.opencontainers.image.title": "swap-workload", "org.opencontainers.image.source": defaultSource},
				files:      []string{"workload"},
			},
		}
		for _, tc := range tests {
			t.Run(tc.ref, func(t *testing.T) {
				img := layoutImage(t, all, tc.ref).image
				checkManifest(t, img)
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatalf("config: %v", err)
				}
				if cf.OS != "linux" || cf.Architecture == "" {
					t.Errorf("platform %s/%s, want linux/<arch>", cf.OS, cf.Architecture)
				}
				if !cf.Created.Equal(time.Unix(0, 0)) {
					t.Errorf("created %v, want the Unix epoch", cf.Created)
				}
				if cf.Config.User != tc.user {
					t.Errorf("user %q, want %q", cf.Config.User, tc.user)
				}
				if !slices.Equal(cf.Config.Entrypoint, tc.entrypoint) || len(cf.Config.Cmd) != 0 {
					t.Errorf("entrypoint %q cmd %q, want entrypoint %q and no cmd", cf.Config.Entrypoint, cf.Config.Cmd, tc.entrypoint)
				}
				if !maps.Equal(cf.Config.Labels, tc.labels) {
					t.Errorf("labels %v, want %v", cf.Config.Labels, tc.labels)
				}
				checkFiles(t, img, tc.files)
			})
		}
	})

	t.Run("push and pull by tag", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		blobs := t.TempDir()
		served := make(chan error, 1)
		var logs lockedBuffer
		go func() { served <- serveRegistry(ctx, ln, blobs, nil, &logs) }()
		registry := ln.Addr().String()

		out := runTool(ctx, t, tool, "push", "-from", all, "-registry", registry)
		var pushed []string
		for ref, digest := range allDigests {
			pushed = append(pushed, registry+"/"+ref+"@"+digest)
		}
		if got := strings.Fields(out); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(pushed))) {
			t.Errorf("push printed %q, want %q", got, pushed)
		}
		for ref, digest := range allDigests {
			checkPulled(ctx, t, registry, ref, digest, layoutImage(t, all, ref).layers(t))
		}
		for _, layer := range layoutImage(t, all, "dra-driver-swap:0.1.0").layers(t) {
			if _, err := os.Stat(filepath.Join(blobs, layer.Algorithm, layer.Hex)); err != nil {
				t.Errorf("the registry did not keep layer %s on disk: %v", layer, err)
			}
		}

		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("the registry stopped with %v, want nil", err)
			}
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("the registry did not stop after its context ended")
		}
		if !strings.Contains(logs.String(), "PUT /v2/dra-driver-swap/manifests/0.1.0") {
			t.Errorf("the registry's log has no line for the driver's manifest:\n%s", logs.String())
		}
	})

	t.Run("registry subcommand serves until SIGTERM", func(t *testing.T) {
		blobs := filepath.Join(t.TempDir(), "blobs")
		cmd := exec.CommandContext(ctx, tool, "registry", "-addr", "127.0.0.1:0", "-dir", blobs)
		var stderr lockedBuffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// "registry serving http://127.0.0.1:PORT, blobs in DIR"
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			// Cleanup: the read failed already; Wait reports the kill.
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("reading the registry's address: %v; stderr:\n%s", err, stderr.String())
		}
		registry, _, _ := strings.Cut(strings.TrimPrefix(line, "registry serving http://"), ",")

		runTool(ctx, t, tool, "push", "-from", allNext, "-registry", registry)
		checkPulled(ctx, t, registry, "dra-driver-swap:0.2.0", nextDigests["dra-driver-swap:0.2.0"], layoutImage(t, allNext, "dra-driver-swap:0.2.0").layers(t))

		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("after SIGTERM the registry exited with %v, want 0; stderr:\n%s", err, stderr.String())
		}
	})

	t.Run("failed build keeps the previous layout", func(t *testing.T) {
		before, err := os.ReadFile(filepath.Join(driverAgain, "index.json"))
		if err != nil {
			t.Fatal(err)
		}
		// go build fails: every compile runs /bin/false.
		cmd := exec.CommandContext(ctx, tool, "build", "-out", driverAgain, "-version", "0.3.0", "-revision", testRevision, "-set", "driver")
		cmd.Env = append(os.Environ(), "GOFLAGS=-toolexec=/bin/false")
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "go build") {
			t.Fatalf("build with a failing go build: %v, want its error\n%s", err, out)
		}
		after, err := os.ReadFile(filepath.Join(driverAgain, "index.json"))
		if err != nil || !bytes.Equal(before, after) {
			t.Errorf("the layout changed after a failed build (err %v):\n%s\nwas\n%s", err, after, before)
		}
		if _, err := os.Stat(driverAgain + ".tmp"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a failed build left %s.tmp behind (stat: %v)", driverAgain, err)
		}
	})
}

// buildTool compiles this command into a temporary directory.
func buildTool(ctx context.Context, t *testing.T) string {
	t.Helper()
	tool := filepath.Join(t.TempDir(), "dra-swap-images")
	// The Makefile's build configuration (static, -trimpath), whatever the
	// test itself was built with (-race needs cgo): a cold make test then
	// compiles the dependencies once for both.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", tool, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return tool
}

// runTool runs the command and returns its stdout.
func runTool(ctx context.Context, t *testing.T, tool string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, tool, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(tool), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// buildLayout runs `build` with the test revision and returns the digests
// it printed, by reference.
func buildLayout(ctx context.Context, t *testing.T, tool, out, version, set string) map[string]string {
	t.Helper()
	stdout := runTool(ctx, t, tool, "build", "-out", out, "-version", version, "-revision", testRevision, "-set", set)
	digests := map[string]string{}
	for line := range strings.Lines(stdout) {
		ref, digest, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !strings.HasPrefix(digest, "sha256:") {
			t.Fatalf("build printed %q, want lines of <name>:<tag> sha256:<hex>", line)
		}
		digests[ref] = digest
	}
	return digests
}

type layoutEntry struct {
	image  v1.Image
	digest string
}

func (e layoutEntry) layers(t *testing.T) []v1.Hash {
	t.Helper()
	m, err := e.image.Manifest()
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	var hashes []v1.Hash
	for _, l := range m.Layers {
		hashes = append(hashes, l.Digest)
	}
	return hashes
}

// layoutImage is the image of the layout at dir named ref.
func layoutImage(t *testing.T, dir, ref string) layoutEntry {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("layout %s: %v", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatalf("layout %s: %v", dir, err)
	}
	for _, desc := range im.Manifests {
		if desc.Annotations[refNameAnnotation] != ref {
			continue
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatalf("layout %s: image %s: %v", dir, ref, err)
		}
		return layoutEntry{image: img, digest: desc.Digest.String()}
	}
	t.Fatalf("layout %s has no image %s", dir, ref)
	return layoutEntry{}
}

func checkManifest(t *testing.T, img v1.Image) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("manifest media type %s, config %s; want OCI", m.MediaType, m.Config.MediaType)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Errorf("layers %+v, want one %s", m.Layers, types.OCILayer)
	}
}

// checkFiles checks that img's only layer holds the static executables
// files, in that order, at the root, 0755, owned by 0:0, mtime 0.
func checkFiles(t *testing.T, img v1.Image, files []string) {
	t.Helper()
	var names []string
	eachFile(t, img, func(hdr *tar.Header, r io.Reader) {
		names = append(names, hdr.Name)
		if hdr.Typeflag != tar.TypeReg || hdr.Mode != 0o755 || hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: type %c mode %o owner %d:%d mtime %v; want a regular file, 0755, 0:0, the Unix epoch",
				hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime)
		}
		magic := make([]byte, 4)
		if _, err := io.ReadFull(r, magic); err != nil || string(magic) != "\x7fELF" {
			t.Errorf("%s: starts with %q (%v), want an ELF executable", hdr.Name, magic, err)
		}
	})
	if !slices.Equal(names, files) {
		t.Errorf("files %q, want %q", names, files)
	}
}

// extractFiles writes the files of img's only layer into dir and returns
// their paths.
func extractFiles(t *testing.T, img v1.Image, dir string) []string {
	t.Helper()
	var paths []string
	eachFile(t, img, func(hdr *tar.Header, r io.Reader) {
		p := filepath.Join(dir, filepath.Base(hdr.Name))
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("extracting %s: %v", hdr.Name, err)
		}
		paths = append(paths, p)
	})
	return paths
}

// eachFile calls fn with each entry of img's only layer and its content.
func eachFile(t *testing.T, img v1.Image, fn func(*tar.Header, io.Reader)) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("reading the layer: %v", err)
		}
		fn(hdr, tr)
	}
}

// checkPulled pulls registry/ref and compares its digest and layers.
func checkPulled(ctx context.Context, t *testing.T, registry, ref, digest string, layers []v1.Hash) {
	t.Helper()
	tag, err := name.NewTag(registry+"/"+ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pulling %s: %v", tag, err)
	}
	got, err := img.Digest()
	if err != nil {
		t.Fatalf("digest of %s: %v", tag, err)
	}
	if got.String() != digest {
		t.Errorf("pulled %s has digest %s, want %s", tag, got, digest)
	}
	if gotLayers := (layoutEntry{image: img}).layers(t); !slices.Equal(gotLayers, layers) {
		t.Errorf("pulled %s has layers %v, want %v", tag, gotLayers, layers)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("config of pulled %s: %v", tag, err)
	}
	if _, tagName, _ := strings.Cut(ref, ":"); strings.HasPrefix(ref, driverImage+":") && cf.Config.Labels["org.opencontainers.image.version"] != tagName {
		t.Errorf("pulled %s has version label %q", tag, cf.Config.Labels["org.opencontainers.image.version"])
	}
}

func TestRegistryRefusesNonLoopbackAddress(t *testing.T) {
	tests := []struct {
		addr        string
		allowRemote bool
		wantErr     bool
	}{
		{addr: "0.0.0.0:25000", wantErr: true},
		{addr: ":25000", wantErr: true},
		{addr: "[::]:25000", wantErr: true},
		{addr: "192.0.2.1:25000", wantErr: true},
		{addr: "registry.example.com:25000", wantErr: true},
		{addr: "127.0.0.1", wantErr: true}, // no port
		{addr: "127.0.0.1:25000"},
		{addr: "127.0.0.2:25000"},
		{addr: "[::1]:25000"},
		{addr: "localhost:25000"},
		{addr: "0.0.0.0:25000", allowRemote: true},
		{addr: ":25000", allowRemote: true},
	}
	for _, tc := range tests {
		if err := checkListenAddr(tc.addr, tc.allowRemote); (err != nil) != tc.wantErr {
			t.Errorf("checkListenAddr(%q, allowRemote %v) = %v, want error %v", tc.addr, tc.allowRemote, err, tc.wantErr)
		}
	}

	// The subcommand refuses before it listens or creates its directory.
	dir := filepath.Join(t.TempDir(), "blobs")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"registry", "-addr", "0.0.0.0:0", "-dir", dir}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("registry -addr 0.0.0.0:0 returned %v, want a refusal", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registry -addr 0.0.0.0:0 created %s (stat: %v)", dir, err)
	}
}

func TestIsLoopbackHost(t *testing.T) {
	tests := map[string]bool{
		"127.0.0.1:25000":       true,
		"127.0.0.1":             true,
		"localhost:5000":        true,
		"[::1]:5000":            true,
		"10.0.0.1:5000":         false,
		"registry.example.com":  false,
		"localhost.example.com": false,
		"":                      false,
	}
	for hostport, want := range tests {
		if got := isLoopbackHost(hostport); got != want {
			t.Errorf("isLoopbackHost(%q) = %v, want %v", hostport, got, want)
		}
	}
}

// TestBuildRefusesBadInput covers the checks that come before compiling.
func TestBuildRefusesBadInput(t *testing.T) {
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "images")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no -out", args: []string{"-version", "0.1.0", "-revision", "r"}, wantErr: "-out is required"},
		{name: "unknown set", args: []string{"-out", out, "-set", "drivers", "-version", "0.1.0", "-revision", "r"}, wantErr: `-set "drivers"`},
		{name: "driver without version", args: []string{"-out", out, "-set", "driver", "-revision", "r"}, wantErr: "needs -version and -revision"},
		{name: "all without revision", args: []string{"-out", out, "-version", "0.1.0"}, wantErr: "needs -version and -revision"},
		{name: "revision with a space", args: []string{"-out", out, "-version", "0.1.0", "-revision", "r -X x=y"}, wantErr: "want no spaces or quotes"},
		{name: "version not a tag", args: []string{"-out", out, "-version", "0.1.0+build", "-revision", "r"}, wantErr: "image reference"},
		{name: "positional argument", args: []string{"-out", out, "-version", "0.1.0", "-revision", "r", "extra"}, wantErr: "unexpected arguments"},
		{name: "out is not a layout", args: []string{"-out", foreign, "-version", "0.1.0", "-revision", "r"}, wantErr: "refusing to replace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), append([]string{"build"}, tc.args...), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("build %q returned %v, want an error containing %q", tc.args, err, tc.wantErr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(foreign, "go.mod")); err != nil {
		t.Errorf("the refused output directory lost its file: %v", err)
	}
}

func TestSourceDateEpoch(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{in: "", want: time.Unix(0, 0)},
		{in: "1700000000", want: time.Unix(1700000000, 0)},
		{in: "-1", wantErr: true},
		{in: "yesterday", wantErr: true},
	}
	for _, tc := range tests {
		got, err := sourceDateEpoch(tc.in)
		if (err != nil) != tc.wantErr || (err == nil && !got.Equal(tc.want)) {
			t.Errorf("sourceDateEpoch(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestRunRejectsUnknownSubcommand(t *testing.T) {
	for _, args := range [][]string{nil, {"pull"}} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), args, &stdout, &stderr); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
		if !strings.Contains(stderr.String(), "usage:") {
			t.Errorf("run(%q) printed no usage to stderr: %q", args, stderr.String())
		}
	}
}

// lockedBuffer is a bytes.Buffer that a server goroutine writes while the
// test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
