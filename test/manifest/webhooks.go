package manifest

import (
	"errors"
	"fmt"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// WebhookConfiguration returns the one ValidatingWebhookConfiguration of
// a rendered chart pointed at a controller outside the cluster: each
// webhook's Service reference becomes a URL under base (https://host:port)
// with the same path, and caBundle is dropped (the controller injects its
// own). Rules, match conditions, failure policies and timeouts are the
// chart's, so tests exercise what an admin installs, not a restatement.
func WebhookConfiguration(manifest, base string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	objs, err := Decode(manifest)
	if err != nil {
		return nil, err
	}
	var found *admissionregistrationv1.ValidatingWebhookConfiguration
	for _, u := range objs {
		if u.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("the manifest holds more than one ValidatingWebhookConfiguration (%s, %s)", found.Name, u.GetName())
		}
		found = &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, found, true); err != nil {
			return nil, fmt.Errorf("ValidatingWebhookConfiguration %s: %w", u.GetName(), err)
		}
	}
	if found == nil {
		return nil, errors.New("the manifest holds no ValidatingWebhookConfiguration")
	}
	for i := range found.Webhooks {
		w := &found.Webhooks[i]
		svc := w.ClientConfig.Service
		if svc == nil || svc.Path == nil {
			return nil, fmt.Errorf("webhook %s: no Service path to rewrite in its clientConfig", w.Name)
		}
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + *svc.Path)}
	}
	return found, nil
}

// StaticWebhookConfiguration is WebhookConfiguration of the chart's
// default rendering, deployments/static/dra-driver-swap.yaml (which the
// integration tests keep equal to `helm template` output), at path.
func StaticWebhookConfiguration(path, base string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := WebhookConfiguration(string(data), base)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
