package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/webhook"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// answerBound is how long a forged review may take to be answered: the
// labelers' wait for what a review names to reach the cache
// (webhook.DefaultCacheWait, 2 s, which a review naming pods that do not
// exist waits in full) and half a second more, less than the webhooks'
// timeouts (3 s, 5 s for config.dra.swap), so forged reviews cannot keep
// the controller from answering the API server.
const answerBound = webhook.DefaultCacheWait + 500*time.Millisecond

// maxForgedAPIRequests bounds the API requests one forged review may cause.
const maxForgedAPIRequests = 5

// requestCounter counts the controller's API requests for pods, claims,
// slices and nodes (not its lease renewals, events or watches).
type requestCounter struct {
	mu    sync.Mutex
	count int
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Query().Get("watch") != "true" {
			for _, res := range []string{"/pods", "/resourceclaims", "/resourceslices", "/nodes"} {
				if strings.Contains(r.URL.Path, res) {
					c.mu.Lock()
					c.count++
					c.mu.Unlock()
					break
				}
			}
		}
		return rt.RoundTrip(r)
	})
}

func (c *requestCounter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// forged posts a body to a webhook path as any pod that reaches the
// Service could, and returns the HTTP status, the review's response (nil
// if none) and how long the answer took. It fails the test if there is no
// answer within answerBound.
func (e *controllerEnv) forged(t *testing.T, path string, body []byte) (int, *admissionv1.AdmissionResponse, time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: answerBound, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // a forger does not check
	defer client.CloseIdleConnections()
	start := time.Now()
	resp, err := client.Post(e.webhook+path+"?timeout=30s", "application/json", bytes.NewReader(body))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("forged review of %d bytes to %s: no answer within %v: %v", len(body), path, answerBound, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	review := &admissionv1.AdmissionReview{}
	if json.Unmarshal(data, review) != nil {
		review.Response = nil
	}
	return resp.StatusCode, review.Response, took.Round(time.Millisecond)
}

// reviewBody is an AdmissionReview of req.
func reviewBody(t *testing.T, req admissionv1.AdmissionRequest) []byte {
	t.Helper()
	req.UID = "0b5e7c1a-1111-4222-8333-444455556666"
	data, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: &req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func rawJSON(t *testing.T, obj any) runtime.RawExtension {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: data}
}

// reservationReview is a claim status update review of old to claim.
func reservationReview(t *testing.T, old, claim *resourceapi.ResourceClaim) []byte {
	t.Helper()
	return reviewBody(t, admissionv1.AdmissionRequest{
		Kind:        metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"},
		Resource:    metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"},
		SubResource: "status", Namespace: claim.Namespace, Name: claim.Name, Operation: admissionv1.Update,
		Object: rawJSON(t, claim), OldObject: rawJSON(t, old),
	})
}

// allocatedOn sets a dra.swap allocation on node.
func allocatedOn(c *resourceapi.ResourceClaim, node string) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "swap", Driver: v1alpha1.DriverName, Pool: node, Device: "swap",
	}}}}
	return c
}

