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
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// staticManifest is the chart rendered with its default values (release
// dra-driver-swap in namespace dra-swap) by `make manifests`; the
// integration tests check that it is the chart's current output.
var staticManifest = filepath.Join("..", "..", "deployments", "static", "dra-driver-swap.yaml")

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
	wantMutating, wantValidating := Configurations(ServiceClientConfig("dra-swap", "dra-driver-swap-controller"), DefaultOptions())
	// With its defaults (pods with swap claims get labels), the chart
	// installs no mutating webhook: no binding calls out to the controller.
	if wantMutating != nil || gotMutating != nil {
		t.Errorf("mutating configurations: Go %v, chart %v; want none by default", wantMutating, gotMutating)
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
	m, _ := Configurations(URLClientConfig("https://x"), Options{SwapClasses: []string{"dra.swap"}, BindingLabels: true})
	if m == nil || len(m.Webhooks) != 1 || m.Webhooks[0].Name != BindingWebhook {
		t.Errorf("with BindingLabels: mutating = %+v", m)
	}
}
