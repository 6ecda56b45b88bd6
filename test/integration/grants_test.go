package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// rbacGrant is one thing a rules review says an account may do: a verb on a
// resource (with its subresource, "resourceclaims/status") of an API group
// ("" is the core group), by any name or by one, or a verb on a
// non-resource URL. Its String is the allowlists' notation: "verb
// resource.group name", group and name left out when empty; "verb /url".
type rbacGrant struct {
	verb, group, resource, name, url string
}

func (g rbacGrant) String() string {
	if g.url != "" {
		return g.verb + " " + g.url
	}
	s := g.verb + " " + g.resource
	if g.group != "" {
		s += "." + g.group
	}
	if g.name != "" {
		s += " " + g.name
	}
	return s
}

// grants expands allowlist entries, "verb,verb resource[.group] [name]" or
// "verb /url", into grants' strings.
func grants(t *testing.T, entries ...string) sets.Set[string] {
	t.Helper()
	out := sets.New[string]()
	for _, e := range entries {
		f := strings.Fields(e)
		if len(f) < 2 || len(f) > 3 {
			t.Fatalf("allowlist entry %q: want \"verbs resource[.group] [name]\"", e)
		}
		for _, verb := range strings.Split(f[0], ",") {
			g := rbacGrant{verb: verb}
			if strings.HasPrefix(f[1], "/") {
				g.url = f[1]
			} else {
				g.resource, g.group, _ = strings.Cut(f[1], ".")
			}
			if len(f) == 3 {
				g.name = f[2]
			}
			out.Insert(g.String())
		}
	}
	return out
}

// rulesReview is everything the client's account may do in namespace (the
// rules of its RoleBindings there and of its ClusterRoleBindings), from a
// SelfSubjectRulesReview with its own token: the API server's authorizer
// resolves the account's rules, which the test does not restate. A review
// the authorizer cannot complete fails the test.
func rulesReview(t *testing.T, c kubernetes.Interface, namespace string) sets.Set[string] {
	t.Helper()
	review, err := c.AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(), &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("rules review in %s: %v", namespace, err)
	}
	if review.Status.Incomplete {
		t.Fatalf("rules review in %s is incomplete (%s): it cannot prove what the account may not do", namespace, review.Status.EvaluationError)
	}
	out := sets.New[string]()
	for _, r := range review.Status.ResourceRules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, verb := range r.Verbs {
			for _, group := range r.APIGroups {
				for _, resource := range r.Resources {
					for _, name := range names {
						out.Insert(rbacGrant{verb: verb, group: group, resource: resource, name: name}.String())
					}
				}
			}
		}
	}
	for _, r := range review.Status.NonResourceRules {
		for _, verb := range r.Verbs {
			for _, url := range r.NonResourceURLs {
				out.Insert(rbacGrant{verb: verb, url: url}.String())
			}
		}
	}
	return out
}

// everyAccount is what Kubernetes itself grants every ServiceAccount, the
// chart's or not: every authenticated user's (the bootstrap ClusterRoles
// system:basic-user, system:discovery, system:public-info-viewer) and
// every ServiceAccount's (system:service-account-issuer-discovery,
// system:cluster-trust-bundle-discovery).
var everyAccount = []string{
	"create selfsubjectaccessreviews.authorization.k8s.io",
	"create selfsubjectrulesreviews.authorization.k8s.io",
	"create selfsubjectreviews.authentication.k8s.io",
	"get /api", "get /api/*", "get /apis", "get /apis/*", "get /openapi", "get /openapi/*",
	"get /healthz", "get /livez", "get /readyz", "get /version", "get /version/",
	"get /.well-known/openid-configuration", "get /.well-known/openid-configuration/", "get /openid/v1/jwks", "get /openid/v1/jwks/",
	"get,list,watch clustertrustbundles.certificates.k8s.io",
}

