package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// modulePath is the module whose packages the images hold; build runs
	// `go build` in its root.
	modulePath = "github.com/dra-driver-swap/dra-driver-swap"
	// defaultSource is the images' org.opencontainers.image.source label.
	defaultSource = "https://github.com/dra-driver-swap/dra-driver-swap"
	// refNameAnnotation names each image of the layout: "<name>:<tag>".
	refNameAnnotation = "org.opencontainers.image.ref.name"
	// driverImage is the name of the image that holds the driver's three
	// binaries.
	driverImage = "dra-driver-swap"
	// nonRootUser is the driver image's user; the kubelet plugin's pod
	// overrides it with runAsUser: 0.
	nonRootUser = "65532:65532"
	// license is the driver's SPDX license expression, its
	// org.opencontainers.image.licenses label.
	license = "Apache-2.0"
	// maxArches bounds the -arch list.
	maxArches = 8
	// maxModuleDepth bounds the directories moduleRoot climbs.
	maxModuleDepth = 64
)

// Image sets of `build -set`.
const (
	setDriver = "driver"
	setTest   = "test"
	setAll    = "all"
)

// buildOptions are the inputs of `build` besides the sources.
type buildOptions struct {
	out      string
	set      string
	version  string
	revision string
	source   string
	// arches are the GOARCHes of the images; with more than one, or with
	// index, each image is an OCI image index of one image per
	// architecture.
	arches []string
	// index makes an image of one architecture an index too (a release
	// is an index whatever its architectures).
	index bool
	// sbomTool is cyclonedx-gomod; when set, the driver's image gets an
	// SBOM of its binaries as an OCI referrer (sbom.go).
	sbomTool string
	// epoch is every file's mtime and the images' creation time.
	epoch time.Time
	// compile builds the binaries (nil: go build, func compile); tests
	// give a fake.
	compile compileFunc
}

// compileFunc builds the main packages pkgs for linux/arch into dir.
type compileFunc func(ctx context.Context, dir, arch, ldflags string, pkgs []string, stderr io.Writer) error

// imageSpec is one image: static binaries of Go main packages, each at
// /<last element of its package path>, mode 0755, owned by 0:0.
type imageSpec struct {
	name, tag  string
	pkgs       []string
	user       string
	entrypoint []string
	labels     map[string]string
	// ldflags link the image's binaries (linkerFlags).
	ldflags string
	// sbom: the image's binaries get an SBOM (with -sbom-tool).
	sbom bool
}

func (s imageSpec) ref() string { return s.name + ":" + s.tag }

func runBuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("build", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var o buildOptions
	flags.StringVar(&o.out, "out", "", "directory for the OCI image layout; replaced as a whole once every image is built (required)")
	flags.StringVar(&o.set, "set", setAll, "images to build: driver (dra-driver-swap:VERSION), test (pause:3.10, swap-workload:v1) or all")
	flags.StringVar(&o.version, "version", "", "the driver image's tag and org.opencontainers.image.version label (required for -set driver and all)")
	flags.StringVar(&o.revision, "revision", "", "the org.opencontainers.image.revision label, a VCS commit (required for -set driver and all)")
	flags.StringVar(&o.source, "source", defaultSource, "the org.opencontainers.image.source label")
	arch := flags.String("arch", runtime.GOARCH, "GOARCH of the binaries and the images; a comma-separated list (amd64,arm64) makes each image an OCI image index of one image per architecture")
	flags.BoolVar(&o.index, "index", false, "make each image an OCI image index even for one -arch")
	flags.StringVar(&o.sbomTool, "sbom-tool", "", "cyclonedx-gomod: the driver's image gets a CycloneDX SBOM of each of its binaries, attached as an OCI referrer")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	arches, err := parseArches(*arch)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	o.arches = arches
	o.epoch, err = sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	if o.out == "" {
		return errors.New("build: -out is required")
	}
	specs, err := imageSpecs(o)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	return build(ctx, o, specs, stdout, stderr)
}

// sourceDateEpoch parses SOURCE_DATE_EPOCH (seconds since the Unix epoch,
// https://reproducible-builds.org/specs/source-date-epoch/); unset means 0.
func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil || secs < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a non-negative number of seconds", v)
	}
	return time.Unix(secs, 0).UTC(), nil
}

