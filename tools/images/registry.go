package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

const (
	// shutdownTimeout bounds how long the registry waits for requests in
	// flight once it is told to stop.
	shutdownTimeout = 10 * time.Second
	// maxBasicAuthFileBytes bounds the -basic-auth file.
	maxBasicAuthFileBytes = 4096
	// basicAuthRealm is the realm of the registry's Basic challenge.
	basicAuthRealm = "dra-swap-images"
)

func runRegistry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("registry", flag.ContinueOnError)
	flags.SetOutput(stderr)
	addr := flags.String("addr", "", "HOST:PORT to listen on, a loopback address unless -allow-remote (required)")
	dir := flags.String("dir", "", "directory for the blobs; manifests live in memory, so push again after a restart (required)")
	allowRemote := flags.Bool("allow-remote", false, "allow listening on an address other than loopback")
	authFile := flags.String("basic-auth", "", "file holding one line USER:PASSWORD: every request must then carry these credentials (HTTP Basic), but for pulls outside -private")
	private := flags.String("private", "", "with -basic-auth, only pulls from the repositories named PATH or under PATH/ need the credentials, as a hosted registry's private repositories (their manifests, tags and referrers: blobs are kept by digest for all); pushes always do (default: every repository's pulls)")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if *addr == "" || *dir == "" {
		return errors.New("registry: -addr and -dir are required")
	}
	if err := checkListenAddr(*addr, *allowRemote); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	var auth *basicAuth
	if *authFile != "" {
		a, err := readBasicAuth(*authFile)
		if err != nil {
			return fmt.Errorf("registry: %w", err)
		}
		if a.private, err = privatePrefix(*private); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
		auth = a
	} else if *private != "" {
		return errors.New("registry: -private needs -basic-auth")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("registry: creating the blob directory: %w", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	mode := "anonymous"
	if auth != nil {
		mode = "basic auth as " + auth.user
		if auth.private != "" {
			mode += " (pulls of " + auth.private + "/... only)"
		}
	}
	fmt.Fprintf(stdout, "registry serving http://%s, blobs in %s, %s\n", ln.Addr(), *dir, mode)
	return serveRegistry(ctx, ln, *dir, auth, stderr)
}

// checkListenAddr refuses an address that is not loopback unless
// allowRemote: an empty host means every interface.
func checkListenAddr(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", addr, err)
	}
	if allowRemote || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("-addr %q is not a loopback address (127.0.0.1, ::1, localhost); pass -allow-remote to listen on it", addr)
}

// basicAuth is the one user a registry with -basic-auth admits, and the
// repositories whose pulls need it.
type basicAuth struct {
	user, password string
	// private is the repository path under which pulls need the
	// credentials; "" for every repository.
	private string
}

// readBasicAuth reads a -basic-auth file: USER:PASSWORD on one line, a
// final newline allowed, neither part empty, the user without a colon.
func readBasicAuth(file string) (*basicAuth, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("-basic-auth: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBasicAuthFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("-basic-auth %s: %w", file, err)
	}
	if len(data) > maxBasicAuthFileBytes {
		return nil, fmt.Errorf("-basic-auth %s: more than %d bytes, want one line USER:PASSWORD", file, maxBasicAuthFileBytes)
	}
	line := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	user, password, ok := strings.Cut(line, ":")
	if !ok || user == "" || password == "" || strings.ContainsAny(line, "\r\n") {
		return nil, fmt.Errorf("-basic-auth %s: want one line USER:PASSWORD, neither empty", file)
	}
	return &basicAuth{user: user, password: password}, nil
}

// privatePrefix checks a -private path: "" or a repository path.
func privatePrefix(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if err := checkRepositoryPath(p); err != nil {
		return "", fmt.Errorf("-private: %w", err)
	}
	return p, nil
}

// repositoryOf is the repository a /v2/ path names, "" for the API's root
// (/v2/) and the catalog.
func repositoryOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return ""
	}
	// The repository API's paths end in one of these, after the
	// repository's name: /v2/<name>/manifests/<reference>,
	// /v2/<name>/blobs/<digest> (and blobs/uploads/...),
	// /v2/<name>/tags/list, /v2/<name>/referrers/<digest>. The last one in
	// the path counts: what follows it (a tag, a digest, uploads/<id>,
	// list) holds none.
	end := -1
	for _, e := range []string{"/manifests/", "/blobs/", "/tags/", "/referrers/"} {
		if i := strings.LastIndex(rest, e); i > end {
			end = i
		}
	}
	if end <= 0 {
		return ""
	}
	return rest[:end]
}

// allowsAnonymous says whether r needs no credentials: a pull (GET or
// HEAD) from a repository outside the private path, when there is one.
// The registry keeps blobs by digest for all repositories, so a client
// that knows a private blob's digest gets it through a public repository:
// the private path guards manifests, tags and referrers, which is what a
// pull starts with.
func (a *basicAuth) allowsAnonymous(r *http.Request) bool {
	if a.private == "" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false
	}
	repo := repositoryOf(r.URL.Path)
	return repo != "" && repo != a.private && !strings.HasPrefix(repo, a.private+"/")
}

// valid says whether r carries the user's credentials, comparing in time
// independent of where they differ.
func (a *basicAuth) valid(r *http.Request) bool {
	user, password, ok := r.BasicAuth()
	if !ok {
		return false
	}
	u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	wu, wp := sha256.Sum256([]byte(a.user)), sha256.Sum256([]byte(a.password))
	return subtle.ConstantTimeCompare(u[:], wu[:])&subtle.ConstantTimeCompare(p[:], wp[:]) == 1
}

// wrap refuses, with the distribution API's 401 and a Basic challenge,
// every request that needs the credentials and lacks them.
func (a *basicAuth) wrap(next http.Handler, logger *log.Logger) http.Handler {
	body := []byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]}` + "\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.valid(r) || (r.Header.Get("Authorization") == "" && a.allowsAnonymous(r)) {
			next.ServeHTTP(w, r)
			return
		}
		why := "no credentials"
		if r.Header.Get("Authorization") != "" {
			why = "wrong credentials"
		}
		logger.Printf("%s %s: 401, %s", r.Method, r.URL.Path, why)
		w.Header().Set("WWW-Authenticate", fmt.Sprintf("Basic realm=%q", basicAuthRealm))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	})
}

// serveRegistry serves the OCI distribution API on ln, blobs in dir, one
// log line per request to logw, until ctx ends; then it stops accepting,
// waits for requests in flight and returns nil. With auth, requests need
// its credentials (basicAuth.wrap).
func serveRegistry(ctx context.Context, ln net.Listener, dir string, auth *basicAuth, logw io.Writer) error {
	logger := log.New(logw, "registry: ", log.LstdFlags)
	var handler http.Handler = registry.New(
		registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)),
		registry.Logger(logger),
	)
	if auth != nil {
		handler = auth.wrap(handler, logger)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          logger,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("registry: serving %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("registry: shutting down %s: %w", ln.Addr(), err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("registry: serving %s: %w", ln.Addr(), err)
	}
	logger.Printf("stopped")
	return nil
}
