package manifest

import (
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
	tests := []struct {
		name     string
		in       string
		wantObjs int
		wantErr  string
	}{
		{name: "empty", in: "", wantObjs: 0},
		{name: "empty documents skipped", in: "---\n" + cm + "---\n---\n" + cm, wantObjs: 2},
		{name: "at the bound", in: strings.Repeat("---\n"+cm, MaxObjects), wantObjs: MaxObjects},
		{name: "above the bound", in: strings.Repeat("---\n"+cm, MaxObjects+1), wantErr: "more than 1000 objects"},
		{name: "bad document", in: cm + "---\nkind: [\n", wantErr: "decode manifest document 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := Decode(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Decode() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != tt.wantObjs {
				t.Errorf("Decode() = %d objects, want %d", len(objs), tt.wantObjs)
			}
		})
	}
}

// TestStaticWebhookConfiguration: the chart's default webhooks, pointed at
// a URL, keep their paths, names and policies and lose the Service.
func TestStaticWebhookConfiguration(t *testing.T) {
	c, err := StaticWebhookConfiguration("../../deployments/static/dra-driver-swap.yaml", "https://localhost:1234")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "dra-driver-swap" {
		t.Errorf("name %q", c.Name)
	}
	want := map[string]string{
		"config.dra.swap":      "https://localhost:1234/validate-swap-config",
		"requests.dra.swap":    "https://localhost:1234/validate-swap-config",
		"reservation.dra.swap": "https://localhost:1234/label-reserved-pods",
	}
	if len(c.Webhooks) != len(want) {
		t.Errorf("%d webhooks, want %d", len(c.Webhooks), len(want))
	}
	for _, w := range c.Webhooks {
		if w.ClientConfig.Service != nil || w.ClientConfig.CABundle != nil || w.ClientConfig.URL == nil || *w.ClientConfig.URL != want[w.Name] {
			t.Errorf("webhook %s: clientConfig %+v, want URL %s only", w.Name, w.ClientConfig, want[w.Name])
		}
		if len(w.MatchConditions) == 0 || w.FailurePolicy == nil || w.TimeoutSeconds == nil {
			t.Errorf("webhook %s lost the chart's match conditions or policies: %+v", w.Name, w)
		}
	}
}

func TestWebhookConfigurationErrors(t *testing.T) {
	vwc := func(name, client string) string {
		return "---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: " + name +
			"\nwebhooks:\n- name: a.example.com\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  clientConfig:\n" + client + "\n"
	}
	svc := "    service: {name: s, namespace: ns, path: /p}"
	for _, tt := range []struct{ name, in, wantErr string }{
		{"none", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n", "no ValidatingWebhookConfiguration"},
		{"two", vwc("a", svc) + vwc("b", svc), "more than one"},
		{"no service", vwc("a", "    url: https://x/p"), "no Service path"},
		{"unknown field", vwc("a", svc+"\n    bogus: 1"), "unknown field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := WebhookConfiguration(tt.in, "https://h")
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
