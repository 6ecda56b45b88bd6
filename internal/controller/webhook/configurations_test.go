package webhook

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// staticManifest is the chart rendered with its default values (release
// dra-driver-swap in namespace dra-swap) by `make manifests`; the
// integration tests check that it is the chart's current output.
var staticManifest = filepath.Join("..", "..", "..", "deployments", "static", "dra-driver-swap.yaml")

// TestChartWebhooksMatchConfigurations keeps the chart's webhook
// configurations and Configurations, which the integration tests and the
// controller's documentation rely on, the same: names, rules, match
// conditions, failure policies, timeouts and paths.
func TestChartWebhooksMatchConfigurations(t *testing.T) {
	data, err := os.ReadFile(staticManifest)
	if err != nil {
		t.Fatal(err)
	}
	var gotMutating *admissionregistrationv1.MutatingWebhookConfiguration
	var gotValidating *admissionregistrationv1.ValidatingWebhookConfiguration
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s: %v", staticManifest, err)
		}
		switch head.Kind {
		case "MutatingWebhookConfiguration":
			gotMutating = &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, gotMutating); err != nil {
				t.Fatal(err)
			}
		case "ValidatingWebhookConfiguration":
			gotValidating = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, gotValidating); err != nil {
				t.Fatal(err)
			}
		}
	}
	if gotValidating == nil {
		t.Fatalf("%s lacks the validating webhook configuration", staticManifest)
	}
	wantValidating := Configurations(ServiceClientConfig("dra-swap", "dra-driver-swap-controller"), DefaultOptions())
	// The driver installs no mutating webhook: its labelers patch pods
	// with the controller's identity, never an object under review.
	if gotMutating != nil {
		t.Errorf("the chart renders a MutatingWebhookConfiguration: %v", gotMutating)
	}
	for _, c := range []struct {
		kind      string
		want, got any
	}{
		{"ValidatingWebhookConfiguration", wantValidating.Webhooks, gotValidating.Webhooks},
	} {
		want, err := yaml.Marshal(c.want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := yaml.Marshal(c.got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("the chart's %s webhooks differ from Configurations; Go:\n%s\nchart:\n%s", c.kind, want, got)
		}
	}
}

// TestRequestsSwapClass: the classes are quoted and listed the way the
// chart renders them (toJson).
func TestRequestsSwapClass(t *testing.T) {
	got := requestsSwapClass([]string{"dra.swap", "dra.swap-fast"})
	if !strings.Contains(got, `r.exactly.deviceClassName in ["dra.swap","dra.swap-fast"]`) {
		t.Errorf("expression = %s", got)
	}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"swap-labels": "enabled"}}
	v := Configurations(URLClientConfig("https://x"), Options{SwapClasses: []string{"dra.swap"}, BindingLabels: true, NamespaceSelector: selector})
	last := v.Webhooks[len(v.Webhooks)-1]
	if last.Name != BindingWebhook || last.NamespaceSelector != selector || *last.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun {
		t.Errorf("with BindingLabels: %+v", last)
	}
}
