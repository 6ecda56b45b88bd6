// Command build makes the e2e cluster's images without a Docker daemon:
// each is one layer holding one static Go binary, written as an image
// tarball that `ctr images import` reads.
//
//	go run ./test/e2e/images/build -out _output/images
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type image struct {
	ref, pkg, binary string
}

var images = []image{
	{ref: "registry.local/pause:3.10", pkg: "./test/e2e/images/pause", binary: "pause"},
	{ref: "registry.local/swap-workload:v1", pkg: "./test/e2e/images/workload", binary: "workload"},
}

func main() {
	out := flag.String("out", "_output/images", "directory for the image tarballs")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for _, img := range images {
		path := filepath.Join(*out, img.binary+".tar")
		if err := build(img, path); err != nil {
			fail(fmt.Errorf("image %s: %w", img.ref, err))
		}
		fmt.Printf("built %s -> %s\n", img.ref, path)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "images: %v\n", err)
	os.Exit(1)
}

func build(img image, path string) error {
	tmp, err := os.MkdirTemp("", "image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, img.binary)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, img.pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", img.pkg, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{Name: img.binary, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	})
	if err != nil {
		return err
	}
	i, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := i.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: []string{"/" + img.binary}, Env: []string{"PATH=/"}}
	i, err = mutate.ConfigFile(i, cfg)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(img.ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, i)
}
