package webhook

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ConfigurationName is the name of both webhook configurations.
const ConfigurationName = "dra-swap"

// ClientConfig says how the API server reaches a webhook path: through a
// Service (in a cluster) or a URL (the local test cluster).
type ClientConfig func(path string) admissionregistrationv1.WebhookClientConfig

// ServiceClientConfig reaches the webhooks through a Service on port 443.
func ServiceClientConfig(namespace, name string) ClientConfig {
	return func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: namespace, Name: name, Path: ptr.To(path), Port: ptr.To[int32](443),
		}}
	}
}

// URLClientConfig reaches the webhooks at base (https://host:port).
func URLClientConfig(base string) ClientConfig {
	return func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + path)}
	}
}

// Configurations are the webhook configurations the driver installs (the
// controller fills in caBundle when it manages its own certificate):
//
//   - binding.dra.swap: pods/binding, failurePolicy Ignore, because a
//     binding must never wait for the driver; the reconciler labels pods
//     the webhook missed.
//   - config.dra.swap: ResourceClaims, ResourceClaimTemplates and
//     DeviceClasses whose opaque configuration names the driver,
//     failurePolicy Fail, so invalid SwapConfig is never stored. Match
//     conditions keep every other object (other drivers' claims) free of
//     the dependency on this webhook.
//   - requests.dra.swap: all ResourceClaims and templates, failurePolicy
//     Ignore, for the warnings about swap requests.
func Configurations(client ClientConfig) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "binding.dra.swap",
			ClientConfig:            client(BindingPath),
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             none,
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			TimeoutSeconds:          ptr.To[int32](3),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
		}},
	}
	rule := func(resources ...string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"v1"}, Resources: resources,
				Scope: ptr.To(admissionregistrationv1.AllScopes),
			},
		}}
	}
	const mentionsDriver = `(request.resource.resource == "deviceclasses" && has(object.spec.config) && object.spec.config.exists(c, has(c.opaque) && c.opaque.driver == "dra.swap")) ||
(request.resource.resource == "resourceclaims" && has(object.spec.devices) && has(object.spec.devices.config) && object.spec.devices.config.exists(c, has(c.opaque) && c.opaque.driver == "dra.swap")) ||
(request.resource.resource == "resourceclaimtemplates" && has(object.spec.spec.devices) && has(object.spec.spec.devices.config) && object.spec.spec.devices.config.exists(c, has(c.opaque) && c.opaque.driver == "dra.swap"))`
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{
				Name:                    "config.dra.swap",
				ClientConfig:            client(ConfigPath),
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             none,
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				TimeoutSeconds:          ptr.To[int32](5),
				Rules:                   rule("resourceclaims", "resourceclaimtemplates", "deviceclasses"),
				MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "names-dra-swap-config", Expression: mentionsDriver}},
			},
			{
				Name:                    "requests.dra.swap",
				ClientConfig:            client(ConfigPath),
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             none,
				FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
				TimeoutSeconds:          ptr.To[int32](3),
				Rules:                   rule("resourceclaims", "resourceclaimtemplates"),
				MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "no-dra-swap-config", Expression: "!(" + mentionsDriver + ")"}},
			},
		},
	}
	return mutating, validating
}