// TestComponentGrants proves, with each account's real pod-bound token
// and the chart's default RBAC, everything a stolen token is authorized to
// do: each account's whole SelfSubjectRulesReview, in the chart's
// namespace, in a tenant's and in every other namespace that holds a
// RoleBinding (RBAC grants nothing elsewhere that a ClusterRoleBinding,
// seen in every review, does not), equals an allowlist written here, the
// one docs/security.md gives. A grant the chart adds fails the test until
// it is listed here and there, and every "cannot" of docs/security.md
// follows from what is not listed. What RBAC allows but a policy narrows
// (slices, claim status, labels, the webhook configuration, the Secret)
// is proven by TestAdmissionPolicies, TestPluginClaimStatusPolicy,
// TestControllerUpdatesOnlyCABundle and the Secret case below.
func TestComponentGrants(t *testing.T) {
	t.Parallel()
	s := framework.StartAPIServer(t)
	ctx := context.Background()
	installChartPolicies(t, s)
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	plugin := podTokenClient(t, s, "kubeletplugin-a", pluginSA, "node-a")
	controller := podTokenClient(t, s, "controller-a", controllerSA, "node-a")
	accounts := []struct {
		name   string
		client kubernetes.Interface
		// everywhere holds in every namespace (ClusterRoleBindings),
		// inChart in the chart's namespace only (RoleBindings there).
		everywhere, inChart []string
	}{{
		name:   "kubelet plugin",
		client: plugin,
		everywhere: []string{
			// Narrowed by the -own-node policy: dra.swap slices of its node's pool.
			"get,list,watch,create,update,delete resourceslices.resource.k8s.io",
			"get resourceclaims.resource.k8s.io",
			// Narrowed by the -claim-status policy, and by the API server
			// (DRAResourceClaimGranularStatusAuthorization) to its own
			// driver's entries on claims allocated on its token's node.
			"patch resourceclaims/status.resource.k8s.io",
			"associated-node:patch resourceclaims/driver.resource.k8s.io dra.swap",
			"get,list,watch nodes",
			"list,watch pods",
			"create,patch events.events.k8s.io",
		},
	}, {
		name:   "controller",
		client: controller,
		everywhere: []string{
			// Narrowed by the -labels-only policy: its own label keys.
			"get,list,watch,patch pods",
			"get,list,watch,patch nodes",
			"get,list,watch namespaces",
			"get,list,watch resourceslices.resource.k8s.io",
			"get,list,watch resourceclaims.resource.k8s.io",
			"get,list,watch deviceclasses.resource.k8s.io",
			"create,patch events.events.k8s.io",
			// Narrowed by the -ca-bundle-only policy.
			"get,update validatingwebhookconfigurations.admissionregistration.k8s.io dra-driver-swap",
		},
		inChart: []string{
			"get deployments.apps dra-driver-swap-controller",
			// RBAC cannot confine a create to a name: any Lease in the
			// chart's namespace.
			"create leases.coordination.k8s.io",
			"get,update leases.coordination.k8s.io dra-driver-swap-controller",
			// Narrowed by the -own-secret-only policy.
			"create secrets",
			"get,update secrets dra-driver-swap-controller-webhook-tls",
			"create,patch events",
		},
	}, {
		name:   "uninstall hook",
		client: podTokenClient(t, s, "label-cleanup", labelCleanupSA, "node-a"),
		everywhere: []string{
			"get,list,patch nodes",
		},
	}, {
		// helm test's pod (its RBAC exists while the test runs).
		// Narrowed by the -test-probes-only policy: it creates and
		// deletes only probe pods.
		name:   "helm test",
		client: podTokenClient(t, s, "helm-test", helmTestName, "node-a"),
		everywhere: []string{
			"list resourceslices.resource.k8s.io",
			"list nodes",
		},
		inChart: []string{
			"create,list,delete pods",
			"list events",
		},
	}, {
		// The namespace's default account: the chart grants it nothing.
		name:   "chart namespace's default account",
		client: podTokenClient(t, s, "default-a", "default", "node-a"),
	}}
	// Every namespace a RoleBinding can grant in.
	namespaces := sets.New(chartNamespace, tenant)
	bindings, err := s.Client.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings.Items {
		namespaces.Insert(b.Namespace)
	}
	for _, a := range accounts {
		t.Run(a.name, func(t *testing.T) {
			for _, ns := range sets.List(namespaces) {
				want := grants(t, append(append([]string{}, everyAccount...), a.everywhere...)...)
				if ns == chartNamespace {
					want = want.Union(grants(t, a.inChart...))
				}
				got := rulesReview(t, a.client, ns)
				for _, g := range sets.List(got.Difference(want)) {
					t.Errorf("in namespace %s the %s's token may %s, which the allowlist (and docs/security.md) does not list", ns, a.name, g)
				}
				for _, g := range sets.List(want.Difference(got)) {
					t.Errorf("in namespace %s the %s's token may not %s, which the allowlist lists", ns, a.name, g)
				}
			}
			if !t.Failed() {
				t.Logf("the %s's grants in %v: exactly its allowlist", a.name, sets.List(namespaces))
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