// TestForgedWebhookReviews posts forged AdmissionReviews straight to the
// controller's webhook server, as any pod that reaches its Service could:
// each is answered within answerBound with at most maxForgedAPIRequests
// API requests, and changes no pod the API does not say it should.
func TestForgedWebhookReviews(t *testing.T) {
	t.Parallel()
	counter := &requestCounter{}
	env := startController(t, func(s *controllerSetup) {
		base := s.restConfig
		s.restConfig = func(api *framework.APIServer) *rest.Config {
			cfg := base(api)
			cfg.WrapTransport = counter.wrap
			return cfg
		}
	})
	_, ctx := ktesting.NewTestContext(t)
	env.node(ctx, "node-a", map[string]string{podlabels.Zone: "zone-a"}, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
	env.node(ctx, "node-b", map[string]string{podlabels.Zone: "zone-b"}, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
	// A real reservation first: the controller's claim informer runs.
	env.t = t
	env.bind(ctx, env.swapPod(ctx, env.client, "warm-up", "node-a", nil, nil), "node-a")

	// A pod in another namespace that the controller labeled for node-b,
	// and a pod in the tenant's namespace that uses no claim.
	victimLabels := map[string]string{podlabels.Zone: "zone-b", "app": "db"}
	victimAnnotations := map[string]string{v1alpha1.AnnotationManagedLabels: podlabels.Zone}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "victim"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.CoreV1().ServiceAccounts("victim").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newPod := func(ns, name string) *corev1.Pod {
		p, err := env.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: victimLabels, Annotations: victimAnnotations},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	victim := newPod("victim", "victim")
	bystander := newPod(tenant, "bystander")
	// A real claim of the tenant's, not allocated yet.
	stored, err := env.client.ResourceV1().ResourceClaims(tenant).Create(ctx, swapClaim("forged", "256Mi", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unchanged := func(t *testing.T, pods ...*corev1.Pod) {
		t.Helper()
		for _, p := range pods {
			now, err := env.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if now.ResourceVersion != p.ResourceVersion {
				t.Errorf("pod %s/%s changed: labels %v, annotations %v", p.Namespace, p.Name, now.Labels, now.Annotations)
			}
		}
	}
	reserving := func(c *resourceapi.ResourceClaim, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
		c = c.DeepCopy()
		for _, p := range pods {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
		}
		return c
	}
	many := func(c *resourceapi.ResourceClaim, n int) *resourceapi.ResourceClaim {
		c = c.DeepCopy()
		for i := range n {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
				Resource: "pods", Name: fmt.Sprintf("pod-%05d", i), UID: apitypes.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
			})
		}
		return c
	}
	victimClaim := stored.DeepCopy()
	victimClaim.Namespace = "victim"

	// 100 nodes' slices in the cache, for the config handler's offers.
	for i := range 100 {
		name := fmt.Sprintf("far-%03d", i)
		if _, err := env.client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-dra.swap"},
			Spec: resourceapi.ResourceSliceSpec{Driver: v1alpha1.DriverName, NodeName: ptr.To(name), Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "swap", Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"swap": {Value: resource.MustParse("4Gi")}}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // the cache sees them

	tests := []struct {
		name string
		path string
		body func() []byte
		// wantStatus: the HTTP status; wantMessage: in the review's result.
		wantStatus  int
		wantMessage string
		wantAllowed bool
		untouched   []*corev1.Pod
	}{
		{name: "(a) a reservation with 20,000 reservedFor entries", path: webhook.ReservationPath,
			body:       func() []byte { return reservationReview(t, stored, many(allocatedOn(stored, "node-a"), 20000)) },
			wantStatus: http.StatusOK, wantAllowed: true, wantMessage: "more than 256 reservedFor entries"},
		{name: "(a) a reservation with the API's 256 entries of pods that do not exist", path: webhook.ReservationPath,
			body:       func() []byte { return reservationReview(t, stored, many(allocatedOn(stored, "node-a"), 256)) },
			wantStatus: http.StatusOK, wantAllowed: true},
		{name: "(b) a reservation for a pod in another namespace", path: webhook.ReservationPath,
			body: func() []byte {
				return reservationReview(t, victimClaim, reserving(allocatedOn(victimClaim, "node-a"), victim))
			},
			wantStatus: http.StatusOK, wantAllowed: true, untouched: []*corev1.Pod{victim}},
		{name: "(b) a reservation for a pod that does not use the claim", path: webhook.ReservationPath,
			body: func() []byte {
				return reservationReview(t, stored, reserving(allocatedOn(stored, "node-a"), bystander))
			},
			wantStatus: http.StatusOK, wantAllowed: true, untouched: []*corev1.Pod{bystander}},
		{name: "(c) a 7 MB reservation review", path: webhook.ReservationPath,
			body:       func() []byte { return reservationReview(t, stored, many(allocatedOn(stored, "node-a"), 80000)) },
			wantStatus: http.StatusRequestEntityTooLarge, wantMessage: "larger than the webhook's limit"},
		{name: "(d) a 7 MB claim with 75,000 requests", path: webhook.ConfigPath,
			body:       func() []byte { return manyRequestsReview(t, 75000) },
			wantStatus: http.StatusRequestEntityTooLarge, wantMessage: "larger than the webhook's limit"},
		{name: "(d) a claim with 30,000 requests within the size limit", path: webhook.ConfigPath,
			body:       func() []byte { return manyRequestsReview(t, 30000) },
			wantStatus: http.StatusOK, wantMessage: "spec.devices.requests: Too many: 30000: must have at most 32 items"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body()
			before := counter.get()
			status, resp, took := env.forged(t, tc.path, body)
			requests := counter.get() - before
			t.Logf("%d bytes: HTTP %d in %v, %d API requests: %+v", len(body), status, took, requests, resp)
			if status != tc.wantStatus || resp == nil || resp.Allowed != tc.wantAllowed ||
				tc.wantMessage != "" && (resp.Result == nil || !strings.Contains(resp.Result.Message, tc.wantMessage)) {
				t.Errorf("answer: HTTP %d, %+v; want HTTP %d, allowed %v, saying %q", status, resp, tc.wantStatus, tc.wantAllowed, tc.wantMessage)
			}
			if requests > maxForgedAPIRequests {
				t.Errorf("the forged review cost %d API requests, want at most %d", requests, maxForgedAPIRequests)
			}
			unchanged(t, tc.untouched...)
		})
	}
	// The chart renders the binding webhook only with podSelection all or
	// namespaces; in swap-claims mode the controller does not serve it,
	// so a forged binding review labels nothing.
	t.Run("(e) the binding labeler is not served with podSelection swap-claims", func(t *testing.T) {
		body := reviewBody(t, admissionv1.AdmissionRequest{
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			SubResource: "binding", Namespace: tenant, Name: bystander.Name, Operation: admissionv1.Create,
			Object: rawJSON(t, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: bystander.Name, UID: bystander.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}),
		})
		if status, _, _ := env.forged(t, webhook.BindingPath, body); status != http.StatusNotFound {
			t.Errorf("POST %s: HTTP %d, want 404", webhook.BindingPath, status)
		}
		unchanged(t, bystander)
	})
}

// tokenConfig is a client configuration with a token of the
// ServiceAccount bound to a pod of it, as the kubelet mounts one: a pod
// made for the purpose (unscheduled, so that no controller acts on it).
func tokenConfig(t *testing.T, s *framework.APIServer, namespace, sa string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	pod, err := s.Client.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: sa + "-"},
		Spec: corev1.PodSpec{ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/dra-driver-swap:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(s.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// bindingCalls is how many reviews the controllers' binding labeler
// answered in this process.
func bindingCalls(t *testing.T) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_webhook_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "webhook" && l.GetValue() == webhook.BindingPath {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestBindingLabelsThroughControllerPatch: with podSelection all or
// namespaces, the binding labeler labels the pod with the controller's own
// pod patch, under the chart's RBAC and labels-only admission policy (the
// controller runs with its ServiceAccount's token), before the binding is
// stored; it never rides on the Binding. In namespaces mode, bindings in
// other namespaces never reach the controller.
func TestBindingLabelsThroughControllerPatch(t *testing.T) {
	t.Parallel()
	for _, mode := range []podlabels.Selection{podlabels.SelectAll, podlabels.SelectNamespaces} {
		t.Run(string(mode), func(t *testing.T) {
			selector := &metav1.LabelSelector{MatchLabels: map[string]string{"swap-labels": "enabled"}}
			env := startController(t, func(s *controllerSetup) {
				s.chartValues = []string{"--set", "controller.podSelection=" + string(mode)}
				s.config.Policy = podlabels.Policy{Selection: mode}
				// The webhook certificate Secret the chart lets the
				// controller create (its -own-secret-only policy).
				s.config.Cert.SecretNamespace = chartNamespace
				s.config.Cert.SecretName = controllerSA + "-webhook-tls"
				if mode == podlabels.SelectNamespaces {
					s.chartValues = append(s.chartValues, "--set", "controller.namespaceSelector="+metav1.FormatLabelSelector(selector))
					sel, err := metav1.LabelSelectorAsSelector(selector)
					if err != nil {
						t.Fatal(err)
					}
					s.config.Policy.NamespaceSelector = sel
				}
				// The chart's RBAC and admission policies, and the
				// controller's token; the extra grants are only for what
				// the test's setup keeps outside the chart's namespace
				// (the lease).
				s.restConfig = func(api *framework.APIServer) *rest.Config {
					// node-a's slice, before the chart's policy lets only
					// the plugin write it.
					(&controllerEnv{t: t, s: api, client: api.Client}).node(context.Background(), "node-a", map[string]string{podlabels.Zone: "zone-a"}, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
					(&controllerEnv{t: t, s: api, client: api.Client}).node(context.Background(), "node-b", map[string]string{podlabels.Zone: "zone-b"}, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
					installChartPolicies(t, api)
					grant(t, api, "test-controller-setup", rbacv1.Subject{Kind: "ServiceAccount", Name: controllerSA, Namespace: chartNamespace}, rbacv1.PolicyRule{
						APIGroups: []string{"", "coordination.k8s.io", "admissionregistration.k8s.io"},
						Resources: []string{"leases", "secrets", "validatingwebhookconfigurations"}, Verbs: []string{"*"},
					})
					return tokenConfig(t, api, chartNamespace, controllerSA)
				}
			})
			_, ctx := ktesting.NewTestContext(t)
			env.t = t
			if _, err := env.client.CoreV1().Namespaces().Patch(ctx, tenant, apitypes.MergePatchType, []byte(`{"metadata":{"labels":{"swap-labels":"enabled"}}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := env.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := env.client.CoreV1().ServiceAccounts("other").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // the cache sees the namespace labels
			plain := func(ns string) *corev1.Pod {
				p, err := env.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"app": "web"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			want := topology("zone-a", "node-a", "LimitedSwap")
			want["app"] = ptr.To("web")

			before := bindingCalls(t)
			bound := env.bind(ctx, plain(tenant), "node-a")
			if calls := bindingCalls(t) - before; calls != 1 {
				t.Errorf("the binding labeler answered %v reviews for one binding, want 1", calls)
			}
			if !hasLabels(bound.Labels, want) {
				t.Fatalf("labels in the binding write: %v, want %s", bound.Labels, show(want))
			}
			// The labels are the controller's pod write, which the chart's
			// labels-only policy checked: its field manager owns them.
			var owned string
			for _, m := range bound.ManagedFields {
				if m.Manager == webhook.FieldManager && m.Operation == metav1.ManagedFieldsOperationUpdate && m.FieldsV1 != nil {
					owned = m.FieldsV1.GetRawString()
				}
			}
			for _, k := range []string{podlabels.Zone, podlabels.Hostname, v1alpha1.LabelSwapBehavior, v1alpha1.AnnotationManagedLabels} {
				if !strings.Contains(owned, `"f:`+k+`"`) {
					t.Errorf("%s is not the controller's (%s): managed fields %s", k, webhook.FieldManager, owned)
				}
			}
			if strings.Contains(owned, `"f:app"`) {
				t.Errorf("the controller wrote the pod's app label: %s", owned)
			}

			before = bindingCalls(t)
			other := env.bind(ctx, plain("other"), "node-a")
			calls := bindingCalls(t) - before
			if mode == podlabels.SelectNamespaces {
				if calls != 0 {
					t.Errorf("a binding in an unselected namespace reached the controller (%v reviews)", calls)
				}
				if _, ok := other.Labels[podlabels.Hostname]; ok {
					t.Errorf("a pod in an unselected namespace got labels: %v", other.Labels)
				}
			} else if calls != 1 || !hasLabels(other.Labels, want) {
				t.Errorf("podSelection all: %v reviews, labels %v; want 1 and %s", calls, other.Labels, show(want))
			}

			// A pod whose claim is allocated on node-a (another driver's
			// device, as the scheduler leaves it before binding): a
			// binding review to node-b is not the scheduler's, and labels
			// nothing; one to node-a labels it.
			claimed := allocatedElsewhere(ctx, t, env, "node-a")
			binding := func(node string) []byte {
				return reviewBody(t, admissionv1.AdmissionRequest{
					Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
					SubResource: "binding", Namespace: tenant, Name: claimed.Name, Operation: admissionv1.Create,
					Object: rawJSON(t, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: claimed.Name, UID: claimed.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}),
				})
			}
			status, resp, _ := env.forged(t, webhook.BindingPath, binding("node-b"))
			now, err := env.client.CoreV1().Pods(tenant).Get(ctx, claimed.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if status != http.StatusOK || resp == nil || !resp.Allowed || now.ResourceVersion != claimed.ResourceVersion {
				t.Errorf("a binding review to a node where the pod's claim is not allocated: HTTP %d %+v; the pod's labels %v (changed: %v)",
					status, resp, now.Labels, now.ResourceVersion != claimed.ResourceVersion)
			} else {
				t.Logf("a forged binding to node-b of a pod whose claim is on node-a: %s", resp.Result.Message)
			}
			env.forged(t, webhook.BindingPath, binding("node-a"))
			if now, err = env.client.CoreV1().Pods(tenant).Get(ctx, claimed.Name, metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			if want := topology("zone-a", "node-a", "LimitedSwap"); !hasLabels(now.Labels, want) {
				t.Errorf("a binding review to the node of the pod's claim: labels %v, want %s", now.Labels, show(want))
			}
		})
	}
}

// allocatedElsewhere creates a pod whose claim (of another driver, whose
// reservation the controller does not see) is allocated on node, as the
// scheduler leaves it just before the binding.
func allocatedElsewhere(ctx context.Context, t *testing.T, env *controllerEnv, node string) *corev1.Pod {
	t.Helper()
	claim, err := env.client.ResourceV1().ResourceClaims(tenant).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.example.com"},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := env.client.CoreV1().Pods(tenant).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "claimed"},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}},
		}}}},
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.example.com", Pool: node, Device: "gpu-0"}}},
	}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	if _, err := env.client.ResourceV1().ResourceClaims(tenant).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the cache sees the allocation
	if pod, err = env.client.CoreV1().Pods(tenant).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	return pod
}
