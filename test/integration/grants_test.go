package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// access is one request a component's token is or is not authorized for.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.group != "" {
		r += "." + a.group
	}
	where := "cluster-wide"
	if a.namespace != "" {
		where = "in " + a.namespace
	}
	if a.name != "" {
		r += " " + a.name
	}
	return fmt.Sprintf("%s %s %s", a.verb, r, where)
}

// allowed asks the API server's authorizer, with the component's own
// token, whether it may make the request (SelfSubjectAccessReview: the
// same RBAC decision the request itself would get).
func allowed(t *testing.T, c kubernetes.Interface, a access) bool {
	t.Helper()
	review, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("access review of %s: %v", a, err)
	}
	return review.Status.Allowed
}

// TestComponentGrants proves, with each component's real pod-bound token
// and the chart's default RBAC, what a stolen token is and is not
// authorized to do (docs/security.md lists the same). What RBAC allows
// but a policy narrows (slices, claim status, labels, the webhook
// configuration, the Secret) is proven by TestAdmissionPolicies,
// TestPluginClaimStatusPolicy, TestControllerUpdatesOnlyCABundle and the
// Secret case below.
func TestComponentGrants(t *testing.T) {
	s := framework.StartAPIServer(t)
	ctx := context.Background()
	installChartPolicies(t, s)
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	plugin := podTokenClient(t, s, "kubeletplugin-a", pluginSA, "node-a")
	controller := podTokenClient(t, s, "controller-a", controllerSA, "node-a")
	const (
		resource  = "resource.k8s.io"
		admission = "admissionregistration.k8s.io"
		rbac      = "rbac.authorization.k8s.io"
		tenant    = "tenant"
	)
	// Shared by both: nothing that reads secrets or config, runs code in
	// pods, mints tokens, changes RBAC or admission, or creates workloads.
	neither := []access{
		{verb: "get", resource: "secrets", namespace: "kube-system"},
		{verb: "list", resource: "secrets"},
		{verb: "list", resource: "secrets", namespace: chartNamespace},
		{verb: "get", resource: "secrets", namespace: chartNamespace, name: "other"},
		{verb: "get", resource: "configmaps", namespace: tenant},
		{verb: "create", resource: "pods", namespace: tenant},
		{verb: "delete", resource: "pods", namespace: tenant},
		{verb: "update", resource: "pods", namespace: tenant},
		{verb: "create", resource: "pods", subresource: "exec", namespace: tenant},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: tenant},
		{verb: "create", resource: "pods", subresource: "binding", namespace: tenant},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: chartNamespace, name: pluginSA},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: chartNamespace, name: controllerSA},
		{verb: "update", resource: "nodes", name: "node-a"},
		{verb: "delete", resource: "nodes", name: "node-a"},
		{verb: "patch", resource: "nodes", subresource: "status", name: "node-a"},
		{verb: "create", group: resource, resource: "resourceclaims", namespace: tenant},
		{verb: "update", group: resource, resource: "resourceclaims", namespace: tenant},
		{verb: "delete", group: resource, resource: "resourceclaims", namespace: tenant},
		{verb: "update", group: resource, resource: "resourceclaims", subresource: "status", namespace: tenant},
		{verb: "create", group: resource, resource: "deviceclasses"},
		{verb: "update", group: resource, resource: "deviceclasses", name: "dra.swap"},
		{verb: "deletecollection", group: resource, resource: "resourceslices"},
		{verb: "create", group: admission, resource: "validatingwebhookconfigurations"},
		{verb: "update", group: admission, resource: "validatingwebhookconfigurations", name: "someone-elses"},
		{verb: "delete", group: admission, resource: "validatingwebhookconfigurations", name: "dra-driver-swap"},
		{verb: "get", group: admission, resource: "mutatingwebhookconfigurations", name: "dra-driver-swap"},
		{verb: "update", group: admission, resource: "mutatingwebhookconfigurations", name: "dra-driver-swap"},
		{verb: "update", group: admission, resource: "validatingadmissionpolicies", name: "dra-driver-swap-kubeletplugin-own-node"},
		{verb: "delete", group: admission, resource: "validatingadmissionpolicies", name: "dra-driver-swap-controller-labels-only"},
		{verb: "delete", group: admission, resource: "validatingadmissionpolicybindings", name: "dra-driver-swap-controller-labels-only"},
		{verb: "create", group: rbac, resource: "clusterrolebindings"},
		{verb: "escalate", group: rbac, resource: "clusterroles"},
		{verb: "bind", group: rbac, resource: "clusterroles"},
		{verb: "impersonate", resource: "serviceaccounts"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kube-scheduler"},
		{verb: "create", group: "certificates.k8s.io", resource: "certificatesigningrequests"},
	}
	cases := []struct {
		component       string
		client          kubernetes.Interface
		allow, disallow []access
	}{{
		component: "kubelet plugin",
		client:    plugin,
		allow: []access{
			// Narrowed by the -own-node policy: dra.swap slices of its node's pool.
			{verb: "create", group: resource, resource: "resourceslices"},
			{verb: "update", group: resource, resource: "resourceslices", name: "any"},
			{verb: "delete", group: resource, resource: "resourceslices", name: "any"},
			{verb: "get", group: resource, resource: "resourceclaims", namespace: tenant, name: "any"},
			// Narrowed by the -claim-status policy: its own entries on its node's claims.
			{verb: "patch", group: resource, resource: "resourceclaims", subresource: "status", namespace: tenant, name: "any"},
			{verb: "list", resource: "pods"},
			{verb: "get", resource: "nodes", name: "node-a"},
			{verb: "create", group: "events.k8s.io", resource: "events", namespace: tenant},
		},
		disallow: append([]access{
			{verb: "get", resource: "pods", namespace: tenant, name: "any"},
			{verb: "patch", resource: "pods", namespace: tenant, name: "any"},
			{verb: "patch", resource: "nodes", name: "node-a"},
			{verb: "list", group: resource, resource: "resourceclaims"},
			{verb: "watch", group: resource, resource: "resourceclaims"},
			{verb: "create", resource: "secrets", namespace: chartNamespace},
			{verb: "get", resource: "secrets", namespace: chartNamespace, name: "dra-driver-swap-controller-webhook-tls"},
			{verb: "get", group: admission, resource: "validatingwebhookconfigurations", name: "dra-driver-swap"},
			{verb: "update", group: admission, resource: "validatingwebhookconfigurations", name: "dra-driver-swap"},
			{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: chartNamespace},
		}, neither...),
	}, {
		component: "controller",
		client:    controller,
		allow: []access{
			// Narrowed by the -labels-only policy: its own label keys.
			{verb: "patch", resource: "pods", namespace: tenant, name: "any"},
			{verb: "patch", resource: "nodes", name: "node-a"},
			{verb: "list", resource: "pods"},
			{verb: "list", group: resource, resource: "resourceclaims"},
			{verb: "list", group: resource, resource: "resourceslices"},
			// Narrowed by the -ca-bundle-only policy.
			{verb: "update", group: admission, resource: "validatingwebhookconfigurations", name: "dra-driver-swap"},
			// Narrowed by the -own-secret-only policy.
			{verb: "create", resource: "secrets", namespace: chartNamespace},
			{verb: "get", resource: "secrets", namespace: chartNamespace, name: "dra-driver-swap-controller-webhook-tls"},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: chartNamespace, name: "dra-driver-swap-controller"},
		},
		disallow: append([]access{
			{verb: "create", group: resource, resource: "resourceslices"},
			{verb: "update", group: resource, resource: "resourceslices", name: "any"},
			{verb: "delete", group: resource, resource: "resourceslices", name: "any"},
			{verb: "patch", group: resource, resource: "resourceclaims", subresource: "status", namespace: tenant, name: "any"},
			{verb: "create", resource: "secrets", namespace: tenant},
			{verb: "delete", resource: "secrets", namespace: chartNamespace, name: "dra-driver-swap-controller-webhook-tls"},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: chartNamespace, name: "other"},
		}, neither...),
	}}
	for _, tc := range cases {
		t.Run(tc.component, func(t *testing.T) {
			for _, a := range tc.allow {
				if !allowed(t, tc.client, a) {
					t.Errorf("the %s's token may not %s, which it needs", tc.component, a)
				}
			}
			for _, a := range tc.disallow {
				if allowed(t, tc.client, a) {
					t.Errorf("the %s's token may %s", tc.component, a)
				}
			}
		})
	}

	// The same authorizer answers the requests themselves: one of each.
	if _, err := plugin.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the plugin listing kube-system's Secrets: got %v, want forbidden", err)
	}
	if _, err := controller.CoreV1().Pods(chartNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "escape"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}},
	}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the controller creating a pod: got %v, want forbidden", err)
	}

	t.Run("the controller creates only its webhook Secret", func(t *testing.T) {
		secrets := controller.CoreV1().Secrets(chartNamespace)
		token := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "plugin-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: pluginSA}},
			Type:       corev1.SecretTypeServiceAccountToken,
		}
		// The policy takes a moment to load: wait until it refuses.
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err = secrets.Create(ctx, token, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil, nil
		})
		refused(t, "the controller creating a service-account-token Secret for the plugin", err, "may create only its webhook certificate Secret")
		_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dra-driver-swap-controller-webhook-tls"}, Type: corev1.SecretTypeOpaque}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, "the controller creating its Secret's name as an Opaque Secret", err, "may create only its webhook certificate Secret")
		tls := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dra-driver-swap-controller-webhook-tls"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: nil}}
		if _, err := secrets.Create(ctx, tls, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("the controller creating its webhook certificate Secret: %v", err)
		}
	})
}
