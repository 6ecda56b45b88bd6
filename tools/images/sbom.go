package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// sbomArtifactType is the artifactType of the SBOM manifest and the
	// media type of each of its layers: one CycloneDX JSON document each.
	sbomArtifactType = "application/vnd.cyclonedx+json"
	// emptyMediaType is the config of an artifact that has none (OCI image
	// spec 1.1, "Guidance for an Empty Descriptor").
	emptyMediaType = "application/vnd.oci.empty.v1+json"
	// titleAnnotation names a layer's file.
	titleAnnotation = "org.opencontainers.image.title"
	// createdAnnotation is the artifact's creation time (the build's epoch).
	createdAnnotation = "org.opencontainers.image.created"
	// maxSBOMBytes bounds what one SBOM document the tool writes may take.
	maxSBOMBytes = 16 << 20
)

// emptyJSON is the content of the empty descriptor.
var emptyJSON = []byte("{}")

// sbomFileName is the title of the SBOM layer of one binary of one
// architecture: dra-swap-hook_linux_arm64.cdx.json.
func sbomFileName(binary, arch string) string {
	return binary + "_linux_" + arch + ".cdx.json"
}

// sbomArtifact runs the SBOM tool (cyclonedx-gomod bin) on each binary of s
// for each architecture in binDir/<arch>, and returns an OCI artifact
// manifest whose subject is subject, artifactType CycloneDX, with one layer
// per binary and architecture titled sbomFileName. The tool reads the
// modules a binary links from its build information (their versions and
// go.sum hashes); the main module's version is s's tag with a "v". The
// documents have no serial number and no timestamp, so the same binaries
// give the same artifact.
func sbomArtifact(ctx context.Context, o buildOptions, s imageSpec, binDir string, subject v1.Descriptor, stderr io.Writer) (v1.Image, error) {
	version := s.tag
	if !strings.HasPrefix(version, "v") {
		version = "v" + version
	}
	var docs []sbomDoc
	for _, arch := range o.arches {
		for _, pkg := range s.pkgs {
			bin := path.Base(pkg)
			doc, err := runSBOMTool(ctx, o.sbomTool, filepath.Join(binDir, arch, bin), version, stderr)
			if err != nil {
				return nil, err
			}
			docs = append(docs, sbomDoc{title: sbomFileName(bin, arch), content: doc})
		}
	}
	return newArtifact(sbomArtifactType, docs, subject, map[string]string{
		createdAnnotation: o.epoch.Format(time.RFC3339),
	})
}

// runSBOMTool runs `tool bin` on binary and returns the CycloneDX JSON
// document it wrote, after checking that it is one.
func runSBOMTool(ctx context.Context, tool, binary, version string, stderr io.Writer) ([]byte, error) {
	out, err := os.CreateTemp("", "dra-swap-images-sbom-")
	if err != nil {
		return nil, fmt.Errorf("creating a file for the SBOM of %s: %w", binary, err)
	}
	out.Close()
	defer os.Remove(out.Name())
	cmd := exec.CommandContext(ctx, tool, "bin", "-json", "-noserial", "-notimestamp", "-version", version, "-output", out.Name(), binary)
	// CI set: the tool's log lines without colours.
	cmd.Env = append(os.Environ(), "CI=1")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s bin %s: %w", tool, binary, err)
	}
	f, err := os.Open(out.Name())
	if err != nil {
		return nil, fmt.Errorf("reading the SBOM of %s: %w", binary, err)
	}
	defer f.Close()
	doc, err := io.ReadAll(io.LimitReader(f, maxSBOMBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the SBOM of %s: %w", binary, err)
	}
	if len(doc) > maxSBOMBytes {
		return nil, fmt.Errorf("the SBOM of %s is over %d bytes", binary, maxSBOMBytes)
	}
	var head struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct {
				Version string `json:"version"`
			} `json:"component"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(doc, &head); err != nil {
		return nil, fmt.Errorf("the SBOM of %s is not JSON: %w", binary, err)
	}
	if head.BOMFormat != "CycloneDX" || head.Metadata.Component.Version != version {
		return nil, fmt.Errorf("the SBOM of %s has format %q and version %q, want CycloneDX and %s", binary, head.BOMFormat, head.Metadata.Component.Version, version)
	}
	return doc, nil
}

// sbomDoc is one file of an artifact.
type sbomDoc struct {
	title   string
	content []byte
}

// artifact is an OCI 1.1 artifact: an image manifest with an artifactType,
// the empty config, and files as layers.
type artifact struct {
	manifest []byte
	blobs    map[v1.Hash]partial.CompressedLayer
}

// newArtifact makes an artifact of docs (each a layer of mediaType
// artifactType, titled) that refers to subject.
func newArtifact(artifactType string, docs []sbomDoc, subject v1.Descriptor, annotations map[string]string) (v1.Image, error) {
	config := static.NewLayer(emptyJSON, emptyMediaType)
	configDesc, err := partial.Descriptor(config)
	if err != nil {
		return nil, fmt.Errorf("the empty config: %w", err)
	}
	configDesc.Data = emptyJSON
	a := &artifact{blobs: map[v1.Hash]partial.CompressedLayer{configDesc.Digest: config}}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  artifactType,
		Config:        *configDesc,
		Subject:       &subject,
		Annotations:   annotations,
	}
	for _, d := range docs {
		layer := static.NewLayer(d.content, types.MediaType(artifactType))
		desc, err := partial.Descriptor(layer)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", d.title, err)
		}
		desc.Annotations = map[string]string{titleAnnotation: d.title}
		m.Layers = append(m.Layers, *desc)
		a.blobs[desc.Digest] = layer
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the artifact's manifest: %w", err)
	}
	a.manifest = raw
	return partial.CompressedToImage(a)
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return bytes.Clone(emptyJSON), nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return bytes.Clone(a.manifest), nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := a.blobs[h]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("the artifact has no blob %s", h)
}
