package webhook

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// staticManifest is where the webhook configurations ship for clusters,
// generated from Configurations; UPDATE_MANIFESTS=1 rewrites it.
var staticManifest = filepath.Join("..", "..", "deployments", "static", "webhooks.yaml")

func TestStaticManifestMatches(t *testing.T) {
	mutating, validating := Configurations(ServiceClientConfig("dra-swap", "dra-swap-controller"))
	mutating.TypeMeta.APIVersion, mutating.TypeMeta.Kind = admissionregistrationv1.SchemeGroupVersion.String(), "MutatingWebhookConfiguration"
	validating.TypeMeta.APIVersion, validating.TypeMeta.Kind = admissionregistrationv1.SchemeGroupVersion.String(), "ValidatingWebhookConfiguration"
	var want bytes.Buffer
	want.WriteString("# Generated from pkg/webhook.Configurations by `UPDATE_MANIFESTS=1 go test ./pkg/webhook/`; do not edit.\n")
	want.WriteString("# The controller injects caBundle (or cert-manager's CA injector does, with --tls-cert-dir).\n")
	for _, obj := range []any{mutating, validating} {
		data, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		want.WriteString("---\n")
		want.Write(bytes.ReplaceAll(data, []byte("  creationTimestamp: null\n"), nil))
	}
	if os.Getenv("UPDATE_MANIFESTS") == "1" {
		if err := os.WriteFile(staticManifest, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(staticManifest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%s is out of date with Configurations; run UPDATE_MANIFESTS=1 go test ./pkg/webhook/", staticManifest)
	}
}
