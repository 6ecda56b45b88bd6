package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	fakeclient "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/servingcert"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/webhook"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

const (
	tenant     = "tenant"
	rackLabel  = "example.com/rack"
	secretNode = "secret.example.com/tier"
)

// controllerEnv is a real apiserver with the controller running against
// it and its webhooks registered through real webhook configurations.
type controllerEnv struct {
	t       testing.TB
	s       *framework.APIServer
	client  kubernetes.Interface
	webhook string // https://localhost:PORT
	// stop ends the controller's context, as SIGTERM does.
	stop func()
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// controllerSetup is what startController starts, changed by its options.
type controllerSetup struct {
	// chartValues are the helm arguments (--set …) the chart's webhook
	// configuration is rendered with; none: its defaults.
	chartValues []string
	config      controller.Config
	// restConfig is the controller's client configuration (the admin's).
	restConfig func(s *framework.APIServer) *rest.Config
}

func startController(t *testing.T, opts ...func(*controllerSetup)) *controllerEnv {
	s := framework.StartAPIServer(t)
	logger, ctx := ktesting.NewTestContext(t)
	ctrl.SetLogger(klog.Background())
	ctx, cancel := context.WithCancel(ctx)
	env := &controllerEnv{t: t, s: s, client: s.Client}
	port := freePort(t)
	env.webhook = fmt.Sprintf("https://localhost:%d", port)

	for _, ns := range []string{tenant} {
		if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// No controller-manager runs, so create the default service account.
		if _, err := s.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// As the helm chart does: the configurations without a caBundle, and
	// an empty Secret the controller fills.
	setup := controllerSetup{
		restConfig: func(s *framework.APIServer) *rest.Config { return rest.CopyConfig(s.Config) },
		config: controller.Config{
			Policy:                  podlabels.Policy{Selection: podlabels.SelectSwapClaims, Allowlist: []string{rackLabel}},
			Workers:                 4,
			LeaderElection:          true,
			LeaderElectionNamespace: "kube-system",
			LeaderElectionID:        "dra-swap-controller",
			WebhookHost:             "127.0.0.1",
			WebhookPort:             port,
			Cert: servingcert.Options{
				SecretNamespace:                 "kube-system",
				SecretName:                      "dra-swap-controller-webhook-tls",
				DNSNames:                        []string{"localhost"},
				ValidatingWebhookConfigurations: []string{chartWebhookConfiguration},
			},
			CertCheckInterval: time.Second,
			MetricsAddress:    "0",
			HealthAddress:     "0",
		},
	}
	for _, o := range opts {
		o(&setup)
	}
	validating := chartWebhooks(t, env.webhook, setup.chartValues...)
	if _, err := s.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "dra.swap"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: v1alpha1.DriverSelector(v1alpha1.DriverName)},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, setup.restConfig(s), setup.config) }()
	env.stop = cancel
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("controller: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("controller did not stop")
		}
	})

	// Ready when the CA is injected and the webhook answers over TLS.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("controller stopped: %w", err)
		default:
		}
		v, err := s.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
		if err != nil || len(v.Webhooks[0].ClientConfig.CABundle) == 0 {
			return false, nil
		}
		_, err = s.Client.ResourceV1().ResourceClaims(tenant).Create(ctx, swapClaim("probe", "4Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":500}`), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "swapHighPercent"), nil
	})
	if err != nil {
		t.Fatalf("controller webhooks not ready: %v", err)
	}
	logger.Info("Controller ready", "webhook", env.webhook)
	return env
}

// node creates a Node and, as its kubelet plugin would, its ResourceSlice.
func (e *controllerEnv) node(ctx context.Context, name string, nodeLabels map[string]string, behavior string, swapBytes int64) {
	e.t.Helper()
	nodeLabels = mergeLabels(map[string]string{podlabels.Hostname: name}, nodeLabels)
	if _, err := e.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nodeLabels}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.publish(ctx, name, nodeLabels, behavior, swapBytes)
}

// publish creates or updates the node's ResourceSlice with swapdevice.Device,
// as a plugin does that offers swap under every kubelet swap behavior
// (--unsafe-offer-swap-under all of them), so that the controller's labels
// follow the behavior and the swap apart.
func (e *controllerEnv) publish(ctx context.Context, name string, nodeLabels map[string]string, behavior string, swapBytes int64) {
	e.t.Helper()
	f := discovery.Facts{TotalBytes: swapBytes, Medium: discovery.MediumSSD, CgroupVersion: 2, SwapControl: true, SwapBehavior: behavior}
	if swapBytes > 0 {
		f.Devices = []discovery.SwapDevice{{Path: "/swapfile", Type: "file", SizeBytes: swapBytes}}
	}
	dev, _ := swapdevice.Device(f, nodeLabels, swapdevice.Policy{OvercommitRatio: 1, UnsafeOfferUnder: swapdevice.UnsafeSwapBehaviors()})
	rs := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-dra.swap"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: v1alpha1.DriverName, NodeName: ptr.To(name),
			Pool:    resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{*dev},
		},
	}
	cur, err := e.client.ResourceV1().ResourceSlices().Get(ctx, rs.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = e.client.ResourceV1().ResourceSlices().Create(ctx, rs, metav1.CreateOptions{})
	case err == nil:
		rs.ResourceVersion = cur.ResourceVersion
		rs.Spec.Pool.Generation = cur.Spec.Pool.Generation + 1
		_, err = e.client.ResourceV1().ResourceSlices().Update(ctx, rs, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func mergeLabels(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func swapClaim(name, size, config string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "swap",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "dra.swap",
				Capacity:        &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse(size)}},
			},
		}}}},
	}
	if config != "" {
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "dra.swap", Parameters: runtime.RawExtension{Raw: []byte(config)},
		}}}}
	}
	return c
}

// swapPod creates a pod with an allocated and reserved swap claim on node,
// as the scheduler leaves it just before binding.
func (e *controllerEnv) swapPod(ctx context.Context, client kubernetes.Interface, name, node string, podLabels, annotations map[string]string) *corev1.Pod {
	e.t.Helper()
	claim, err := client.ResourceV1().ResourceClaims(tenant).Create(ctx, swapClaim(name, "256Mi", ""), metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods(tenant).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: podLabels, Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "swap"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To(name)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "swap", Driver: "dra.swap", Pool: node, Device: v1alpha1.DeviceName,
		ShareID:          ptr.To(apitypes.UID("a1b2c3d4-0000-4000-8000-000000000001")),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse("256Mi")},
	}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	// The scheduler writes this status; the tenant cannot.
	if _, err := e.client.ResourceV1().ResourceClaims(tenant).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return pod
}

// bind binds the pod through pods/binding, as the scheduler does, and
// returns the pod as the write that set spec.nodeName left it.
func (e *controllerEnv) bind(ctx context.Context, pod *corev1.Pod, node string) *corev1.Pod {
	e.t.Helper()
	w, err := e.client.CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	defer w.Stop()
	if err := e.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				continue
			}
			p := ev.Object.(*corev1.Pod)
			if p.Spec.NodeName != "" {
				return p
			}
		case <-timeout:
			e.t.Fatalf("pod %s was not bound", pod.Name)
		}
	}
}

// waitForPodLabels polls until the pod has want (a nil value: absent) and
// returns how long it took.
func (e *controllerEnv) waitForPodLabels(ctx context.Context, pod *corev1.Pod, want map[string]*string, timeout time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	var last map[string]string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p.Labels
		return hasLabels(p.Labels, want), nil
	})
	if err != nil {
		e.t.Fatalf("pod %s: labels %v, want %s within %v: %v", pod.Name, last, show(want), timeout, err)
	}
	return time.Since(start)
}

func hasLabels(have map[string]string, want map[string]*string) bool {
	for k, v := range want {
		got, ok := have[k]
		if v == nil && ok || v != nil && (!ok || got != *v) {
			return false
		}
	}
	return true
}

func show(m map[string]*string) string {
	var parts []string
	for k, v := range m {
		if v == nil {
			parts = append(parts, k+" absent")
		} else {
			parts = append(parts, k+"="+*v)
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func topology(zone, host, behavior string) map[string]*string {
	return map[string]*string{podlabels.Zone: ptr.To(zone), podlabels.Hostname: ptr.To(host), v1alpha1.LabelSwapBehavior: ptr.To(behavior)}
}

func (e *controllerEnv) waitForNodeLabels(ctx context.Context, name string, want map[string]*string) {
	e.t.Helper()
	var last map[string]string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n.Labels
		return hasLabels(n.Labels, want), nil
	})
	if err != nil {
		e.t.Fatalf("node %s: labels %v, want %s: %v", name, last, show(want), err)
	}
}

// setWebhookURLs points the named webhooks of the chart's configuration
// at other URLs and returns the function that points them back.
func (e *controllerEnv) setWebhookURLs(ctx context.Context, urls map[string]string) (restore func()) {
	e.t.Helper()
	set := func(urls map[string]string) map[string]string {
		c, err := e.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		old := map[string]string{}
		for i := range c.Webhooks {
			w := &c.Webhooks[i]
			if url, ok := urls[w.Name]; ok {
				old[w.Name] = ptr.Deref(w.ClientConfig.URL, "")
				w.ClientConfig.URL = ptr.To(url)
			}
		}
		if len(old) != len(urls) {
			e.t.Fatalf("webhooks %v: only %v in %s", urls, old, chartWebhookConfiguration)
		}
		if _, err := e.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			e.t.Fatal(err)
		}
		return old
	}
	old := set(urls)
	return func() { set(old) }
}

// swapExtendedResource is the extended resource the dra.swap class backs
// without naming one (DRAExtendedResource's implicit name).
const swapExtendedResource = resourceapi.ResourceDeviceClassPrefix + "dra.swap"

// waitForEvent polls until the pod has an event (events.k8s.io/v1, as
// the controller records them) of reason whose note contains text.
func (e *controllerEnv) waitForEvent(ctx context.Context, pod *corev1.Pod, reason, text string) {
	e.t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.EventsV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + pod.Name})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, ev := range list.Items {
			seen = append(seen, ev.Reason+": "+ev.Note)
			if ev.Reason == reason && ev.Regarding.UID == pod.UID && strings.Contains(ev.Note, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("pod %s: no %s event containing %q: %v; events %q", pod.Name, reason, text, err, seen)
	}
}

// warnings collects the API server's warning headers.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

func TestController(t *testing.T) {
	t.Parallel()
	env := startController(t)
	_, ctx := ktesting.NewTestContext(t)
	env.node(ctx, "node-a", map[string]string{podlabels.Zone: "zone-a", podlabels.Region: "region-1", rackLabel: "r1", secretNode: "gold"}, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
	env.node(ctx, "node-b", map[string]string{podlabels.Zone: "zone-b"}, v1alpha1.SwapBehaviorNoSwap, 0)

	t.Run("node swap labels", func(t *testing.T) {
		env.t = t
		env.waitForNodeLabels(ctx, "node-a", map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("LimitedSwap"), v1alpha1.LabelCapacity: ptr.To("4Gi")})
		// A node without usable swap still says how its kubelet behaves.
		env.waitForNodeLabels(ctx, "node-b", map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("NoSwap"), v1alpha1.LabelCapacity: nil})
		nodes, err := env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelSwapBehavior + "=LimitedSwap"})
		if err != nil || len(nodes.Items) != 1 || nodes.Items[0].Name != "node-a" {
			t.Fatalf("nodes with LimitedSwap: %v, %v", nodes, err)
		}
		// The kubelet's configuration changes: the label follows.
		env.publish(ctx, "node-b", map[string]string{podlabels.Zone: "zone-b", podlabels.Hostname: "node-b"}, v1alpha1.SwapBehaviorLimitedSwap, 2*gi)
		env.waitForNodeLabels(ctx, "node-b", map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("LimitedSwap"), v1alpha1.LabelCapacity: ptr.To("2Gi")})
		env.publish(ctx, "node-b", map[string]string{podlabels.Zone: "zone-b", podlabels.Hostname: "node-b"}, v1alpha1.SwapBehaviorNoSwap, 0)
		env.waitForNodeLabels(ctx, "node-b", map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("NoSwap"), v1alpha1.LabelCapacity: nil})
		// The plugin leaves the node: without the admin's flag, labels stay.
		if err := env.client.ResourceV1().ResourceSlices().Delete(ctx, "node-b-dra.swap", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		env.waitForNodeLabels(ctx, "node-b", map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("NoSwap")})
		env.publish(ctx, "node-b", map[string]string{podlabels.Zone: "zone-b", podlabels.Hostname: "node-b"}, v1alpha1.SwapBehaviorNoSwap, 0)
	})

	t.Run("a pod is labeled when its swap claim is reserved, before it is bound", func(t *testing.T) {
		env.t = t
		pod := env.swapPod(ctx, env.client, "bound-by-webhook", "node-a", map[string]string{"app": "x"}, nil)
		bound := env.bind(ctx, pod, "node-a")
		want := topology("zone-a", "node-a", "LimitedSwap")
		want[podlabels.Region] = ptr.To("region-1")
		want[rackLabel] = ptr.To("r1")
		want[secretNode] = nil
		want["app"] = ptr.To("x")
		if !hasLabels(bound.Labels, want) {
			t.Fatalf("labels in the binding write: %v, want %s", bound.Labels, show(want))
		}
		if got := bound.Annotations[v1alpha1.AnnotationManagedLabels]; got != "example.com/rack,kubernetes.io/hostname,node.kubernetes.io/swap-behavior,topology.kubernetes.io/region,topology.kubernetes.io/zone" {
			t.Errorf("%s = %q", v1alpha1.AnnotationManagedLabels, got)
		}
		// A pod without a swap claim is left alone.
		plain, err := env.client.CoreV1().Pods(tenant).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "no-claim"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// (The built-in PodTopologyLabels admission may add zone and region.)
		if p := env.bind(ctx, plain, "node-a"); !hasLabels(p.Labels, map[string]*string{podlabels.Hostname: nil, v1alpha1.LabelSwapBehavior: nil, rackLabel: nil}) || p.Annotations[v1alpha1.AnnotationManagedLabels] != "" {
			t.Errorf("pod without a swap claim got labels %v, annotations %v", p.Labels, p.Annotations)
		}
	})

	t.Run("reconciler labels a pod bound while the webhook was down", func(t *testing.T) {
		env.t = t
		reservation := func(c *admissionregistrationv1.ValidatingWebhookConfiguration) *admissionregistrationv1.ValidatingWebhook {
			for i := range c.Webhooks {
				if c.Webhooks[i].Name == reservationWebhook {
					return &c.Webhooks[i]
				}
			}
			t.Fatalf("no webhook %s", reservationWebhook)
			return nil
		}
		validating, err := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		good := *reservation(validating).ClientConfig.URL
		setURL := func(url string) {
			v, err := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			reservation(v).ClientConfig.URL = &url
			if _, err := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		setURL(fmt.Sprintf("https://localhost:%d%s", freePort(t), webhook.ReservationPath)) // nothing listens
		defer setURL(good)
		time.Sleep(2 * time.Second) // the API server picks up the configuration

		pod := env.swapPod(ctx, env.client, "bound-without-webhook", "node-a", nil, nil)
		bound := env.bind(ctx, pod, "node-a")
		if _, ok := bound.Labels[podlabels.Hostname]; ok {
			t.Fatalf("the webhook was not down: the binding carried %v", bound.Labels)
		}
		took := env.waitForPodLabels(ctx, bound, topology("zone-a", "node-a", "LimitedSwap"), 2*time.Second)
		t.Logf("reconciler labeled the pod %v after binding", took.Round(time.Millisecond))
	})

	t.Run("a pod that asks for swap as an extended resource is explained, labeled at its claim's reservation and kept labeled", func(t *testing.T) {
		env.t = t
		extended := func(name string, devices string) *corev1.Pod {
			pod, err := env.client.CoreV1().Pods(tenant).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceName(swapExtendedResource): resource.MustParse(devices)}}}}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return pod
		}
		// Pending: no node has two swap devices; the scheduler has made no
		// claim yet, so the explainer reads the pod's request.
		waits := extended("extended-waits", "2")
		waits.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/2 nodes are available: 2 cannot allocate all claims."}}
		if _, err := env.client.CoreV1().Pods(tenant).UpdateStatus(ctx, waits, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		env.waitForEvent(ctx, waits, controller.ReasonSwapUnavailable,
			"Swap extended resource "+swapExtendedResource+": 2 (each node has one swap device, so only 1 can be allocated) cannot be allocated on any node now: node node-a: ")
		if err := env.client.CoreV1().Pods(tenant).Delete(ctx, waits.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		// Scheduled, as the scheduler's PreBind does it: the claim is
		// created, allocated and reserved, then named in the pod's status,
		// then the pod is bound.
		pod := extended("extended", "1")
		claim, err := env.client.ResourceV1().ResourceClaims(tenant).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + "-extended-resources-",
				Annotations:     map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "container-0-request-0",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "dra.swap", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "container-0-request-0", Driver: "dra.swap", Pool: "node-a", Device: v1alpha1.DeviceName,
			ShareID:          ptr.To(apitypes.UID("a1b2c3d4-0000-4000-8000-000000000002")),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse("1Gi")},
		}}}}
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		if _, err := env.client.ResourceV1().ResourceClaims(tenant).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := topology("zone-a", "node-a", "LimitedSwap")
		reserved, err := env.client.CoreV1().Pods(tenant).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !hasLabels(reserved.Labels, want) {
			t.Errorf("labels after the reservation of the pod's extended-resource claim: %v, want %s", reserved.Labels, show(want))
		}
		reserved.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: claim.Name,
			RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "app", ResourceName: swapExtendedResource, RequestName: "container-0-request-0"}}}
		if _, err := env.client.CoreV1().Pods(tenant).UpdateStatus(ctx, reserved, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		bound := env.bind(ctx, reserved, "node-a")
		// The reconciler keeps them: a label removed comes back.
		if _, err := env.client.CoreV1().Pods(tenant).Patch(ctx, bound.Name, apitypes.MergePatchType,
			[]byte(`{"metadata":{"labels":{"`+podlabels.Hostname+`":null}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		took := env.waitForPodLabels(ctx, bound, want, 5*time.Second)
		t.Logf("the reconciler restored the labels of the pod with an extended-resource claim in %v", took.Round(time.Millisecond))
	})

	t.Run("node label changes reach the pods", func(t *testing.T) {
		env.t = t
		pod, err := env.client.CoreV1().Pods(tenant).Get(ctx, "bound-by-webhook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node, err := env.client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Labels[rackLabel] = "r2"
		node.Labels[podlabels.Zone] = "zone-c"
		delete(node.Labels, podlabels.Region)
		if _, err := env.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The plugin republishes the zone from the Node's labels.
		env.publish(ctx, "node-a", node.Labels, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
		want := topology("zone-c", "node-a", "LimitedSwap")
		want[rackLabel] = ptr.To("r2")
		want[podlabels.Region] = nil // the driver set it, the node lost it
		env.waitForPodLabels(ctx, pod, want, 5*time.Second)
		// The kubelet switches to NoSwap.
		env.publish(ctx, "node-a", node.Labels, v1alpha1.SwapBehaviorNoSwap, 4*gi)
		env.waitForPodLabels(ctx, pod, map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("NoSwap")}, 5*time.Second)
		env.waitForNodeLabels(ctx, "node-a", map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("NoSwap")})
	})

	t.Run("invalid SwapConfig is rejected with the field and the reason", func(t *testing.T) {
		env.t = t
		bad := []struct {
			name   string
			create func() error
			want   []string
		}{
			{
				name: "claim out of range",
				create: func() error {
					_, err := env.client.ResourceV1().ResourceClaims(tenant).Create(ctx, swapClaim("bad-range", "256Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":150}`), metav1.CreateOptions{})
					return err
				},
				want: []string{"spec.devices.config[0].opaque.parameters.swapHighPercent", "150", "1", "100"},
			},
			{
				name: "template with unknown field",
				create: func() error {
					c := swapClaim("t", "256Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapines":10}`)
					_, err := env.client.ResourceV1().ResourceClaimTemplates(tenant).Create(ctx, &resourceapi.ResourceClaimTemplate{
						ObjectMeta: metav1.ObjectMeta{Name: "bad-template"},
						Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: c.Spec},
					}, metav1.CreateOptions{})
					return err
				},
				want: []string{"spec.spec.devices.config[0].opaque.parameters", `unknown field "swapines"`},
			},
			{
				name: "device class with wrong kind",
				create: func() error {
					_, err := env.client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
						ObjectMeta: metav1.ObjectMeta{Name: "bad-class"},
						Spec: resourceapi.DeviceClassSpec{Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
							Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "dra.swap", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"GpuConfig"}`)}},
						}}}},
					}, metav1.CreateOptions{})
					return err
				},
				want: []string{"spec.config[0].opaque.parameters", "GpuConfig"},
			},
		}
		for _, tc := range bad {
			err := tc.create()
			if err == nil {
				t.Errorf("%s: accepted", tc.name)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not contain %q", tc.name, err, w)
				}
			}
			t.Logf("%s: %v", tc.name, err)
		}
		// Other drivers' objects never reach the strict check.
		other := swapClaim("other-driver", "1", `{"anything":"goes"}`)
		other.Spec.Devices.Config[0].Opaque.Driver = "gpu.example.com"
		other.Spec.Devices.Requests[0].Exactly = &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}
		if _, err := env.client.ResourceV1().ResourceClaims(tenant).Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Errorf("other driver's claim: %v", err)
		}
	})

	t.Run("swap requests get warnings", func(t *testing.T) {
		env.t = t
		w := &warnings{}
		cfg := rest.CopyConfig(env.s.Config)
		cfg.WarningHandler = w
		client := kubernetes.NewForConfigOrDie(cfg)
		cases := []struct {
			claim *resourceapi.ResourceClaim
			want  string
		}{
			{swapClaim("odd-size", "300M", ""), "300M is not a multiple of 1Mi; it is rounded up to 287Mi"},
			{swapClaim("too-big", "8Gi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig"}`), "8Gi exceeds the largest swap any node offers (4Gi)"},
			{swapClaim("fine", "256Mi", ""), ""},
		}
		for _, tc := range cases {
			if _, err := client.ResourceV1().ResourceClaims(tenant).Create(ctx, tc.claim, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: %v", tc.claim.Name, err)
			}
			got := w.take()
			if tc.want == "" && len(got) > 0 || tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)) {
				t.Errorf("%s: warnings %q, want %q", tc.claim.Name, got, tc.want)
			}
		}
	})

	t.Run("with the controller down the claim controller's copies of a template are admitted, every other claim with dra.swap config refused", func(t *testing.T) {
		env.t = t
		const (
			valid   = `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":50}`
			invalid = `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":150}`
			down    = `failed calling webhook "config.dra.swap"`
		)
		// kube-controller-manager's two identities: the claim controller's
		// ServiceAccount (--use-service-account-credentials, whose role the
		// API server bootstraps) and its own user, which a cluster without
		// that flag grants the same; and bob, who may create claims.
		claimController := env.s.ClientForUser(t, "system:serviceaccount:kube-system:resource-claim-controller")
		kcm := env.s.ClientForUser(t, "system:kube-controller-manager")
		if _, err := env.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kcm-resource-claim-controller"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:controller:resource-claim-controller"},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "system:kube-controller-manager"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		grant(t, env.s, "claim-writer", rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "bob"},
			rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"create"}})
		bob := env.s.ClientForUser(t, "bob")

		tmpl, err := env.client.ResourceV1().ResourceClaimTemplates(tenant).Create(ctx, &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "with-config"},
			Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: swapClaim("", "64Mi", valid).Spec},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod, err := env.client.CoreV1().Pods(tenant).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "from-template"},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "swap"}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "swap", ResourceClaimTemplateName: ptr.To(tmpl.Name)}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// copy is the claim the claim controller makes for the pod from a
		// template with spec (k8s.io/kubernetes pkg/controller/resourceclaim).
		copyOf := func(spec resourceapi.ResourceClaimSpec, annotated bool) *resourceapi.ResourceClaim {
			c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + "-swap-",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}},
				Spec: spec}
			if annotated {
				c.Annotations = map[string]string{resourceapi.PodResourceClaimAnnotation: "swap"}
			}
			return c
		}
		create := func(c kubernetes.Interface, claim *resourceapi.ResourceClaim) error {
			_, err := c.ResourceV1().ResourceClaims(tenant).Create(ctx, claim, metav1.CreateOptions{})
			return err
		}

		createTemplate := func(name string) error {
			_, err := env.client.ResourceV1().ResourceClaimTemplates(tenant).Create(ctx, &resourceapi.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tmpl.Spec}, metav1.CreateOptions{})
			return err
		}

		restore := env.setWebhookURLs(ctx, map[string]string{
			"config.dra.swap":   fmt.Sprintf("https://localhost:%d%s", freePort(t), webhook.ConfigPath), // nothing listens
			"requests.dra.swap": fmt.Sprintf("https://localhost:%d%s", freePort(t), webhook.ConfigPath),
		})
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := env.client.ResourceV1().ResourceClaimTemplates(tenant).Create(ctx, &resourceapi.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: tmpl.Spec}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), down), nil
		})
		if err != nil {
			t.Fatalf("the API server still reaches the config webhook: %v", err)
		}
		// Admitted: what the claim controller copies from the template.
		if err := create(claimController, copyOf(tmpl.Spec.Spec, true)); err != nil {
			t.Errorf("the claim controller's copy of an admitted template, controller down: %v", err)
		}
		if err := create(kcm, copyOf(tmpl.Spec.Spec, true)); err != nil {
			t.Errorf("kube-controller-manager's copy of an admitted template, controller down: %v", err)
		}
		// Refused (Fail): the same claim by anyone else, and a claim of the
		// claim controller's that does not say it comes from a template.
		for what, err := range map[string]error{
			"bob's claim with the annotation": create(bob, copyOf(tmpl.Spec.Spec, true)),
			"bob's claim":                     create(bob, copyOf(tmpl.Spec.Spec, false)),
			"the claim controller's claim without the annotation": create(claimController, copyOf(tmpl.Spec.Spec, false)),
			"a template": createTemplate("while-down"),
		} {
			if err == nil || !strings.Contains(err.Error(), down) {
				t.Errorf("%s, controller down: %v, want refused: %s", what, err, down)
			}
		}
		// Without a config no claim waits for the controller.
		if err := create(bob, swapClaim("plain-while-down", "64Mi", "")); err != nil {
			t.Errorf("a claim without dra.swap config, controller down: %v", err)
		}

		restore()
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			err := create(bob, copyOf(swapClaim("", "64Mi", invalid).Spec, true))
			return err != nil && strings.Contains(err.Error(), "swapHighPercent"), nil
		})
		if err != nil {
			t.Errorf("bob's claim with the annotation and an invalid SwapConfig, controller up: %v, want refused naming swapHighPercent", err)
		}
		// What the exclusion costs: the claim controller's copies are never
		// reviewed (the template they copy was); prepare checks them again.
		if err := create(claimController, copyOf(swapClaim("", "64Mi", invalid).Spec, true)); err != nil {
			t.Errorf("the claim controller's copy, controller up: %v, want admitted without a review", err)
		}
	})

	t.Run("an admin-supplied certificate is served and reloaded", func(t *testing.T) {
		env.t = t
		dir := t.TempDir()
		// Issue certificates the way cert-manager would leave them in a
		// mounted Secret: tls.crt and tls.key, replaced on renewal.
		issuer := fakeclient.NewClientset()
		issue := func(names ...string) (certPEM, caPEM []byte) {
			m, err := servingcert.New(issuer, servingcert.Options{SecretNamespace: "cm", SecretName: "tls", DNSNames: names})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			s, err := issuer.CoreV1().Secrets("cm").Get(ctx, "tls", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"tls.crt", "tls.key"} {
				if err := os.WriteFile(filepath.Join(dir, f+".new"), s.Data[f], 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(dir, f+".new"), filepath.Join(dir, f)); err != nil {
					t.Fatal(err)
				}
			}
			return s.Data["tls.crt"], s.Data["ca.crt"]
		}
		first, ca := issue("localhost")
		port := freePort(t)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- controller.Run(cctx, rest.CopyConfig(env.s.Config), controller.Config{
				Policy: podlabels.Policy{Selection: podlabels.SelectSwapClaims}, LeaderElection: true,
				LeaderElectionNamespace: "kube-system", LeaderElectionID: "dra-swap-controller",
				WebhookHost: "127.0.0.1", WebhookPort: port, CertDir: dir, MetricsAddress: "0", HealthAddress: "0",
			})
		}()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("second controller: %v", err)
			}
		}()
		served := func() []byte {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(ca)
			conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12})
			if err != nil {
				return nil
			}
			defer conn.Close()
			return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: conn.ConnectionState().PeerCertificates[0].Raw})
		}
		waitServed := func(want []byte) {
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				return bytes.Equal(served(), want), nil
			}); err != nil {
				t.Fatalf("the webhook server does not serve the admin's certificate: %v", err)
			}
		}
		waitServed(first)
		// Renewal: new files, same CA; served without a restart.
		renewed, _ := issue("localhost", "dra-swap-controller.dra-swap.svc")
		if bytes.Equal(renewed, first) {
			t.Fatal("the issuer did not renew")
		}
		waitServed(renewed)
		// The admin's CA is not injected: the self-managed one stays.
		m, err := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, chartWebhookConfiguration, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(m.Webhooks[0].ClientConfig.CABundle, ca) {
			t.Error("a controller with --tls-cert-dir changed caBundle")
		}
	})

	t.Run("a namespace user cannot widen the allowlist", func(t *testing.T) {
		env.t = t
		// Alice may do anything inside her namespace (the aggregated admin
		// role is empty without a controller-manager, so spell it out).
		if _, err := env.client.RbacV1().Roles(tenant).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"", "resource.k8s.io", "apps", "batch"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := env.client.RbacV1().RoleBindings(tenant).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "alice"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tenant-admin"},
			Subjects:   []rbacv1.Subject{{Kind: "User", Name: "alice"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		alice := env.s.ClientForUser(t, "alice")
		// The API server's authorizer learns of the Role and its binding
		// from a watch: wait until it lets alice create what she creates
		// below.
		for _, resource := range []struct{ group, resource string }{{"", "pods"}, {"resource.k8s.io", "resourceclaims"}} {
			if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				review, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: tenant, Verb: "create", Group: resource.group, Resource: resource.resource,
					}},
				}, metav1.CreateOptions{})
				return err == nil && review.Status.Allowed, nil
			}); err != nil {
				t.Fatalf("alice may not create %s in %s: %v", resource.resource, tenant, err)
			}
		}
		// Everything alice can write in her namespace: a pod that claims
		// the hidden label through the driver's annotation, sets a fake
		// topology label and lists labels the controller does not own
		// (its own app label, a security label) in the driver's
		// annotation, hoping the controller deletes them; and a claim
		// config asking for more labels.
		pod := env.swapPod(ctx, alice, "alice-pod", "node-a",
			map[string]string{podlabels.Zone: "fake-zone", "app": "web", "security.example.com/quarantine": "true"},
			map[string]string{v1alpha1.AnnotationManagedLabels: secretNode + "," + rackLabel + ",app,security.example.com/quarantine", "dra.swap/node-label-allowlist": secretNode})
		if _, err := alice.ResourceV1().ResourceClaims(tenant).Create(ctx, swapClaim("alice-config", "256Mi",
			`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","nodeLabelAllowlist":["`+secretNode+`"]}`), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("a claim config naming labels: %v, want rejected as an unknown field", err)
		}
		bound := env.bind(ctx, pod, "node-a")
		if _, ok := bound.Labels[secretNode]; ok {
			t.Fatalf("the binding copied the non-allowlisted %s: %v", secretNode, bound.Labels)
		}
		env.waitForPodLabels(ctx, pod, map[string]*string{podlabels.Zone: ptr.To("zone-c"), secretNode: nil, rackLabel: ptr.To("r2")}, 5*time.Second)
		time.Sleep(time.Second) // several reconciles later, still not there
		p, err := env.client.CoreV1().Pods(tenant).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.Labels[secretNode]; ok {
			t.Fatalf("pod got the non-allowlisted %s", secretNode)
		}
		if p.Labels["app"] != "web" || p.Labels["security.example.com/quarantine"] != "true" {
			t.Fatalf("the controller removed labels it does not own, listed in the pod's %s: %v", v1alpha1.AnnotationManagedLabels, p.Labels)
		}
		// What configures the controller is out of alice's reach.
		forbidden := map[string]error{}
		_, forbidden["patch a node's labels"] = alice.CoreV1().Nodes().Patch(ctx, "node-a", apitypes.MergePatchType, []byte(`{"metadata":{"labels":{"`+rackLabel+`":"x"}}}`), metav1.PatchOptions{})
		_, forbidden["change the webhook configuration"] = alice.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: chartWebhookConfiguration}}, metav1.UpdateOptions{})
		_, forbidden["read the webhook secret"] = alice.CoreV1().Secrets("kube-system").Get(ctx, "dra-swap-controller-webhook-tls", metav1.GetOptions{})
		_, forbidden["publish a ResourceSlice"] = alice.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		for what, err := range forbidden {
			if !apierrors.IsForbidden(err) {
				t.Errorf("alice could %s: %v", what, err)
			}
		}
	})
}