// parseArches splits the -arch list: GOARCH values, each once.
func parseArches(list string) ([]string, error) {
	arches := strings.Split(list, ",")
	if len(arches) > maxArches {
		return nil, fmt.Errorf("-arch %q: at most %d architectures", list, maxArches)
	}
	for i, a := range arches {
		if _, ok := elfMachines[a]; !ok {
			return nil, fmt.Errorf("-arch %q: %q is not a GOARCH a release may hold (%s)", list, a, knownArches())
		}
		if slices.Contains(arches[:i], a) {
			return nil, fmt.Errorf("-arch %q: %s given twice", list, a)
		}
	}
	return arches, nil
}

// imageSpecs lists the images of o.set.
func imageSpecs(o buildOptions) ([]imageSpec, error) {
	var specs []imageSpec
	switch o.set {
	case setDriver, setAll:
		if o.version == "" || o.revision == "" {
			return nil, fmt.Errorf("-set %s needs -version and -revision", o.set)
		}
		// The revision goes into -ldflags, which splits on spaces and quotes.
		if strings.ContainsAny(o.revision, " \t\n\r'\"") {
			return nil, fmt.Errorf("-revision %q: want no spaces or quotes", o.revision)
		}
		specs = append(specs, imageSpec{
			name:    driverImage,
			tag:     o.version,
			pkgs:    []string{"./cmd/dra-swap-kubeletplugin", "./cmd/dra-swap-controller", "./cmd/dra-swap-hook"},
			user:    nonRootUser,
			ldflags: linkerFlags(o.version, o.revision),
			sbom:    true,
			// No entrypoint: the image holds three commands and each pod
			// names the one it runs.
			labels: map[string]string{
				"org.opencontainers.image.title":       driverImage,
				"org.opencontainers.image.description": "dra.swap, a Kubernetes DRA driver for per-container swap: kubelet plugin, controller, OCI hook",
				"org.opencontainers.image.source":      o.source,
				"org.opencontainers.image.version":     o.version,
				"org.opencontainers.image.revision":    o.revision,
				"org.opencontainers.image.licenses":    license,
			},
		})
	case setTest:
	default:
		return nil, fmt.Errorf("-set %q: want %s, %s or %s", o.set, setDriver, setTest, setAll)
	}
	if o.set == setTest || o.set == setAll {
		// The e2e tests' images carry no version or revision, so their
		// digests change only when their sources do.
		specs = append(specs,
			imageSpec{
				name: "pause", tag: "3.10",
				pkgs:       []string{"./test/e2e/images/pause"},
				entrypoint: []string{"/pause"},
				ldflags:    linkerFlags("", ""),
				labels:     map[string]string{"org.opencontainers.image.title": "pause", "org.opencontainers.image.source": o.source},
			},
			imageSpec{
				name: "swap-workload", tag: "v1",
				pkgs:       []string{"./test/e2e/images/workload"},
				entrypoint: []string{"/workload"},
				ldflags:    linkerFlags("", ""),
				labels:     map[string]string{"org.opencontainers.image.title": "swap-workload", "org.opencontainers.image.source": o.source},
			},
		)
	}
	for _, s := range specs {
		if _, err := name.NewTag("example.com/"+s.ref(), name.StrictValidation); err != nil {
			return nil, fmt.Errorf("image reference %q: %w", s.ref(), err)
		}
	}
	return specs, nil
}

