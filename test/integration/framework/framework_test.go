package framework_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// TestAPIServerServesDRA checks that the framework's apiserver serves
// resource.k8s.io/v1 with consumable capacity enabled, authenticates client
// certificates and authorizes with RBAC.
func TestAPIServerServesDRA(t *testing.T) {
	t.Parallel()
	api := framework.StartAPIServer(t)
	ctx := context.Background()
	const driver = "smoke.example.com"

	t.Run("DeviceClass", func(t *testing.T) {
		class := &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: driver},
			Spec: resourceapi.DeviceClassSpec{
				Selectors: []resourceapi.DeviceSelector{{
					CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`},
				}},
			},
		}
		if _, err := api.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create DeviceClass: %v", err)
		}
		got, err := api.Client.ResourceV1().DeviceClasses().Get(ctx, driver, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get DeviceClass: %v", err)
		}
		if len(got.Spec.Selectors) != 1 || got.Spec.Selectors[0].CEL == nil ||
			got.Spec.Selectors[0].CEL.Expression != class.Spec.Selectors[0].CEL.Expression {
			t.Errorf("DeviceClass selectors = %+v, want %+v", got.Spec.Selectors, class.Spec.Selectors)
		}
	})

	t.Run("ResourceSliceConsumableCapacity", func(t *testing.T) {
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "smoke-node-a"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   driver,
				Pool:     resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1},
				NodeName: ptr.To("node-a"),
				Devices: []resourceapi.Device{{
					Name:                     "swap",
					AllowMultipleAllocations: ptr.To(true),
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
						"mem": {
							Value: resource.MustParse("10Mi"),
							RequestPolicy: &resourceapi.CapacityRequestPolicy{
								Default: ptr.To(resource.MustParse("1Mi")),
								ValidRange: &resourceapi.CapacityRequestPolicyRange{
									Min:  ptr.To(resource.MustParse("1Mi")),
									Step: ptr.To(resource.MustParse("1Mi")),
									Max:  ptr.To(resource.MustParse("10Mi")),
								},
							},
						},
					},
				}},
			},
		}
		if _, err := api.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ResourceSlice: %v", err)
		}
		got, err := api.Client.ResourceV1().ResourceSlices().Get(ctx, slice.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get ResourceSlice: %v", err)
		}
		if len(got.Spec.Devices) != 1 {
			t.Fatalf("ResourceSlice has %d devices, want 1", len(got.Spec.Devices))
		}
		dev := got.Spec.Devices[0]
		// The apiserver drops the fields of a disabled feature gate
		// silently, so nil here means DRAConsumableCapacity is off.
		if dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
			t.Errorf("allowMultipleAllocations = %v, want true (is DRAConsumableCapacity enabled?)", dev.AllowMultipleAllocations)
		}
		capacity, ok := dev.Capacity["mem"]
		if !ok {
			t.Fatalf("capacity mem missing: %+v", dev.Capacity)
		}
		if capacity.Value.Cmp(resource.MustParse("10Mi")) != 0 {
			t.Errorf("capacity value = %s, want 10Mi", capacity.Value.String())
		}
		policy := capacity.RequestPolicy
		if policy == nil {
			t.Fatal("requestPolicy = nil, want set (is DRAConsumableCapacity enabled?)")
		}
		checkQuantity(t, "requestPolicy.default", policy.Default, "1Mi")
		if policy.ValidRange == nil {
			t.Fatal("requestPolicy.validRange = nil")
		}
		checkQuantity(t, "validRange.min", policy.ValidRange.Min, "1Mi")
		checkQuantity(t, "validRange.step", policy.ValidRange.Step, "1Mi")
		checkQuantity(t, "validRange.max", policy.ValidRange.Max, "10Mi")
	})

	t.Run("RBAC", func(t *testing.T) {
		user := api.ClientForUser(t, "alice", "team-a")
		_, err := user.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("list ResourceSlices as alice: err = %v, want Forbidden", err)
		}
		// The admin's kubeconfig works.
		cfg, err := clientcmd.BuildConfigFromFlags("", api.Kubeconfig(t))
		if err != nil {
			t.Fatalf("load kubeconfig: %v", err)
		}
		admin, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		list, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list ResourceSlices with the admin kubeconfig: %v", err)
		}
		if len(list.Items) == 0 {
			t.Errorf("admin sees no ResourceSlices")
		}
	})
}

func checkQuantity(t *testing.T, field string, got *resource.Quantity, want string) {
	t.Helper()
	if got == nil {
		t.Errorf("%s = nil, want %s", field, want)
		return
	}
	if got.Cmp(resource.MustParse(want)) != 0 {
		t.Errorf("%s = %s, want %s", field, got.String(), want)
	}
}

// TestStartAPIServerMissingBinary checks the framework's own error path in a
// child process: a missing kube-apiserver fails (never skips) the test with
// instructions to build it.
func TestStartAPIServerMissingBinary(t *testing.T) {
	if os.Getenv("FRAMEWORK_MISSING_BINARY_CHILD") == "1" {
		framework.StartAPIServer(t)
		return
	}
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestStartAPIServerMissingBinary$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "FRAMEWORK_MISSING_BINARY_CHILD=1", "KUBE_APISERVER=/nonexistent/kube-apiserver")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child test passed with a missing binary:\n%s", out)
	}
	for _, want := range []string{"--- FAIL", "/nonexistent/kube-apiserver", "hack/build-tools.sh"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Errorf("child test skipped:\n%s", out)
	}
}