// TestControllerDrains: a replica is ready only once the informers its
// webhooks read have synced; when its context ends (SIGTERM) it reports
// not ready at once and answers reviews for its shutdown delay, so the
// Service drops it before it stops listening (failurePolicy Ignore
// would otherwise pass pods unlabelled during a rollout or failover).
func TestControllerDrains(t *testing.T) {
	t.Parallel()
	health := freePort(t)
	env := startController(t, func(s *controllerSetup) {
		s.config.HealthAddress = fmt.Sprintf("127.0.0.1:%d", health)
		s.config.ShutdownDelay = 10 * time.Second
	})
	readyz := func() (int, string, error) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz?verbose", health))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	ctx := context.Background()
	poll := func(what string, done func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return done(), nil }); err != nil {
			code, body, rerr := readyz()
			t.Fatalf("%s: %v (last /readyz: %d %q %v)", what, err, code, body, rerr)
		}
	}
	poll("ready with the webhooks' caches synced", func() bool {
		code, body, err := readyz()
		return err == nil && code == http.StatusOK && strings.Contains(body, "[+]webhook-caches ok")
	})
	// The config webhook has failurePolicy Fail: its answer, not an
	// error calling it, names the field.
	answers := func() error {
		_, err := env.client.ResourceV1().ResourceClaims(tenant).Create(ctx, swapClaim("drain", "4Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":500}`), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), "swapHighPercent") {
			return fmt.Errorf("the config webhook did not answer: %w", err)
		}
		return nil
	}
	if err := answers(); err != nil {
		t.Fatal(err)
	}

	env.stop()
	poll("not ready once stopping", func() bool {
		code, body, err := readyz()
		return err == nil && code == http.StatusInternalServerError && strings.Contains(body, "[-]webhook-caches failed")
	})
	if err := answers(); err != nil {
		t.Fatalf("while draining: %v", err)
	}
	poll("stopped after the delay", func() bool { _, _, err := readyz(); return err != nil })
}
