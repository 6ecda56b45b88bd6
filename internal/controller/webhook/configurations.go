package webhook

import (
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
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

// Options say which webhooks the driver installs.
type Options struct {
	// SwapClasses are the DeviceClasses of the driver (the chart's): only
	// claims and templates that request one of them get request warnings.
	SwapClasses []string
	// BindingLabels installs the pods/binding labeler. Pods with a swap
	// claim are labeled when the scheduler reserves their claim, before it
	// binds them (reservation.dra.swap); the binding labeler is needed only
	// when the controller labels other pods too (--pod-selection all or
	// namespaces).
	BindingLabels bool
	// NamespaceSelector, with BindingLabels, limits the binding labeler to
	// the bindings of these namespaces (--pod-selection namespaces);
	// nil: every binding (--pod-selection all).
	NamespaceSelector *metav1.LabelSelector
}

// DefaultOptions are the chart's defaults.
func DefaultOptions() Options {
	return Options{SwapClasses: []string{v1alpha1.DriverName}}
}

// Webhook names.
const (
	BindingWebhook     = "binding.dra.swap"
	ConfigWebhook      = "config.dra.swap"
	RequestsWebhook    = "requests.dra.swap"
	ReservationWebhook = "reservation.dra.swap"
)

// mentionsDriver matches objects whose opaque config names the driver.
func mentionsDriver(driver string) string {
	return fmt.Sprintf(`(request.resource.resource == "deviceclasses" && has(object.spec.config) && object.spec.config.exists(c, has(c.opaque) && c.opaque.driver == %[1]q)) ||
(request.resource.resource == "resourceclaims" && has(object.spec.devices) && has(object.spec.devices.config) && object.spec.devices.config.exists(c, has(c.opaque) && c.opaque.driver == %[1]q)) ||
(request.resource.resource == "resourceclaimtemplates" && has(object.spec.spec.devices) && has(object.spec.spec.devices.config) && object.spec.spec.devices.config.exists(c, has(c.opaque) && c.opaque.driver == %[1]q))`, driver)
}

// requestsSwapClass matches claims and templates with a request of one of
// the classes.
func requestsSwapClass(classes []string) string {
	quoted := make([]string, len(classes))
	for i, c := range classes {
		quoted[i] = strconv.Quote(c)
	}
	list := "[" + strings.Join(quoted, ",") + "]"
	requests := func(spec string) string {
		return fmt.Sprintf(`has(%[1]s.devices) && has(%[1]s.devices.requests) && %[1]s.devices.requests.exists(r, `+
			`(has(r.exactly) && r.exactly.deviceClassName in %[2]s) || (has(r.firstAvailable) && r.firstAvailable.exists(s, s.deviceClassName in %[2]s)))`, spec, list)
	}
	return fmt.Sprintf("(request.resource.resource == \"resourceclaims\" && %s) ||\n(request.resource.resource == \"resourceclaimtemplates\" && %s)",
		requests("object.spec"), requests("object.spec.spec"))
}

// newlyReservesSwap matches a claim status update that reserves a claim
// with an allocation of the driver for a pod it was not reserved for before.
func newlyReservesSwap(driver string) string {
	return fmt.Sprintf(`has(object.status.allocation) && has(object.status.allocation.devices) && has(object.status.allocation.devices.results) &&
object.status.allocation.devices.results.exists(r, r.driver == %q) && has(object.status.reservedFor) &&
object.status.reservedFor.exists(c, c.resource == "pods" && !(has(oldObject.status.reservedFor) && oldObject.status.reservedFor.exists(o, o.uid == c.uid)))`, driver)
}

// Configurations is the webhook configuration the driver installs (the
// controller fills in caBundle when it manages its own certificate). Each
// webhook's rules and match conditions keep every object that does not
// concern the driver away from it, so that a controller that is down or
// hangs costs other workloads nothing:
//
//   - config.dra.swap: ResourceClaims (CREATE: their spec is immutable),
//     ResourceClaimTemplates and DeviceClasses (CREATE, UPDATE) whose opaque
//     configuration names the driver; failurePolicy Fail, so invalid
//     SwapConfig is never stored. Updates of claims (finalizers, status)
//     and deletions never reach it.
//   - requests.dra.swap: claims and templates that request one of the
//     driver's DeviceClasses (without its config), failurePolicy Ignore,
//     for the warnings about swap requests.
//   - reservation.dra.swap: the claim status update in which the scheduler
//     reserves a dra.swap claim for a pod, just before it binds the pod;
//     the handler labels the pod then (a side effect, skipped on dry run),
//     so the binding write carries the labels. failurePolicy Ignore: the
//     reconciler labels pods the webhook missed.
//   - binding.dra.swap (only with Options.BindingLabels): pods/binding of
//     the selected namespaces (all, or Options.NamespaceSelector), for pods
//     without a swap claim. Like the reservation webhook it labels the pod
//     with the controller's own patch (a side effect, skipped on dry run)
//     and never changes the Binding, so every label the controller sets is
//     a pod write by its identity, which the chart's labels-only admission
//     policy checks. failurePolicy Ignore.
func Configurations(client ClientConfig, opts Options) *admissionregistrationv1.ValidatingWebhookConfiguration {
	rule := func(ops []admissionregistrationv1.OperationType, resources ...string) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"v1"}, Resources: resources,
				Scope: ptr.To(admissionregistrationv1.AllScopes),
			},
		}
	}
	create := []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
	createUpdate := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	update := []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{
				Name:                    ConfigWebhook,
				ClientConfig:            client(ConfigPath),
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				TimeoutSeconds:          ptr.To[int32](5),
				Rules:                   []admissionregistrationv1.RuleWithOperations{rule(create, "resourceclaims"), rule(createUpdate, "resourceclaimtemplates", "deviceclasses")},
				MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "names-dra-swap-config", Expression: mentionsDriver(v1alpha1.DriverName)}},
			},
			{
				Name:                    RequestsWebhook,
				ClientConfig:            client(ConfigPath),
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
				TimeoutSeconds:          ptr.To[int32](3),
				Rules:                   []admissionregistrationv1.RuleWithOperations{rule(create, "resourceclaims"), rule(createUpdate, "resourceclaimtemplates")},
				MatchConditions: []admissionregistrationv1.MatchCondition{
					{Name: "no-dra-swap-config", Expression: "!(" + mentionsDriver(v1alpha1.DriverName) + ")"},
					{Name: "requests-a-swap-class", Expression: requestsSwapClass(opts.SwapClasses)},
				},
			},
			{
				Name:                    ReservationWebhook,
				ClientConfig:            client(ReservationPath),
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
				FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
				TimeoutSeconds:          ptr.To[int32](3),
				Rules:                   []admissionregistrationv1.RuleWithOperations{rule(update, "resourceclaims/status")},
				MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "reserves-a-swap-claim", Expression: newlyReservesSwap(v1alpha1.DriverName)}},
			},
		},
	}
	if opts.BindingLabels {
		validating.Webhooks = append(validating.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name:                    BindingWebhook,
			ClientConfig:            client(BindingPath),
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			TimeoutSeconds:          ptr.To[int32](3),
			NamespaceSelector:       opts.NamespaceSelector,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: create,
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
		})
	}
	return validating
}
