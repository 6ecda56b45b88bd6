package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const (
	testUser     = "builder"
	testPassword = "s3cret:with-colon"
	// testHelper is the credential helper the tests put on PATH, as
	// docker-credential-<testHelper>.
	testHelper = "draswaptest"
)

// startRegistry serves a registry on loopback until the test ends, with
// auth if given, and returns its HOST:PORT.
func startRegistry(t *testing.T, auth *basicAuth) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- serveRegistry(ctx, ln, t.TempDir(), auth, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("registry: %v", err)
		}
	})
	return ln.Addr().String()
}

// dockerConfig writes a docker config directory (for DOCKER_CONFIG) whose
// config.json is content.
func dockerConfig(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// authsConfig is a docker config holding user:password for host in auths,
// as `docker login host` writes it without a credential store.
func authsConfig(host, user, password string) string {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, auth)
}

// helperConfig is a docker config that sends host to the credential helper
// testHelper.
func helperConfig(host string) string {
	return fmt.Sprintf(`{"credHelpers": {%q: %q}}`, host, testHelper)
}

// credentialHelper writes docker-credential-<testHelper> into a new
// directory, to put on PATH: a script speaking the credential helper
// protocol (`get` reads a server address on stdin and answers with its
// ServerURL, Username and Secret as JSON) that knows user:password for
// host alone, and logs each call as "<caller's command> <action>
// <address>" to the returned file.
func credentialHelper(t *testing.T, host, user, password string) (dir, logFile string) {
	t.Helper()
	dir = t.TempDir()
	logFile = filepath.Join(dir, "calls.log")
	script := fmt.Sprintf(`#!/bin/sh
read -r server
echo "$(cat /proc/$PPID/comm) $1 $server" >> %q
if [ "$1" = get ] && [ "$server" = %q ]; then
	printf '{"ServerURL":"%%s","Username":%q,"Secret":%q}\n' "$server"
	exit 0
fi
echo "credentials not found in native keychain"
exit 1
`, logFile, host, user, password)
	if err := os.WriteFile(filepath.Join(dir, "docker-credential-"+testHelper), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, logFile
}

func TestReadBasicAuth(t *testing.T) {
	tests := []struct {
		name, content      string
		wantUser, wantPass string
		wantErr            bool
	}{
		{name: "line", content: "u:p\n", wantUser: "u", wantPass: "p"},
		{name: "no newline", content: "u:p", wantUser: "u", wantPass: "p"},
		{name: "CRLF", content: "u:p\r\n", wantUser: "u", wantPass: "p"},
		{name: "colon in the password", content: "u:p:q", wantUser: "u", wantPass: "p:q"},
		{name: "empty", content: "", wantErr: true},
		{name: "no colon", content: "up\n", wantErr: true},
		{name: "no user", content: ":p\n", wantErr: true},
		{name: "no password", content: "u:\n", wantErr: true},
		{name: "two lines", content: "u:p\nv:q\n", wantErr: true},
		{name: "too large", content: "u:" + strings.Repeat("p", maxBasicAuthFileBytes), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "auth")
			if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			a, err := readBasicAuth(file)
			if tc.wantErr {
				if err == nil {
					t.Errorf("readBasicAuth(%q) = %+v, want an error", tc.content, a)
				}
				return
			}
			if err != nil || a.user != tc.wantUser || a.password != tc.wantPass {
				t.Errorf("readBasicAuth(%q) = %+v, %v; want %s:%s", tc.content, a, err, tc.wantUser, tc.wantPass)
			}
		})
	}
	if _, err := readBasicAuth(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("readBasicAuth of a missing file succeeded")
	}
}

