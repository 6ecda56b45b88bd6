package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/servingcert"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/claimstatus"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// TestControllerUpdatesOnlyCABundle proves, with the controller's real
// ServiceAccount token against the chart's RBAC, policies and webhook
// configurations, that the controller's token may change nothing of its
// webhook configurations but caBundle, has no grant on a configuration the
// chart does not render, and that the controller's own CA injection
// (internal/controller/servingcert, with that token) still works.
func TestControllerUpdatesOnlyCABundle(t *testing.T) {
	t.Parallel()
	s := framework.StartAPIServer(t)
	ctx := context.Background()
	createChartNamespace(t, s)
	kinds := policyKinds()
	kinds["ValidatingWebhookConfiguration"] = true
	admission := s.Client.AdmissionregistrationV1()
	applyChart(t, s, kinds)
	controllerClient := podTokenClient(t, s, "controller-a", controllerSA, "node-a")
	// The policies take a moment to load: wait until one refuses.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := controllerClient.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c.Webhooks[0].TimeoutSeconds = ptr.To[int32](29)
		_, err = controllerClient.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	}); err != nil {
		t.Fatal("the chart's admission policy never refused the controller changing a webhook's timeout")
	}

	t.Run("no grant on a configuration the chart does not render", func(t *testing.T) {
		// The chart renders no MutatingWebhookConfiguration, whatever the
		// pod selection; one of its name, made by someone else, is none of
		// the controller's business.
		if _, err := admission.MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: chartWebhookConfiguration},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, selection := range []string{"swap-claims", "all"} {
			applyChart(t, s, kinds, "--set", "controller.podSelection="+selection)
			time.Sleep(200 * time.Millisecond) // for the authorizer's cache, as grant does
			m, err := controllerClient.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
			if !apierrors.IsForbidden(err) {
				t.Errorf("podSelection %s: the controller reading a MutatingWebhookConfiguration the chart does not render: got %v, want forbidden", selection, err)
			}
			if err == nil {
				m.Labels = map[string]string{"x": "y"}
				_, err = controllerClient.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
				if !apierrors.IsForbidden(err) {
					t.Errorf("podSelection %s: the controller updating a MutatingWebhookConfiguration the chart does not render: got %v, want forbidden", selection, err)
				}
			}
		}
		if err := admission.MutatingWebhookConfigurations().Delete(ctx, chartWebhookConfiguration, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the controller's CA injection works with its token", func(t *testing.T) {
		injectWithToken(t, controllerClient)
	})

	t.Run("the controller may change nothing but caBundle", func(t *testing.T) {
		// validating and mutating make the controller update its
		// configuration with change; a change admitted to no purpose
		// (restore) is undone, so that each case starts from the chart's.
		validating := func(change func(*admissionregistrationv1.ValidatingWebhookConfiguration), restore bool) error {
			c, err := controllerClient.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			orig := c.DeepCopy()
			change(c)
			updated, err := controllerClient.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{})
			if err == nil && restore {
				orig.ResourceVersion = updated.ResourceVersion
				if _, err := admission.ValidatingWebhookConfigurations().Update(ctx, orig, metav1.UpdateOptions{}); err != nil {
					t.Fatalf("restore the ValidatingWebhookConfiguration: %v", err)
				}
			}
			return err
		}
		mutating := func(change func(*admissionregistrationv1.MutatingWebhookConfiguration), restore bool) error {
			c, err := controllerClient.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			orig := c.DeepCopy()
			change(c)
			updated, err := controllerClient.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{})
			if err == nil && restore {
				orig.ResourceVersion = updated.ResourceVersion
				if _, err := admission.MutatingWebhookConfigurations().Update(ctx, orig, metav1.UpdateOptions{}); err != nil {
					t.Fatalf("restore the MutatingWebhookConfiguration: %v", err)
				}
			}
			return err
		}
		const onlyCABundle = "may change only webhooks[*].clientConfig.caBundle"
		const onlyMeta = "may not change a webhook configuration's labels, annotations, owner references or finalizers"
		secrets := admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
		}
		for _, c := range []struct {
			what   string
			change func(*admissionregistrationv1.ValidatingWebhookConfiguration)
			want   string
		}{
			{"add a rule for Secrets", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].Rules = append(c.Webhooks[0].Rules, secrets)
			}, onlyCABundle},
			{"make a webhook fail closed", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
			}, onlyCABundle},
			{"point a webhook at a URL", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].ClientConfig.Service = nil
				c.Webhooks[0].ClientConfig.URL = ptr.To("https://attacker.example.com/validate")
			}, onlyCABundle},
			{"point a webhook at another service path", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].ClientConfig.Service.Path = ptr.To("/other")
			}, onlyCABundle},
			{"point a webhook at another service", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].ClientConfig.Service.Namespace = "default"
			}, onlyCABundle},
			{"change a timeout", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].TimeoutSeconds = ptr.To[int32](30)
			}, onlyCABundle},
			{"drop a match condition", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].MatchConditions = nil
			}, onlyCABundle},
			{"change a namespace selector", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}
			}, onlyCABundle},
			{"change an object selector", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}
			}, onlyCABundle},
			{"change a match policy", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].MatchPolicy = ptr.To(admissionregistrationv1.Exact)
			}, onlyCABundle},
			{"change side effects", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].SideEffects = ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun)
			}, onlyCABundle},
			{"change admission review versions", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].AdmissionReviewVersions = []string{"v1", "v1beta1"}
			}, onlyCABundle},
			{"rename a webhook", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].Name = "evil.dra.swap"
			}, onlyCABundle},
			{"add a webhook", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				w := *c.Webhooks[0].DeepCopy()
				w.Name, w.MatchConditions, w.Rules = "evil.dra.swap", nil, []admissionregistrationv1.RuleWithOperations{secrets}
				c.Webhooks = append(c.Webhooks, w)
			}, onlyCABundle},
			{"remove a webhook", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks = c.Webhooks[1:]
			}, onlyCABundle},
			{"reorder the webhooks", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0], c.Webhooks[1] = c.Webhooks[1], c.Webhooks[0]
			}, onlyCABundle},
			{"label the configuration", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Labels["x"] = "y"
			}, onlyMeta},
			{"annotate the configuration", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Annotations = map[string]string{"x": "y"}
			}, onlyMeta},
			{"add a finalizer", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Finalizers = append(c.Finalizers, "example.com/keep")
			}, onlyMeta},
			{"add an owner reference", func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.OwnerReferences = append(c.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: chartNamespace, UID: "0a1b2c3d"})
			}, onlyMeta},
		} {
			refused(t, "the controller trying to "+c.what+" of its ValidatingWebhookConfiguration", validating(c.change, true), c.want)
		}
		// The policy holds for a MutatingWebhookConfiguration too, should
		// the controller's RBAC ever name one.
		if _, err := admission.MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: chartWebhookConfiguration},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:                    "binding.dra.swap",
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: chartNamespace, Name: controllerSA, Path: ptr.To("/x")}},
				Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding"}}}},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
				AdmissionReviewVersions: []string{"v1"},
			}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		grant(t, s, "controller-mutating", rbacv1.Subject{Kind: "ServiceAccount", Name: controllerSA, Namespace: chartNamespace},
			rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{chartWebhookConfiguration}, Verbs: []string{"get", "update"}})
		for _, c := range []struct {
			what   string
			change func(*admissionregistrationv1.MutatingWebhookConfiguration)
		}{
			{"add a rule for Secrets", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Webhooks[0].Rules = append(c.Webhooks[0].Rules, secrets)
			}},
			{"make a webhook fail closed", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
			}},
			{"change the reinvocation policy", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Webhooks[0].ReinvocationPolicy = ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy)
			}},
			{"point a webhook at a URL", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Webhooks[0].ClientConfig.Service = nil
				c.Webhooks[0].ClientConfig.URL = ptr.To("https://attacker.example.com/mutate")
			}},
		} {
			refused(t, "the controller trying to "+c.what+" of a MutatingWebhookConfiguration it is granted", mutating(c.change, true), onlyCABundle)
		}
		// What the controller does: caBundle alone, of one webhook or all.
		ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
		if err := validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[1].ClientConfig.CABundle = ca
		}, false); err != nil {
			t.Errorf("the controller changing one caBundle of its ValidatingWebhookConfiguration: %v", err)
		}
		if err := mutating(func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			for i := range c.Webhooks {
				c.Webhooks[i].ClientConfig.CABundle = ca
			}
		}, false); err != nil {
			t.Errorf("the controller changing caBundle of a MutatingWebhookConfiguration it is granted: %v", err)
		}
		// It creates and deletes none (RBAC; the policy too).
		err := controllerClient.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, chartWebhookConfiguration, metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("the controller deleting its ValidatingWebhookConfiguration: got %v, want forbidden", err)
		}
		// An admin's change is not the policy's business.
		c, err := admission.ValidatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Webhooks[0].TimeoutSeconds = ptr.To[int32](7)
		if _, err := admission.ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Errorf("an admin changing a webhook's timeout: %v", err)
		}
	})
}