// build compiles the images' binaries, writes the layout next to o.out and
// then puts it in o.out's place, so that a failed build leaves o.out as it
// was.
func build(ctx context.Context, o buildOptions, specs []imageSpec, stdout, stderr io.Writer) error {
	out := filepath.Clean(o.out)
	if err := checkReplaceable(out); err != nil {
		return err
	}
	binDir, err := os.MkdirTemp("", "dra-swap-images-bin-")
	if err != nil {
		return fmt.Errorf("creating a directory for the binaries: %w", err)
	}
	defer os.RemoveAll(binDir)
	// One go build per set of linker flags: the flags are part of every
	// binary's build ID, so the e2e tests' images would change with the
	// driver's version if they were linked with its flags.
	compileTo := o.compile
	if compileTo == nil {
		compileTo = compile
	}
	var flagSets []string
	pkgs := map[string][]string{}
	for _, s := range specs {
		if _, ok := pkgs[s.ldflags]; !ok {
			flagSets = append(flagSets, s.ldflags)
		}
		pkgs[s.ldflags] = append(pkgs[s.ldflags], s.pkgs...)
	}
	for _, arch := range o.arches {
		for _, ldflags := range flagSets {
			if err := compileTo(ctx, filepath.Join(binDir, arch), arch, ldflags, pkgs[ldflags], stderr); err != nil {
				return err
			}
		}
		if err := checkBinaries(filepath.Join(binDir, arch), arch); err != nil {
			return err
		}
	}

	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("removing the leftover %s: %w", tmp, err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("creating the parent of %s: %w", out, err)
	}
	built, err := writeLayout(ctx, tmp, specs, binDir, o, stderr)
	if err == nil {
		err = normalizeModes(tmp)
	}
	if err == nil {
		err = replaceDir(tmp, out)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	for _, line := range built {
		fmt.Fprintln(stdout, line)
	}
	fmt.Fprintf(stderr, "OCI image layout: %s\n", out)
	return nil
}

// writeLayout writes an OCI image layout of specs to dir and returns a
// "<name>:<tag> <digest>" line per image (per index with several arches or o.index).
// With o.sbomTool, an image of a spec with sbom set gets an SBOM artifact
// whose subject it is (sbom.go), in the layout without a name.
func writeLayout(ctx context.Context, dir string, specs []imageSpec, binDir string, o buildOptions, stderr io.Writer) ([]string, error) {
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("creating an OCI layout in %s: %w", dir, err)
	}
	var built []string
	for _, s := range specs {
		name := layout.WithAnnotations(map[string]string{refNameAnnotation: s.ref()})
		var subject v1.Descriptor
		if len(o.arches) == 1 && !o.index {
			img, err := packImage(s, filepath.Join(binDir, o.arches[0]), o.arches[0], o.epoch)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", s.ref(), err)
			}
			if err := lp.AppendImage(img, name); err != nil {
				return nil, fmt.Errorf("writing image %s to %s: %w", s.ref(), dir, err)
			}
			subject, err = manifestDescriptor(img)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", s.ref(), err)
			}
		} else {
			idx, err := packIndex(s, binDir, o.arches, o.epoch)
			if err != nil {
				return nil, fmt.Errorf("image index %s: %w", s.ref(), err)
			}
			if err := lp.AppendIndex(idx, name); err != nil {
				return nil, fmt.Errorf("writing image index %s to %s: %w", s.ref(), dir, err)
			}
			subject, err = manifestDescriptor(idx)
			if err != nil {
				return nil, fmt.Errorf("image index %s: %w", s.ref(), err)
			}
		}
		built = append(built, s.ref()+" "+subject.Digest.String())
		if !s.sbom || o.sbomTool == "" {
			continue
		}
		art, err := sbomArtifact(ctx, o, s, binDir, subject, stderr)
		if err != nil {
			return nil, fmt.Errorf("SBOM of %s: %w", s.ref(), err)
		}
		if err := lp.AppendImage(art); err != nil {
			return nil, fmt.Errorf("writing the SBOM of %s to %s: %w", s.ref(), dir, err)
		}
		digest, err := art.Digest()
		if err != nil {
			return nil, fmt.Errorf("SBOM of %s: digest: %w", s.ref(), err)
		}
		fmt.Fprintf(stderr, "SBOM of %s: %s\n", s.ref(), digest)
	}
	return built, nil
}

// packIndex makes an OCI image index of one image of s per architecture
// (packImage, with the binaries of binDir/<arch>), in the order of arches,
// annotated with s's labels.
func packIndex(s imageSpec, binDir string, arches []string, epoch time.Time) (v1.ImageIndex, error) {
	adds := make([]mutate.IndexAddendum, 0, len(arches))
	for _, arch := range arches {
		img, err := packImage(s, filepath.Join(binDir, arch), arch, epoch)
		if err != nil {
			return nil, fmt.Errorf("linux/%s: %w", arch, err)
		}
		adds = append(adds, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	if len(s.labels) > 0 {
		annotated, ok := mutate.Annotations(idx, s.labels).(v1.ImageIndex)
		if !ok {
			return nil, errors.New("annotating the index did not give an index")
		}
		idx = annotated
	}
	return idx, nil
}

// manifestDescriptor is the descriptor of an image's or an index's
// manifest: media type, digest and size only, as a subject names it.
func manifestDescriptor(m interface {
	MediaType() (types.MediaType, error)
	Digest() (v1.Hash, error)
	Size() (int64, error)
}) (v1.Descriptor, error) {
	mt, err := m.MediaType()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("media type: %w", err)
	}
	digest, err := m.Digest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("digest: %w", err)
	}
	size, err := m.Size()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("size: %w", err)
	}
	return v1.Descriptor{MediaType: mt, Digest: digest, Size: size}, nil
}

// checkReplaceable refuses to replace an existing directory that holds
// anything but an OCI image layout or image tarballs, so that a mistyped
// -out cannot remove unrelated files.
func checkReplaceable(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the output directory: %w", err)
	}
	for _, e := range entries {
		switch n := e.Name(); {
		case n == "oci-layout", n == "index.json", n == "blobs" && e.IsDir():
		case strings.HasSuffix(n, ".tar") && e.Type().IsRegular():
		default:
			return fmt.Errorf("refusing to replace %s: it holds %q, so it is not an OCI image layout", dir, n)
		}
	}
	return nil
}

