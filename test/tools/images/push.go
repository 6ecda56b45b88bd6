package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func runPush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("push", flag.ContinueOnError)
	flags.SetOutput(stderr)
	from := flags.String("from", "", "OCI image layout written by build (required)")
	registry := flags.String("registry", "", "registry HOST:PORT; each image goes to HOST:PORT/<name>:<tag> (required)")
	insecure := flags.Bool("insecure", false, "talk plain http to the registry; always so for loopback registries")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if *from == "" || *registry == "" {
		return errors.New("push: -from and -registry are required")
	}
	return push(ctx, *from, *registry, *insecure, stdout)
}

// push copies every image and image index of the layout at dir to
// registry, under the "<name>:<tag>" of its org.opencontainers.image.ref.name
// annotation, and prints each as registry/name:tag@digest; then every
// unnamed artifact whose subject is one of them (an SBOM) by digest into its
// subject's repository, printed as registry/name@digest. The registry lists
// such an artifact among its subject's referrers (the OCI referrers API, or
// where a registry has none, the sha256-<subject digest> tag of the OCI 1.1
// fallback, which go-containerregistry keeps).
func push(ctx context.Context, dir, registry string, insecure bool, stdout io.Writer) error {
	opts := []name.Option{name.StrictValidation}
	if insecure || isLoopbackHost(registry) {
		opts = append(opts, name.Insecure)
	}
	if _, err := name.NewRegistry(registry, opts...); err != nil {
		return fmt.Errorf("push: registry %q: %w", registry, err)
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return fmt.Errorf("push: reading the OCI layout %s: %w", dir, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return fmt.Errorf("push: reading the index of %s: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("push: reading the index of %s: %w", dir, err)
	}
	if len(im.Manifests) == 0 {
		return fmt.Errorf("push: the layout %s holds no images", dir)
	}
	// The repository of each named manifest, by digest, for the artifacts
	// that refer to it.
	repos := map[v1.Hash]name.Repository{}
	var referrers []v1.Descriptor
	for _, desc := range im.Manifests {
		refName := desc.Annotations[refNameAnnotation]
		if refName == "" {
			referrers = append(referrers, desc)
			continue
		}
		tag, err := name.NewTag(registry+"/"+refName, opts...)
		if err != nil {
			return fmt.Errorf("push: manifest %s in %s: %w", desc.Digest, dir, err)
		}
		switch {
		case desc.MediaType.IsIndex():
			ii, err := idx.ImageIndex(desc.Digest)
			if err != nil {
				return fmt.Errorf("push: image index %s (%s) in %s: %w", refName, desc.Digest, dir, err)
			}
			if err := remote.WriteIndex(tag, ii, remote.WithContext(ctx)); err != nil {
				return fmt.Errorf("push: writing %s: %w", tag, err)
			}
		default:
			img, err := idx.Image(desc.Digest)
			if err != nil {
				return fmt.Errorf("push: image %s (%s) in %s: %w", refName, desc.Digest, dir, err)
			}
			if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
				return fmt.Errorf("push: writing %s: %w", tag, err)
			}
		}
		repos[desc.Digest] = tag.Context()
		fmt.Fprintf(stdout, "%s@%s\n", tag, desc.Digest)
	}
	for _, desc := range referrers {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return fmt.Errorf("push: manifest %s in %s: %w", desc.Digest, dir, err)
		}
		m, err := img.Manifest()
		if err != nil {
			return fmt.Errorf("push: manifest %s in %s: %w", desc.Digest, dir, err)
		}
		if m.Subject == nil {
			return fmt.Errorf("push: manifest %s in %s has neither a %s annotation nor a subject", desc.Digest, dir, refNameAnnotation)
		}
		repo, ok := repos[m.Subject.Digest]
		if !ok {
			return fmt.Errorf("push: manifest %s in %s refers to %s, which the layout does not name", desc.Digest, dir, m.Subject.Digest)
		}
		ref := repo.Digest(desc.Digest.String())
		if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("push: writing %s: %w", ref, err)
		}
		fmt.Fprintf(stdout, "%s\n", ref)
	}
	return nil
}

// isLoopbackHost says whether hostport ("host", "host:port", "[::1]:port")
// names this machine's loopback interface.
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