// injectWithToken runs the controller's CA injection (servingcert, as the
// chart's controller runs it: the Secret in its namespace, the chart's
// ValidatingWebhookConfiguration) with client, and checks that every
// webhook of that configuration then trusts the CA.
func injectWithToken(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	m, err := servingcert.New(client, servingcert.Options{
		SecretNamespace:                 chartNamespace,
		SecretName:                      controllerSA + "-webhook-tls",
		DNSNames:                        []string{controllerSA + "." + chartNamespace + ".svc"},
		ValidatingWebhookConfigurations: []string{chartWebhookConfiguration},
	})
	if err != nil {
		t.Fatal(err)
	}
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = m.Ensure(ctx)
		return last == nil, nil
	}); err != nil {
		t.Fatalf("the controller's CA injection with its token: %v", last)
	}
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Webhooks {
		if string(w.ClientConfig.CABundle) != string(m.CABundle()) {
			t.Errorf("webhook %s: caBundle %q, want the controller's CA", w.Name, w.ClientConfig.CABundle)
		}
	}
}

// TestPluginClaimStatusPolicy proves, with the plugin's pod-bound token
// and the API server's DRAResourceClaimGranularStatusAuthorization gate
// off (where only RBAC's cluster-wide resourceclaims/status grant would
// stand) and on, that the plugin may change only its driver's
// status.devices entries of its own node's pool on claims allocated on its
// node, and that its own server-side apply of those entries (as
// internal/kubeletplugin's claim status writer does) works.
func TestPluginClaimStatusPolicy(t *testing.T) {
	t.Parallel()
	for _, gate := range []bool{false, true} {
		t.Run(fmt.Sprintf("DRAResourceClaimGranularStatusAuthorization=%t", gate), func(t *testing.T) {
			testPluginClaimStatus(t, framework.StartAPIServer(t, framework.WithFeatureGate("DRAResourceClaimGranularStatusAuthorization", gate)), !gate)
		})
	}
}