func TestRepositoryOf(t *testing.T) {
	tests := map[string]string{
		"/v2/":                                    "",
		"/v2/_catalog":                            "",
		"/v2/pause/manifests/3.10":                "pause",
		"/v2/some/path/x/manifests/1":             "some/path/x",
		"/v2/some/path/x/blobs/sha256:00":         "some/path/x",
		"/v2/some/path/x/blobs/uploads/":          "some/path/x",
		"/v2/some/path/x/blobs/uploads/abc":       "some/path/x",
		"/v2/a/tags/list":                         "a",
		"/v2/a/referrers/sha256:00":               "a",
		"/v2/blobs/manifests/x/manifests/1":       "blobs/manifests/x",
		"/v2/a/manifests/b/blobs/sha256:00":       "a/manifests/b",
		"/v2/manifests/1":                         "",
		"/v3/a/manifests/1":                       "",
		"/v2/a/b/c/d/e/f/g/manifests/sha256:0000": "a/b/c/d/e/f/g",
	}
	for path, want := range tests {
		if got := repositoryOf(path); got != want {
			t.Errorf("repositoryOf(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestParseDestination(t *testing.T) {
	tests := []struct {
		in       string
		insecure bool
		// wantTag is where the image x:1 goes; "" for an error.
		wantTag    string
		wantScheme string
	}{
		{in: "127.0.0.1:5000", wantTag: "127.0.0.1:5000/x:1", wantScheme: "http"},
		{in: "127.0.0.1:5000/some/path", wantTag: "127.0.0.1:5000/some/path/x:1", wantScheme: "http"},
		{in: "localhost/team", wantTag: "localhost/team/x:1", wantScheme: "http"},
		{in: "registry.example/team/project", wantTag: "registry.example/team/project/x:1", wantScheme: "https"},
		{in: "registry.example:5000/a.b/c_d/e__f/g--h", insecure: true, wantTag: "registry.example:5000/a.b/c_d/e__f/g--h/x:1", wantScheme: "http"},
		{in: "docker.io/someone", wantTag: "index.docker.io/someone/x:1", wantScheme: "https"},
		{in: "myhost"},
		{in: "myhost/team"},
		{in: "127.0.0.1:5000/"},
		{in: "127.0.0.1:5000//a"},
		{in: "127.0.0.1:5000/a/"},
		{in: "127.0.0.1:5000/Team"},
		{in: "127.0.0.1:5000/a..b"},
		{in: "127.0.0.1:5000/a___b"},
		{in: "127.0.0.1:5000/-a"},
		{in: "127.0.0.1:5000/a b"},
		{in: "127.0.0.1:5000/" + strings.Repeat("a", maxRepositoryPath+1)},
		{in: "https://registry.example"},
		{in: ""},
	}
	for _, tc := range tests {
		d, err := parseDestination(tc.in, tc.insecure)
		if tc.wantTag == "" {
			if err == nil {
				t.Errorf("parseDestination(%q) = %+v, want an error", tc.in, d)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseDestination(%q): %v", tc.in, err)
			continue
		}
		tag, err := d.tag("x:1")
		if err != nil || tag.Name() != tc.wantTag || tag.Scheme() != tc.wantScheme {
			t.Errorf("parseDestination(%q).tag(x:1) = %s (%s), %v; want %s (%s)", tc.in, tag.Name(), tag.Scheme(), err, tc.wantTag, tc.wantScheme)
		}
	}
}

// TestRegistryBasicAuth: with -basic-auth, every request needs the
// credentials (401 with a Basic challenge otherwise), but with -private
// pulls from repositories outside its path.
func TestRegistryBasicAuth(t *testing.T) {
	everything := startRegistry(t, &basicAuth{user: testUser, password: testPassword})
	private := startRegistry(t, &basicAuth{user: testUser, password: testPassword, private: "some/path"})
	open := startRegistry(t, nil)
	tests := []struct {
		name     string
		registry string
		method   string
		path     string
		user     string
		password string
		// wantStatus is the registry's answer; 401 comes with the challenge.
		wantStatus int
	}{
		{name: "ping without credentials", registry: everything, method: http.MethodGet, path: "/v2/", wantStatus: http.StatusUnauthorized},
		{name: "ping with credentials", registry: everything, method: http.MethodGet, path: "/v2/", user: testUser, password: testPassword, wantStatus: http.StatusOK},
		{name: "ping with a wrong password", registry: everything, method: http.MethodGet, path: "/v2/", user: testUser, password: "wrong", wantStatus: http.StatusUnauthorized},
		{name: "ping with a wrong user", registry: everything, method: http.MethodGet, path: "/v2/", user: "other", password: testPassword, wantStatus: http.StatusUnauthorized},
		{name: "pull without credentials", registry: everything, method: http.MethodGet, path: "/v2/pause/manifests/3.10", wantStatus: http.StatusUnauthorized},
		{name: "head without credentials", registry: everything, method: http.MethodHead, path: "/v2/pause/manifests/3.10", wantStatus: http.StatusUnauthorized},
		{name: "pull with credentials", registry: everything, method: http.MethodGet, path: "/v2/pause/manifests/3.10", user: testUser, password: testPassword, wantStatus: http.StatusNotFound},
		{name: "push without credentials", registry: everything, method: http.MethodPost, path: "/v2/pause/blobs/uploads/", wantStatus: http.StatusUnauthorized},
		{name: "push with credentials", registry: everything, method: http.MethodPost, path: "/v2/pause/blobs/uploads/", user: testUser, password: testPassword, wantStatus: http.StatusAccepted},
		{name: "private: public pull without credentials", registry: private, method: http.MethodGet, path: "/v2/pause/manifests/3.10", wantStatus: http.StatusNotFound},
		{name: "private: public pull with a wrong password", registry: private, method: http.MethodGet, path: "/v2/pause/manifests/3.10", user: testUser, password: "wrong", wantStatus: http.StatusUnauthorized},
		{name: "private: a path's sibling is public", registry: private, method: http.MethodGet, path: "/v2/some/pathological/manifests/1", wantStatus: http.StatusNotFound},
		{name: "private: private pull without credentials", registry: private, method: http.MethodGet, path: "/v2/some/path/dra-driver-swap/manifests/1", wantStatus: http.StatusUnauthorized},
		{name: "private: the path itself", registry: private, method: http.MethodGet, path: "/v2/some/path/manifests/1", wantStatus: http.StatusUnauthorized},
		{name: "private: private pull with credentials", registry: private, method: http.MethodGet, path: "/v2/some/path/dra-driver-swap/manifests/1", user: testUser, password: testPassword, wantStatus: http.StatusNotFound},
		{name: "private: public push without credentials", registry: private, method: http.MethodPost, path: "/v2/pause/blobs/uploads/", wantStatus: http.StatusUnauthorized},
		{name: "private: catalog without credentials", registry: private, method: http.MethodGet, path: "/v2/_catalog", wantStatus: http.StatusUnauthorized},
		{name: "private: ping without credentials", registry: private, method: http.MethodGet, path: "/v2/", wantStatus: http.StatusUnauthorized},
		{name: "no auth: ping", registry: open, method: http.MethodGet, path: "/v2/", wantStatus: http.StatusOK},
		{name: "no auth: push", registry: open, method: http.MethodPost, path: "/v2/pause/blobs/uploads/", wantStatus: http.StatusAccepted},
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, "http://"+tc.registry+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.user != "" {
				req.SetBasicAuth(tc.user, tc.password)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("%s %s: %s, want %d\n%s", tc.method, tc.path, resp.Status, tc.wantStatus, body)
			}
			if resp.StatusCode != http.StatusUnauthorized {
				return
			}
			if got, want := resp.Header.Get("WWW-Authenticate"), `Basic realm="`+basicAuthRealm+`"`; got != want {
				t.Errorf("the challenge is %q, want %q", got, want)
			}
			if tc.method == http.MethodGet && !strings.Contains(string(body), `"code":"UNAUTHORIZED"`) {
				t.Errorf("the 401's body is %q, want the distribution API's UNAUTHORIZED error", body)
			}
		})
	}
}

func TestRegistrySubcommandRefusesBadAuthFlags(t *testing.T) {
	good := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(good, []byte("u:p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(bad, []byte("up\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"-basic-auth", bad}, wantErr: "want one line USER:PASSWORD"},
		{args: []string{"-basic-auth", filepath.Join(t.TempDir(), "missing")}, wantErr: "-basic-auth"},
		{args: []string{"-private", "some/path"}, wantErr: "-private needs -basic-auth"},
		{args: []string{"-basic-auth", good, "-private", "Some"}, wantErr: "not a repository path"},
	}
	for _, tc := range tests {
		dir := filepath.Join(t.TempDir(), "blobs")
		args := append([]string{"registry", "-addr", "127.0.0.1:0", "-dir", dir}, tc.args...)
		err := run(t.Context(), args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("dra-swap-images %q: %v, want an error containing %q", args, err, tc.wantErr)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("dra-swap-images %q created %s", args, dir)
		}
	}
}

// TestPushAuthenticates: push takes the credentials for the registry's
// host from the docker config in DOCKER_CONFIG, from its auths or through
// the credential helper it names, and puts the images under the
// registry's path; without credentials, or with wrong ones, it fails and
// says which.
func TestPushAuthenticates(t *testing.T) {
	img, err := packImage(imageSpec{name: "x", tag: "1"}, t.TempDir(), "amd64", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	imgDesc, err := manifestDescriptor(img)
	if err != nil {
		t.Fatal(err)
	}
	sbom, err := newArtifact(sbomArtifactType, []sbomDoc{{title: "a.cdx.json", content: []byte("{}")}}, imgDesc, nil)
	if err != nil {
		t.Fatal(err)
	}
	sbomDigest, err := sbom.Digest()
	if err != nil {
		t.Fatal(err)
	}
	lp, err := layout.Write(t.TempDir(), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: "x:1"})); err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(sbom); err != nil {
		t.Fatal(err)
	}

	registry := startRegistry(t, &basicAuth{user: testUser, password: testPassword})
	helperDir, helperLog := credentialHelper(t, registry, testUser, testPassword)
	// Nothing of this machine's: no other docker or podman config.
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("PATH", helperDir+string(os.PathListSeparator)+os.Getenv("PATH"))

	tests := []struct {
		name   string
		config string
		// wantErr is part of push's error; "" for a push that succeeds.
		wantErr    string
		wantHelper bool
	}{
		{name: "no docker config", wantErr: "the docker config has none for " + registry},
		{name: "no credentials for the host", config: authsConfig("registry.example", testUser, testPassword), wantErr: "the docker config has none for " + registry},
		{name: "wrong password", config: authsConfig(registry, testUser, "wrong"), wantErr: "the registry refused the credentials the docker config holds for " + registry},
		{name: "credential helper that knows another host", config: helperConfig("registry.example"), wantErr: "the docker config has none for " + registry},
		{name: "auths", config: authsConfig(registry, testUser, testPassword)},
		{name: "credential helper", config: helperConfig(registry), wantHelper: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.config != "" {
				t.Setenv("DOCKER_CONFIG", dockerConfig(t, tc.config))
			} else {
				t.Setenv("DOCKER_CONFIG", t.TempDir())
			}
			if err := os.Remove(helperLog); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			// A path of its own per case: nothing a case pushed is found by
			// the next.
			dest := fmt.Sprintf("%s/team/case%d", registry, i)
			var out strings.Builder
			err := push(t.Context(), string(lp), dest, false, &out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "401 Unauthorized") {
					t.Fatalf("push to %s: %v, want a 401 and %q", dest, err, tc.wantErr)
				}
				t.Logf("push to %s: %v", dest, err)
				return
			}
			if err != nil {
				t.Fatalf("push to %s: %v", dest, err)
			}
			want := fmt.Sprintf("%s/x:1@%s\n%s/x@%s\n", dest, imgDesc.Digest, dest, sbomDigest)
			if out.String() != want {
				t.Errorf("push printed %q, want %q", out.String(), want)
			}
			calls, _ := os.ReadFile(helperLog)
			if gotHelper := strings.Contains(string(calls), " get "+registry+"\n"); gotHelper != tc.wantHelper {
				t.Errorf("the credential helper was asked for %s: %v, want %v (its calls: %q)", registry, gotHelper, tc.wantHelper, calls)
			}
			ref, err := name.NewTag(dest+"/x:1", name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := remote.Get(ref, remote.WithContext(t.Context())); err == nil {
				t.Errorf("%s was pulled without credentials", ref)
			}
			desc, err := remote.Get(ref, remote.WithContext(t.Context()), remote.WithAuth(&authn.Basic{Username: testUser, Password: testPassword}))
			if err != nil || desc.Digest != imgDesc.Digest {
				t.Errorf("pulling %s with the credentials: %v, digest %v; want %s", ref, err, desc, imgDesc.Digest)
			}
		})
	}
}
