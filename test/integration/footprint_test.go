package integration

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// hungServer accepts connections and never answers: a controller that
// hangs. It counts the connections the API server opens to it.
type hungServer struct {
	l     net.Listener
	calls atomic.Int64
	mu    sync.Mutex
	conns []net.Conn
}

func startHungServer(t *testing.T) *hungServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hungServer{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.calls.Add(1)
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range h.conns {
			c.Close()
		}
	})
	return h
}

func (h *hungServer) url() string {
	return fmt.Sprintf("https://localhost:%d", h.l.Addr().(*net.TCPAddr).Port)
}

// footprint runs one API call and reports its latency and how many calls
// it made to the (hung) controller.
type footprint struct {
	t      *testing.T
	server *hungServer
	rows   []string
}

func (f *footprint) do(what string, wantCalls int64, call func() error) {
	f.t.Helper()
	before := f.server.calls.Load()
	start := time.Now()
	err := call()
	took := time.Since(start)
	calls := f.server.calls.Load() - before
	f.rows = append(f.rows, fmt.Sprintf("%-70s %8s  calls to the controller: %d  (%v)", what, took.Round(time.Millisecond), calls, err))
	if err != nil {
		f.t.Errorf("%s: %v", what, err)
	}
	if calls != wantCalls {
		f.t.Errorf("%s called the controller %d times, want %d", what, calls, wantCalls)
	}
}