// testPluginClaimStatus runs the checks; byPolicy: the chart's policy is
// what refuses (with the gate on, the API server's own status
// authorization refuses first, with its own message).
func testPluginClaimStatus(t *testing.T, s *framework.APIServer, byPolicy bool) {
	ctx := context.Background()
	installChartPolicies(t, s)
	const ns = "tenant"
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node-a", "node-b"} {
		if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pluginClient := podTokenClient(t, s, "kubeletplugin-a", pluginSA, "node-a")

	// claim is a claim of a dra.swap device and a gpu.example.com device,
	// allocated on node (unless reserved is nil, reserved for a pod), with
	// the GPU driver's status entry.
	claim := func(name, node string, reserved bool) *resourceapi.ResourceClaim {
		t.Helper()
		c, err := s.Client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
				{Name: "swap", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "dra.swap"}},
				{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}},
			}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "swap", Driver: "dra.swap", Pool: node, Device: "swap"},
				{Request: "gpu", Driver: "gpu.example.com", Pool: node, Device: "gpu-0"},
			}},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}},
			}}}},
		}
		if reserved {
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name + "-pod", UID: apitypes.UID(name + "-pod-uid")}}
		}
		c.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: "gpu.example.com", Pool: node, Device: "gpu-0",
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}}}
		if c, err = s.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	own := claim("own", "node-a", true)
	otherNode := claim("other-node", "node-b", true)
	idle := claim("idle", "node-a", false)

	// apply writes the plugin's dra.swap entry of pool as
	// internal/kubeletplugin's claim status writer does: server-side
	// apply of the status with its field manager, forced.
	apply := func(client kubernetes.Interface, c *resourceapi.ResourceClaim, pool, condition string) error {
		data, err := json.Marshal(claimstatus.DeviceStatusData{APIVersion: "dra.swap/v1alpha1", Kind: "SwapDeviceStatus", LimitBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		ac := resourceapply.ResourceClaim(c.Name, c.Namespace).WithUID(c.UID).WithStatus(resourceapply.ResourceClaimStatus().WithDevices(
			resourceapply.AllocatedDeviceStatus().WithDriver("dra.swap").WithPool(pool).WithDevice("swap").
				WithData(runtime.RawExtension{Raw: data}).
				WithConditions(metav1apply.Condition().WithType(claimstatus.ConditionSwapApplied).WithStatus(metav1.ConditionStatus(condition)).
					WithReason(claimstatus.ReasonPrepared).WithMessage("test").WithLastTransitionTime(metav1.Now()))))
		_, err = client.ResourceV1().ResourceClaims(c.Namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: claimstatus.StatusFieldManager, Force: true})
		return err
	}
	jsonPatch := func(c *resourceapi.ResourceClaim, patch string) error {
		_, err := pluginClient.ResourceV1().ResourceClaims(c.Namespace).Patch(ctx, c.Name, apitypes.JSONPatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	}

	// The policies take a moment to load: wait until one refuses.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := pluginClient.ResourceV1().ResourceClaims(ns).Patch(ctx, otherNode.Name, apitypes.JSONPatchType,
			[]byte(`[{"op":"remove","path":"/status/devices"}]`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err != nil, nil
	}); err != nil {
		t.Fatal("nothing refused the plugin removing another node's claim's device status")
	}

	if err := apply(pluginClient, own, "node-a", "Unknown"); err != nil {
		t.Fatalf("the plugin applying its dra.swap entry of a claim allocated on its node: %v", err)
	}
	if err := apply(pluginClient, own, "node-a", "True"); err != nil {
		t.Fatalf("the plugin updating its dra.swap entry of a claim allocated on its node: %v", err)
	}
	got, err := s.Client.ResourceV1().ResourceClaims(ns).Get(ctx, own.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.Status.Devices); n != 2 || got.Status.Devices[1].Driver != "dra.swap" || got.Status.Devices[1].Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("after the plugin's apply: status.devices %+v, want the GPU entry and the plugin's True entry", got.Status.Devices)
	}

	const (
		notItsClaim   = "may write the status only of claims allocated on its node"
		onlyItsEntry  = "may change only the status.devices entries of driver dra.swap in pool node-a"
		noReservation = "may not change a claim's allocation or reservedFor"
	)
	for _, c := range []struct {
		what string
		err  func() error
		want string
	}{
		{"apply a dra.swap entry to a claim allocated on node-b", func() error { return apply(pluginClient, otherNode, "node-b", "True") }, notItsClaim},
		{"remove the device status of a claim allocated on node-b", func() error {
			return jsonPatch(otherNode, `[{"op":"remove","path":"/status/devices"}]`)
		}, notItsClaim},
		{"change another driver's entry", func() error {
			return jsonPatch(own, `[{"op":"replace","path":"/status/devices/0/conditions/0/status","value":"False"}]`)
		}, onlyItsEntry},
		{"remove another driver's entry", func() error { return jsonPatch(own, `[{"op":"remove","path":"/status/devices/0"}]`) }, onlyItsEntry},
		{"add a reservation", func() error {
			return jsonPatch(own, `[{"op":"add","path":"/status/reservedFor/-","value":{"resource":"pods","name":"intruder","uid":"intruder-uid"}}]`)
		}, noReservation},
		{"drop the reservation", func() error { return jsonPatch(own, `[{"op":"remove","path":"/status/reservedFor"}]`) }, noReservation},
		{"deallocate an unreserved claim", func() error {
			return jsonPatch(idle, `[{"op":"remove","path":"/status/devices"},{"op":"remove","path":"/status/allocation"}]`)
		}, noReservation},
	} {
		if !byPolicy {
			c.want = ""
		}
		refused(t, "the plugin on node-a trying to "+c.what, c.err(), c.want)
	}
	// A token of the plugin's ServiceAccount not bound to its pod carries
	// no node.
	err = apply(tokenClient(t, s, chartNamespace, pluginSA, nil), own, "node-a", "False")
	want := "no node association found"
	if !byPolicy {
		want = ""
	}
	refused(t, "an unbound token of the plugin applying its entry", err, want)

	got, err = s.Client.ResourceV1().ResourceClaims(ns).Get(ctx, own.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.ReservedFor) != 1 || got.Status.Devices[0].Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("the claim after the refused writes: reservedFor %+v, devices %+v", got.Status.ReservedFor, got.Status.Devices)
	}
}
