package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func runPush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("push", flag.ContinueOnError)
	flags.SetOutput(stderr)
	from := flags.String("from", "", "OCI image layout written by build (required)")
	registry := flags.String("registry", "", "HOST[:PORT][/PATH]; each image goes to HOST[:PORT][/PATH]/<name>:<tag>, with the docker config's credentials for HOST[:PORT] (required)")
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
// registry (HOST[:PORT][/PATH]), under the "<name>:<tag>" of its
// org.opencontainers.image.ref.name annotation, and prints each as
// registry/name:tag@digest; then every unnamed artifact whose subject is
// one of them (an SBOM) by digest into its subject's repository, printed as
// registry/name@digest. The registry lists such an artifact among its
// subject's referrers (the OCI referrers API, or where a registry has none,
// the sha256-<subject digest> tag of the OCI 1.1 fallback, which
// go-containerregistry keeps). It authenticates as container tools do:
// authn.DefaultKeychain, the docker config file ($DOCKER_CONFIG/config.json,
// else ~/.docker/config.json; podman's auth.json without either) with its
// credential helpers.
func push(ctx context.Context, dir, registry string, insecure bool, stdout io.Writer) error {
	dest, err := parseDestination(registry, insecure)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	remoteOpts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
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
		tag, err := dest.tag(refName)
		if err != nil {
			return fmt.Errorf("push: manifest %s in %s: %w", desc.Digest, dir, err)
		}
		switch {
		case desc.MediaType.IsIndex():
			ii, err := idx.ImageIndex(desc.Digest)
			if err != nil {
				return fmt.Errorf("push: image index %s (%s) in %s: %w", refName, desc.Digest, dir, err)
			}
			if err := remote.WriteIndex(tag, ii, remoteOpts...); err != nil {
				return fmt.Errorf("push: writing %s: %w", tag, explainDenied(ctx, err, tag.Context()))
			}
		default:
			img, err := idx.Image(desc.Digest)
			if err != nil {
				return fmt.Errorf("push: image %s (%s) in %s: %w", refName, desc.Digest, dir, err)
			}
			if err := remote.Write(tag, img, remoteOpts...); err != nil {
				return fmt.Errorf("push: writing %s: %w", tag, explainDenied(ctx, err, tag.Context()))
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
		if err := remote.Write(ref, img, remoteOpts...); err != nil {
			return fmt.Errorf("push: writing %s: %w", ref, explainDenied(ctx, err, ref.Context()))
		}
		fmt.Fprintf(stdout, "%s\n", ref)
	}
	return nil
}

// destination is where push puts images: a registry and a repository path
// in it, which may be empty.
type destination struct {
	registry name.Registry
	path     string
	opts     []name.Option
}

// parseDestination parses HOST[:PORT][/PATH]. The host needs a dot or a
// port or must be localhost: in an image reference anything else is the
// first component of a Docker Hub repository. Loopback registries, and all
// with insecure, are reached over plain http.
func parseDestination(s string, insecure bool) (destination, error) {
	host, path, _ := strings.Cut(s, "/")
	opts := []name.Option{name.StrictValidation}
	if insecure || isLoopbackHost(host) {
		opts = append(opts, name.Insecure)
	}
	reg, err := name.NewRegistry(host, opts...)
	if err != nil {
		return destination{}, fmt.Errorf("registry %q: %w", s, err)
	}
	if !strings.ContainsAny(host, ".:") && host != "localhost" {
		return destination{}, fmt.Errorf("registry %q: the host %q needs a dot or a port (or is localhost), or image references read it as a Docker Hub repository", s, host)
	}
	if strings.Contains(s, "/") {
		if err := checkRepositoryPath(path); err != nil {
			return destination{}, fmt.Errorf("registry %q: %w", s, err)
		}
	}
	return destination{registry: reg, path: path, opts: opts}, nil
}

// repositoryPathComponent is a component of a repository's name in the OCI
// distribution spec.
const repositoryPathComponent = `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`

// maxRepositoryPath bounds a repository path, leaving room for the image's
// name within the 255 characters registries take.
const maxRepositoryPath = 200

// checkRepositoryPath checks a path of repository components, as the OCI
// distribution spec names repositories: a/b/c, each component lowercase
// letters and digits with single '.', '_' or '__', or runs of '-' between.
func checkRepositoryPath(p string) error {
	re := regexp.MustCompile(`^` + repositoryPathComponent + `(/` + repositoryPathComponent + `)*$`)
	if len(p) > maxRepositoryPath || !re.MatchString(p) {
		return fmt.Errorf("%q is not a repository path (a/b/c: lowercase letters and digits, '.', '_' or '-' between them; at most %d characters)", p, maxRepositoryPath)
	}
	return nil
}

// tag is refName ("<name>:<tag>") under the destination.
func (d destination) tag(refName string) (name.Tag, error) {
	ref := d.registry.Name() + "/" + refName
	if d.path != "" {
		ref = d.registry.Name() + "/" + d.path + "/" + refName
	}
	tag, err := name.NewTag(ref, d.opts...)
	if err != nil {
		return name.Tag{}, err
	}
	if tag.RegistryStr() != d.registry.RegistryStr() {
		return name.Tag{}, fmt.Errorf("%s names the registry %s, not %s", ref, tag.RegistryStr(), d.registry.RegistryStr())
	}
	return tag, nil
}

// explainDenied adds to a registry's refusal (401, 403) which credentials
// the docker config gave for the repository, and how to give some.
func explainDenied(ctx context.Context, err error, repo name.Repository) error {
	var terr *transport.Error
	if !errors.As(err, &terr) || (terr.StatusCode != http.StatusUnauthorized && terr.StatusCode != http.StatusForbidden) {
		return err
	}
	host := repo.RegistryStr()
	auth, kerr := authn.Resolve(ctx, authn.DefaultKeychain, repo)
	switch {
	case kerr != nil:
		return fmt.Errorf("%w (and reading the docker config's credentials for %s: %w)", err, host, kerr)
	case auth == authn.Anonymous:
		return fmt.Errorf("%w: the registry wants credentials and the docker config has none for %s ($DOCKER_CONFIG/config.json, else ~/.docker/config.json: its auths, credHelpers or credsStore); log in first, e.g. docker login %s", err, host, host)
	default:
		return fmt.Errorf("%w: the registry refused the credentials the docker config holds for %s ($DOCKER_CONFIG/config.json, else ~/.docker/config.json)", err, host)
	}
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