// TestHungControllerCostsOthersNothing: with the controller hung (its
// webhook endpoint accepts connections and never answers), nothing that
// does not concern the driver calls out to it, and claims of the driver
// are still allocated, deallocated and deleted, and their namespace
// deleted. The one call a swap claim makes, at its reservation, is
// bounded by the webhook's timeout and ignored on failure; the claims the
// claim controller copies from a template make none. Latencies are
// logged (docs/security.md quotes them); the test checks the calls, not time.
func TestHungControllerCostsOthersNothing(t *testing.T) {
	t.Parallel()
	s := framework.StartAPIServer(t)
	ctx := context.Background()
	hung := startHungServer(t)
	f := &footprint{t: t, server: hung}
	defer func() { t.Log("with the controller hung:\n" + strings.Join(f.rows, "\n")) }()

	for _, ns := range []string{"others", "swap-users"} {
		if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, class := range []string{"dra.swap", "gpu.example.com"} {
		if _, err := s.Client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: class},
			Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: v1alpha1.DriverSelector(class)}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A swap claim with dra.swap config, made before the controller hung.
	swap, err := s.Client.ResourceV1().ResourceClaims("swap-users").Create(ctx, swapClaim("swap", "256Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":80}`), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The driver's webhooks, as the chart installs them, reaching the hung
	// controller.
	validating := chartWebhooks(t, hung.url())
	if _, err := s.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The configuration takes effect when a swap claim with config calls
	// out (and, the policy being Fail, is refused).
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := s.Client.ResourceV1().ResourceClaims("swap-users").Create(ctx, swapClaim("probe", "1Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig"}`), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	}); err != nil {
		t.Fatal("the webhook configuration never took effect")
	}

	gpuClaim := func(name string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}},
				Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: "gpu.example.com", Parameters: runtime.RawExtension{Raw: []byte(`{"sharing":"timeslice"}`)},
				}}}},
			}},
		}
	}
	allocate := func(c *resourceapi.ResourceClaim, driver string, pod *corev1.Pod) *resourceapi.ResourceClaim {
		c = c.DeepCopy()
		result := resourceapi.DeviceRequestAllocationResult{Request: c.Spec.Devices.Requests[0].Name, Driver: driver, Pool: "node-a", Device: "dev-0"}
		if driver == "dra.swap" {
			result.Device = "swap"
			result.ShareID = ptr.To(apitypes.UID("a1b2c3d4-0000-4000-8000-000000000009"))
			result.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse("256Mi")}
		}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{result}}}
		if pod != nil {
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		}
		return c
	}
	pod := func(ns, name string, claim *string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}}
		if claim != nil {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: claim}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "c"}}
		}
		created, err := s.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	bind := func(p *corev1.Pod) error {
		return s.Client.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}, metav1.CreateOptions{})
	}
	// Other workloads: no call.
	others := s.Client.ResourceV1().ResourceClaims("others")
	var gpu *resourceapi.ResourceClaim
	f.do("create another driver's claim (with its own opaque config)", 0, func() (err error) {
		gpu, err = others.Create(ctx, gpuClaim("gpu"), metav1.CreateOptions{})
		return err
	})
	f.do("create another driver's claim template", 0, func() error {
		_, err := s.Client.ResourceV1().ResourceClaimTemplates("others").Create(ctx, &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: gpuClaim("x").Spec}}, metav1.CreateOptions{})
		return err
	})
	gpuPod := pod("others", "gpu-user", ptr.To("gpu"))
	f.do("allocate and reserve another driver's claim (scheduler)", 0, func() (err error) {
		gpu, err = others.UpdateStatus(ctx, allocate(gpu, "gpu.example.com", gpuPod), metav1.UpdateOptions{})
		return err
	})
	f.do("bind a pod with another driver's claim", 0, func() error { return bind(gpuPod) })
	plain := pod("others", "plain", nil)
	f.do("bind a pod without claims", 0, func() error { return bind(plain) })

	// The driver's own claim, made before the controller hung.
	swapClaims := s.Client.ResourceV1().ResourceClaims("swap-users")
	f.do("add a finalizer to a dra.swap claim with config (scheduler)", 0, func() error {
		_, err := swapClaims.Patch(ctx, swap.Name, apitypes.MergePatchType, []byte(`{"metadata":{"finalizers":["resource.kubernetes.io/delete-protection"]}}`), metav1.PatchOptions{})
		return err
	})
	swapPod := pod("swap-users", "swap-user", ptr.To("swap"))
	swap, err = swapClaims.Get(ctx, swap.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The one call: the reservation, for the pod's labels; ignored when the
	// controller does not answer within the webhook's timeout.
	f.do("allocate and reserve a dra.swap claim for a pod (scheduler)", 1, func() (err error) {
		swap, err = swapClaims.UpdateStatus(ctx, allocate(swap, "dra.swap", swapPod), metav1.UpdateOptions{})
		return err
	})
	f.do("bind the pod that uses it", 0, func() error { return bind(swapPod) })
	f.do("deallocate the dra.swap claim (resourceclaim controller)", 0, func() error {
		c := swap.DeepCopy()
		c.Status = resourceapi.ResourceClaimStatus{}
		_, err := swapClaims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	})
	f.do("remove the claim's finalizer and delete it", 0, func() error {
		if _, err := swapClaims.Patch(ctx, swap.Name, apitypes.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			return err
		}
		return swapClaims.Delete(ctx, swap.Name, metav1.DeleteOptions{})
	})
	// A pod's claims from its template: the claim controller's copies wait
	// for neither webhook (the template was reviewed when it was written).
	claimController := s.ClientForUser(t, "system:serviceaccount:kube-system:resource-claim-controller").ResourceV1().ResourceClaims("swap-users")
	templatePod := pod("swap-users", "template-user", nil)
	copyOf := func(spec resourceapi.ResourceClaimSpec) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "template-user-swap-",
			Annotations:     map[string]string{resourceapi.PodResourceClaimAnnotation: "swap"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: templatePod.Name, UID: templatePod.UID, Controller: ptr.To(true)}}},
			Spec: spec}
	}
	f.do("create a claim from a SwapConfig template (resourceclaim controller)", 0, func() error {
		_, err := claimController.Create(ctx, copyOf(swapClaim("", "256Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":80}`).Spec), metav1.CreateOptions{})
		return err
	})
	f.do("create a claim from a swap template (resourceclaim controller)", 0, func() error {
		_, err := claimController.Create(ctx, copyOf(swapClaim("", "300M", "").Spec), metav1.CreateOptions{})
		return err
	})
	for _, ns := range []string{"others", "swap-users"} {
		f.do("delete namespace "+ns, 0, func() error {
			return s.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		})
	}
	// What the driver refuses while it cannot check: a claim with invalid
	// or any dra.swap config (failurePolicy Fail).
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := hung.calls.Load()
	start := time.Now()
	_, err = s.Client.ResourceV1().ResourceClaims("later").Create(ctx, swapClaim("config", "256Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig"}`), metav1.CreateOptions{})
	f.rows = append(f.rows, fmt.Sprintf("%-70s %8s  calls to the controller: %d  (%v)", "create a claim with dra.swap config (refused: the webhook fails closed)",
		time.Since(start).Round(time.Millisecond), hung.calls.Load()-before, err))
	if err == nil || apierrors.IsAlreadyExists(err) {
		t.Errorf("a claim with dra.swap config was stored while the controller could not check it: %v", err)
	}
}
