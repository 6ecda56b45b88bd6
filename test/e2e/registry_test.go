package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The media types a pull of the driver's image accepts: the release's
// index, or the single image of `make images`.
const driverImageMediaTypes = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"

// registryAuth is the Authorization header for the cluster's registry:
// the credentials hack/cluster/up.sh made, from the docker config it wrote
// (the env file's DOCKER_CONFIG) as `docker login` would.
func (c *env) registryAuth(t *testing.T) string {
	t.Helper()
	dir := c.Env["DOCKER_CONFIG"]
	if dir == "" {
		t.Fatal("the cluster's env file names no DOCKER_CONFIG: a cluster of an older hack/cluster/up.sh")
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Auths map[string]struct{ Auth string }
	}
	if err := json.Unmarshal(data, &config); err != nil {
		t.Fatalf("%s/config.json: %v", dir, err)
	}
	auth := config.Auths[c.Registry()].Auth
	if auth == "" {
		t.Fatalf("%s/config.json holds no credentials for %s", dir, c.Registry())
	}
	return "Basic " + auth
}

// registryGet GETs url (asking for accept, when given) with the
// Authorization auth (none when empty) and returns the status, the
// registry's content digest and the body, at most 1 MiB.
func registryGet(t *testing.T, url, accept, auth string) (status int, digest string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, resp.Header.Get("Docker-Content-Digest"), body
}

// getJSON decodes url's body (asking for accept, when given; with the
// Authorization auth, when given) into v and returns the registry's
// content digest of it.
func getJSON(t *testing.T, url, accept, auth string, v any) string {
	t.Helper()
	status, digest, body := registryGet(t, url, accept, auth)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s: %.200s", url, status, http.StatusText(status), body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return digest
}

// TestDriverFromPrivateRegistry: the driver runs from a registry that wants
// credentials, as a user's private one does (hack/cluster/up.sh: every
// push, and pulls under the driver's repository path, need them; helm
// installed the chart with those of a docker config): the registry
// refuses the driver's image without them and serves it with them, and
// every pod of the chart names a pull Secret of type dockerconfigjson and
// runs that image, which its node could only have pulled with the
// Secret's credentials.
func TestDriverFromPrivateRegistry(t *testing.T) {
	c := loadCluster(t)
	repo := c.Env["DRIVER_REPOSITORY"]
	path, ok := strings.CutPrefix(repo, c.Registry()+"/")
	if !ok || path == "" {
		t.Fatalf("the cluster's env file names the driver's repository %q, want a path in the registry %s", repo, c.Registry())
	}
	manifest := fmt.Sprintf("http://%s/v2/%s/dra-driver-swap/manifests/%s", c.Registry(), path, c.driverVersion())
	if status, _, body := registryGet(t, manifest, driverImageMediaTypes, ""); status != http.StatusUnauthorized {
		t.Errorf("GET %s without credentials: %d %.200s, want 401", manifest, status, body)
	}
	if status, _, body := registryGet(t, manifest, driverImageMediaTypes, "Basic d3Jvbmc6d3Jvbmc="); status != http.StatusUnauthorized {
		t.Errorf("GET %s with wrong credentials: %d %.200s, want 401", manifest, status, body)
	}
	var m struct{ MediaType string }
	digest := getJSON(t, manifest, driverImageMediaTypes, c.registryAuth(t), &m)
	t.Logf("%s/dra-driver-swap:%s is the %s %s", repo, c.driverVersion(), m.MediaType, digest)

	ctx := context.Background()
	ds, deploy := c.driverWorkloads(t)
	pods := c.podsOf(t, metav1.FormatLabelSelector(ds.Spec.Selector))
	pods = append(pods, c.podsOf(t, metav1.FormatLabelSelector(deploy.Spec.Selector))...)
	if len(pods) < 2 {
		t.Fatalf("%d pods of the plugin and the controller, want at least one of each", len(pods))
	}
	wantImage := repo + "/dra-driver-swap:" + c.driverVersion()
	for _, p := range pods {
		if len(p.Spec.ImagePullSecrets) != 1 {
			t.Errorf("pod %s names the pull Secrets %v, want one", p.Name, p.Spec.ImagePullSecrets)
			continue
		}
		name := p.Spec.ImagePullSecrets[0].Name
		secret, err := c.client.CoreV1().Secrets(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s: its pull Secret: %v", p.Name, err)
		} else if secret.Type != corev1.SecretTypeDockerConfigJson || len(secret.Data[corev1.DockerConfigJsonKey]) == 0 {
			t.Errorf("pod %s: its pull Secret %s is of type %s with keys %v, want %s with %s", p.Name, name, secret.Type, secret.Data, corev1.SecretTypeDockerConfigJson, corev1.DockerConfigJsonKey)
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Image != wantImage || !strings.HasSuffix(s.ImageID, "@"+digest) {
				t.Errorf("pod %s on %s: container %s runs %s (%s), want %s (%s)", p.Name, p.Spec.NodeName, s.Name, s.Image, s.ImageID, wantImage, digest)
			}
		}
	}
}
