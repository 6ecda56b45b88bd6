package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

const (
	chartNamespace = "dra-swap"
	pluginSA       = "dra-driver-swap-kubeletplugin"
	controllerSA   = "dra-driver-swap-controller"
	// chartWebhookConfiguration is the chart's ValidatingWebhookConfiguration.
	chartWebhookConfiguration = "dra-driver-swap"
	reservationWebhook        = "reservation.dra.swap"
)

// chartWebhooks is the chart's ValidatingWebhookConfiguration, rendered
// with helmArgs (none: its default rendering, deployments/static) and
// pointed at the controller at base (https://host:port): the tests call
// the webhooks an admin installs, rules and match conditions included.
func chartWebhooks(t *testing.T, base string, helmArgs ...string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	if len(helmArgs) == 0 {
		c, err := manifest.StaticWebhookConfiguration(staticManifest, base)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	out, err := runHelm(t, append([]string{"template", "dra-driver-swap", chartDir, "--namespace", chartNamespace, "--show-only", "templates/webhooks.yaml"}, helmArgs...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v", helmArgs, err)
	}
	c, err := manifest.WebhookConfiguration(out, base)
	if err != nil {
		t.Fatalf("helm template %v: %v", helmArgs, err)
	}
	return c
}

// installChartPolicies applies what of the chart's default rendering
// decides who may write what: its ServiceAccounts, RBAC and
// ValidatingAdmissionPolicies (not the workloads, which nothing runs here,
// nor the webhooks, which no controller serves).
func installChartPolicies(t *testing.T, s *framework.APIServer) {
	t.Helper()
	createChartNamespace(t, s)
	applyChart(t, s, policyKinds())
}

// policyKinds are the kinds of the chart that decide who may write what.
func policyKinds() map[string]bool {
	return map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
}

// createChartNamespace creates the release's namespace and its default
// ServiceAccount (no controller-manager runs).
func createChartNamespace(t *testing.T, s *framework.APIServer) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.CoreV1().ServiceAccounts(chartNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// applyChart server-side applies the objects of kinds of the chart
// rendered with helmArgs (release dra-driver-swap in chartNamespace).
func applyChart(t *testing.T, s *framework.APIServer, kinds map[string]bool, helmArgs ...string) {
	t.Helper()
	ctx := context.Background()
	out, err := runHelm(t, append([]string{"template", "dra-driver-swap", chartDir, "--namespace", chartNamespace}, helmArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	resources, err := manifest.NewResources(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if !kinds[u.GetKind()] {
			continue
		}
		res, err := resources.For(u, chartNamespace)
		if err != nil {
			t.Fatal(err)
		}
		data, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Client.Patch(ctx, u.GetName(), apitypes.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "test", Force: ptr.To(true)}); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// tokenClient is a client with a ServiceAccount token from the TokenRequest
// API, bound to a pod when one is given (as the kubelet mounts it).
func tokenClient(t *testing.T, s *framework.APIServer, namespace, sa string, pod *corev1.Pod) kubernetes.Interface {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := s.Client.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(s.Config)
	cfg.BearerToken = tr.Status.Token
	return kubernetes.NewForConfigOrDie(cfg)
}

// podTokenClient creates a pod of ServiceAccount sa in the chart's
// namespace on node and returns a client with that pod's bound token (its
// extra carries the node, as for the component's real pod).
func podTokenClient(t *testing.T, s *framework.APIServer, name, sa, node string) kubernetes.Interface {
	t.Helper()
	pod, err := s.Client.CoreV1().Pods(chartNamespace).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/dra-driver-swap:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tokenClient(t, s, chartNamespace, sa, pod)
}

func driverSlice(node, driver string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-test-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		},
	}
}

// refused checks that err is a refusal whose message says want.
func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: got %v, want a refusal saying %q", what, err, want)
		return
	}
	t.Logf("%s: refused: %v", what, err)
}

// TestAdmissionPolicies proves each refusal of the chart's
// ValidatingAdmissionPolicies with the real ServiceAccount tokens of the
// driver's components: the plugin writes only its own node's slices, no
// one else writes the driver's slices, and the controller changes only the
// labels it owns on pods and nodes.
func TestAdmissionPolicies(t *testing.T) {
	t.Parallel()
	s := framework.StartAPIServer(t)
	ctx := context.Background()
	installChartPolicies(t, s)
	for _, name := range []string{"node-a", "node-b"} {
		if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "infra"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The plugin's pod on node-a, whose bound token carries the node.
	plugin := podTokenClient(t, s, "kubeletplugin-a", pluginSA, "node-a")
	slices := plugin.ResourceV1().ResourceSlices()

	// The policies take a moment to load: wait until one refuses.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := slices.Create(ctx, driverSlice("node-b", "dra.swap"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	}); err != nil {
		t.Fatal("the chart's admission policy never refused the plugin writing another node's slice")
	}

	t.Run("the plugin writes its own node's slices only", func(t *testing.T) {
		_, err := slices.Create(ctx, driverSlice("node-b", "dra.swap"), metav1.CreateOptions{})
		refused(t, "the plugin on node-a creating node-b's slice", err, "the dra.swap kubelet plugin on node node-a may not change a ResourceSlice of node node-b")
		own, err := slices.Create(ctx, driverSlice("node-a", "dra.swap"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the plugin creating its own node's slice: %v", err)
		}
		own.Spec.Pool.Generation++
		if own, err = slices.Update(ctx, own, metav1.UpdateOptions{}); err != nil {
			t.Errorf("the plugin updating its own node's slice: %v", err)
		}
		moved := own.DeepCopy()
		moved.Spec.NodeName = ptr.To("node-b")
		_, err = slices.Update(ctx, moved, metav1.UpdateOptions{})
		if err == nil {
			t.Errorf("the plugin moved its slice to node-b")
		}
		if err := slices.Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("the plugin deleting its own node's slice: %v", err)
		}
		// A token of the plugin's ServiceAccount that is not bound to its
		// pod carries no node.
		_, err = tokenClient(t, s, chartNamespace, pluginSA, nil).ResourceV1().ResourceSlices().Create(ctx, driverSlice("node-a", "dra.swap"), metav1.CreateOptions{})
		refused(t, "an unbound token of the plugin", err, "no node association found")
	})

	t.Run("the plugin writes no other driver's slices and no other pool", func(t *testing.T) {
		// Another driver's slices on the plugin's own node and on another,
		// published by an admin (standing in for that driver's plugin).
		var others []*resourceapi.ResourceSlice
		for _, node := range []string{"node-a", "node-b"} {
			other, err := s.Client.ResourceV1().ResourceSlices().Create(ctx, driverSlice(node, "gpu.example.com"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			others = append(others, other)
		}
		allNodes := driverSlice("node-a", "dra.swap")
		allNodes.Spec.NodeName, allNodes.Spec.AllNodes = nil, ptr.To(true)
		otherPool := driverSlice("node-a", "dra.swap")
		otherPool.Spec.Pool.Name = "node-b"
		madeUp := driverSlice("node-a", "made-up.example.com")
		madeUp.Spec.NodeName, madeUp.Spec.AllNodes = nil, ptr.To(true)
		for _, c := range []struct {
			what  string
			slice *resourceapi.ResourceSlice
			want  string
		}{
			{"create another driver's slice on its own node", driverSlice("node-a", "gpu.example.com"), "may write only ResourceSlices of driver dra.swap, not of driver gpu.example.com"},
			{"create a slice of a made-up driver for all nodes", madeUp, "may write only ResourceSlices of driver dra.swap, not of driver made-up.example.com"},
			{"publish a dra.swap slice in the pool of another node", otherPool, "may publish only its node's pool"},
			{"publish a dra.swap slice for all nodes", allNodes, "the dra.swap kubelet plugin on node node-a may"},
		} {
			_, err := slices.Create(ctx, c.slice, metav1.CreateOptions{})
			refused(t, "the plugin on node-a trying to "+c.what, err, c.want)
		}
		for _, other := range others {
			changed := other.DeepCopy()
			changed.Spec.Pool.Generation++
			_, err := slices.Update(ctx, changed, metav1.UpdateOptions{})
			refused(t, "the plugin updating "+*other.Spec.NodeName+"'s gpu.example.com slice", err, "not of driver gpu.example.com")
			err = slices.Delete(ctx, other.Name, metav1.DeleteOptions{})
			refused(t, "the plugin deleting "+*other.Spec.NodeName+"'s gpu.example.com slice", err, "not of driver gpu.example.com")
		}
		// deletecollection: the chart grants no such verb (the kubelet
		// plugin helper deletes by name) ...
		err := slices.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("the plugin's deletecollection of ResourceSlices: got %v, want forbidden by RBAC", err)
		}
		// ... and were it granted, admission, which the API server runs
		// for each item as its DELETE, lets it delete only its own node's
		// dra.swap slices.
		grant(t, s, "plugin-deletecollection", rbacv1.Subject{Kind: "ServiceAccount", Name: pluginSA, Namespace: chartNamespace},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"deletecollection"}})
		own, err := slices.Create(ctx, driverSlice("node-a", "dra.swap"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the plugin creating its own node's slice: %v", err)
		}
		for _, selector := range []string{"", "spec.driver=gpu.example.com", "spec.nodeName=node-a"} {
			err = slices.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: selector})
			refused(t, "the plugin's deletecollection of ResourceSlices "+selector, err, "not of driver gpu.example.com")
		}
		for _, other := range others {
			if _, err := s.Client.ResourceV1().ResourceSlices().Get(ctx, other.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("%s's gpu.example.com slice after the plugin's deletecollection: %v", *other.Spec.NodeName, err)
			}
		}
		if err := slices.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=dra.swap,spec.nodeName=node-a"}); err != nil {
			t.Errorf("the plugin's deletecollection of its own node's dra.swap slices: %v", err)
		}
		if _, err := s.Client.ResourceV1().ResourceSlices().Get(ctx, own.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the plugin's own slice after its deletecollection: got %v, want deleted", err)
		}
		for _, other := range others {
			if err := s.Client.ResourceV1().ResourceSlices().Delete(ctx, other.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("no one else writes the driver's slices", func(t *testing.T) {
		// A ServiceAccount that RBAC lets write any ResourceSlice (another
		// DRA driver's plugin, say).
		grant(t, s, "slice-writer", rbacv1.Subject{Kind: "ServiceAccount", Name: "other-driver", Namespace: chartNamespace},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"*"}})
		if _, err := s.Client.CoreV1().ServiceAccounts(chartNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other-driver"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		other := tokenClient(t, s, chartNamespace, "other-driver", nil).ResourceV1().ResourceSlices()
		_, err := other.Create(ctx, driverSlice("node-a", "dra.swap"), metav1.CreateOptions{})
		refused(t, "another ServiceAccount creating a dra.swap slice", err, "only the dra.swap kubelet plugin's ServiceAccount may write ResourceSlices of driver dra.swap")
		if _, err := other.Create(ctx, driverSlice("node-a", "gpu.example.com"), metav1.CreateOptions{}); err != nil {
			t.Errorf("another driver's own slice: %v", err)
		}
		own, err := slices.Create(ctx, driverSlice("node-a", "dra.swap"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = other.Delete(ctx, own.Name, metav1.DeleteOptions{})
		refused(t, "another ServiceAccount deleting a dra.swap slice", err, "may not delete one")
		changed := own.DeepCopy()
		changed.Spec.Pool.Generation++
		_, err = other.Update(ctx, changed, metav1.UpdateOptions{})
		refused(t, "another ServiceAccount updating a dra.swap slice", err, "may not update one")
		// The kubelet of node-a cleans up its node's slices after the
		// plugin left; not another node's.
		grant(t, s, "kubelets-delete-slices", rbacv1.Subject{Kind: "Group", Name: "system:nodes"},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"delete"}})
		err = s.ClientForUser(t, "system:node:node-b", "system:nodes").ResourceV1().ResourceSlices().Delete(ctx, own.Name, metav1.DeleteOptions{})
		refused(t, "node-b's kubelet deleting node-a's dra.swap slice", err, "may not delete one")
		if err := s.ClientForUser(t, "system:node:node-a", "system:nodes").ResourceV1().ResourceSlices().Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("node-a's kubelet deleting its node's dra.swap slice: %v", err)
		}
	})

	t.Run("the controller changes only the labels it owns", func(t *testing.T) {
		controllerClient := podTokenClient(t, s, "controller-a", controllerSA, "node-a")
		pod, err := s.Client.CoreV1().Pods(chartNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "workload", Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		patch := func(client kubernetes.Interface, kind, name, body string) error {
			var err error
			if kind == "pod" {
				_, err = client.CoreV1().Pods(chartNamespace).Patch(ctx, name, apitypes.MergePatchType, []byte(body), metav1.PatchOptions{})
			} else {
				_, err = client.CoreV1().Nodes().Patch(ctx, name, apitypes.MergePatchType, []byte(body), metav1.PatchOptions{})
			}
			return err
		}
		allowed := []struct{ what, kind, name, body string }{
			{"set a topology label and its annotation on a pod", "pod", pod.Name,
				`{"metadata":{"labels":{"topology.kubernetes.io/zone":"z1","node.kubernetes.io/swap-behavior":"NoSwap"},"annotations":{"dra.swap/managed-labels":"node.kubernetes.io/swap-behavior,topology.kubernetes.io/zone"}}}`},
			{"remove a label it owns from a pod", "pod", pod.Name, `{"metadata":{"labels":{"topology.kubernetes.io/zone":null}}}`},
			{"set the swap labels of a node", "node", "node-a", `{"metadata":{"labels":{"node.kubernetes.io/swap-behavior":"NoSwap","dra.swap/capacity":"4Gi"}}}`},
		}
		for _, a := range allowed {
			if err := patch(controllerClient, a.kind, a.name, a.body); err != nil {
				t.Errorf("the controller may %s: %v", a.what, err)
			}
		}
		denied := []struct{ what, kind, name, body, want string }{
			{"remove a pod's app label", "pod", pod.Name, `{"metadata":{"labels":{"app":null}}}`, "may change only the labels it owns on pods"},
			{"set a label it does not own on a pod", "pod", pod.Name, `{"metadata":{"labels":{"security.example.com/quarantine":"false"}}}`, "may change only the labels it owns on pods"},
			{"annotate a pod", "pod", pod.Name, `{"metadata":{"annotations":{"example.com/owner":"x"}}}`, "may change no annotation"},
			{"change a pod's spec", "pod", pod.Name, `{"spec":{"activeDeadlineSeconds":1}}`, "may change only labels of pods"},
			{"change a node's other labels", "node", "node-a", `{"metadata":{"labels":{"app":"pwned"}}}`, "may change only the labels it owns on nodes"},
			{"label a node with a pod key", "node", "node-a", `{"metadata":{"labels":{"topology.kubernetes.io/zone":"z9"}}}`, "may change only the labels it owns on nodes"},
			{"cordon a node", "node", "node-a", `{"spec":{"unschedulable":true}}`, "may change only labels of nodes"},
			{"annotate a node", "node", "node-a", `{"metadata":{"annotations":{"dra.swap/managed-labels":"x"}}}`, "may change no annotation"},
		}
		for _, d := range denied {
			refused(t, "the controller trying to "+d.what, patch(controllerClient, d.kind, d.name, d.body), d.want)
		}
		// The same writes by an admin are not the policy's business.
		if err := patch(s.Client, "node", "node-a", `{"spec":{"unschedulable":true}}`); err != nil {
			t.Errorf("an admin cordoning a node: %v", err)
		}
	})
}

// grant binds a ClusterRole with rule to subject.
func grant(t *testing.T, s *framework.APIServer, name string, subject rbacv1.Subject, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC takes effect at once; give the authorizer cache a moment.
	time.Sleep(200 * time.Millisecond)
}