// normalizeModes makes the layout's files 0644 and its directories 0755:
// go-containerregistry writes some blobs 0600 and index.json 0755.
func normalizeModes(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("setting the mode of %s: %w", p, err)
		}
		return nil
	})
}

// replaceDir renames tmp to dst, replacing dst if it exists.
func replaceDir(tmp, dst string) error {
	old := dst + ".old"
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("removing the leftover %s: %w", old, err)
	}
	if err := os.Rename(dst, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("moving the previous layout aside: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if rerr := os.Rename(old, dst); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return fmt.Errorf("moving %s to %s: %w (and restoring the previous layout: %w)", tmp, dst, err, rerr)
		}
		return fmt.Errorf("moving %s to %s: %w", tmp, dst, err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("removing the previous layout %s: %w", old, err)
	}
	return nil
}

// linkerFlags are the -ldflags of the images' binaries: no symbol tables,
// and the version and revision the commands report (internal/version), when
// given; the e2e tests' images get none.
func linkerFlags(version, revision string) string {
	flags := "-s -w"
	if version != "" {
		flags += " -X " + modulePath + "/internal/version.version=" + version
	}
	if revision != "" {
		flags += " -X " + modulePath + "/internal/version.revision=" + revision
	}
	return flags
}

// compile builds static, reproducible binaries of the main packages pkgs
// into dir: no cgo, no file system paths, no VCS stamp, no symbol tables,
// ldflags as given (with -trimpath, Go does not record them in the
// binary). Go puts no timestamps in binaries, so the same sources and
// flags give the same bytes.
func compile(ctx context.Context, dir, arch, ldflags string, pkgs []string, stderr io.Writer) error {
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("finding the module root: %w", err)
	}
	root, err := moduleRoot(wd)
	if err != nil {
		return err
	}
	args := append([]string{"build", "-trimpath", "-buildvcs=false", "-ldflags=" + ldflags, "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s in %s: %w", strings.Join(pkgs, " "), root, err)
	}
	return nil
}

// moduleRoot is the root of the dra-driver-swap module that holds dir: the
// nearest directory at or above dir whose go.mod declares modulePath. It
// looks past the go.mod of nested modules (this command's own, tools/), so
// it runs from anywhere in the repository.
func moduleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	for range maxModuleDepth {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		switch {
		case err == nil && modFilePath(data) == modulePath:
			return dir, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("finding the module root: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("run this from within the %s module: no go.mod declaring it at or above the working directory", modulePath)
}

// modFilePath is the module path that a go.mod file declares, or "".
func modFilePath(data []byte) string {
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`)
		}
	}
	return ""
}

// packImage makes an image of one layer holding s's binaries from binDir,
// on an empty base.
func packImage(s imageSpec, binDir, arch string, epoch time.Time) (v1.Image, error) {
	files := make(map[string][]byte, len(s.pkgs))
	for _, pkg := range s.pkgs {
		bin := path.Base(pkg)
		data, err := os.ReadFile(filepath.Join(binDir, bin))
		if err != nil {
			return nil, fmt.Errorf("reading the binary of %s: %w", pkg, err)
		}
		files[bin] = data
	}
	layer, err := binariesLayer(files, epoch)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: epoch},
			CreatedBy: "dra-swap-images build: " + strings.Join(s.pkgs, " "),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS, cf.Architecture = "linux", arch
	cf.Config = v1.Config{
		User:       s.user,
		Entrypoint: s.entrypoint,
		Env:        []string{"PATH=/"},
		WorkingDir: "/",
		Labels:     s.labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the config: %w", err)
	}
	return img, nil
}

// binariesLayer is a gzipped tar of files (name -> content) at the root,
// each mode 0755, owned by 0:0, with mtime epoch, in name order; the same
// files give the same bytes.
func binariesLayer(files map[string][]byte, epoch time.Time) (v1.Layer, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	// compress/gzip writes no name and, with a zero ModTime, no time in
	// its header; its output depends on the input and the level only.
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	tw := tar.NewWriter(zw)
	for _, n := range names {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     n,
			Mode:     0o755,
			Size:     int64(len(files[n])),
			ModTime:  epoch,
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar header of %s: %w", n, err)
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, fmt.Errorf("tar content of %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing the tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("closing the gzip stream: %w", err)
	}
	gz := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return layer, nil
}
