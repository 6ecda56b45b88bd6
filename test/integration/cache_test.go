package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
	"github.com/dra-driver-swap/dra-driver-swap/test/noopdriver"
)

// TestControllerCacheHoldsWhatItReads: the controller's cache, as
// controller.CacheOptions configures it, against a real API server: the
// API server sends it only dra.swap ResourceSlices (the field selector
// spec.driver is one the API serves for slices), and a claim is kept
// trimmed, whatever the claim holds.
func TestControllerCacheHoldsWhatItReads(t *testing.T) {
	t.Parallel()
	s := framework.StartAPIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 3 {
		node := fmt.Sprintf("node-%d", i)
		for _, driver := range []string{v1alpha1.DriverName, noopdriver.DriverName} {
			if _, err := s.Client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
				Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
					Devices: []resourceapi.Device{{Name: "dev", Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"swap": {Value: resource.MustParse("4Gi")}}}}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := swapClaim("c", "1Gi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":80}`)
	claim.Labels = map[string]string{"app": "x"}
	claim.Annotations = map[string]string{"note": string(make([]byte, 8192))}
	stored, err := s.Client.ResourceV1().ResourceClaims(tenant).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "swap", Driver: v1alpha1.DriverName, Pool: "node-0", Device: "dev",
		ShareID: ptr.To(apitypes.UID("a1b2c3d4-0000-4000-8000-000000000001")), ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse("1Gi")},
	}}}}
	stored.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "uid-p"}}
	stored.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: v1alpha1.DriverName, Pool: "node-0", Device: "dev",
		ShareID: ptr.To("a1b2c3d4-0000-4000-8000-000000000001"), Data: &runtime.RawExtension{Raw: []byte(`{"limit":1073741824}`)}}}
	if stored, err = s.Client.ResourceV1().ResourceClaims(tenant).UpdateStatus(ctx, stored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	opts := controller.CacheOptions()
	opts.Scheme = clientgoscheme.Scheme
	c, err := cache.New(s.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{&resourceapi.ResourceSlice{}, &resourceapi.ResourceClaim{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !c.WaitForCacheSync(syncCtx) {
		t.Fatal("cache not synced")
	}

	slices := &resourceapi.ResourceSliceList{}
	if err := c.List(ctx, slices); err != nil {
		t.Fatal(err)
	}
	var drivers []string
	for _, sl := range slices.Items {
		drivers = append(drivers, sl.Spec.Driver)
	}
	if len(slices.Items) != 3 {
		t.Errorf("the cache holds %d slices of drivers %v, want the 3 of %s only", len(slices.Items), drivers, v1alpha1.DriverName)
	}
	for _, d := range drivers {
		if d != v1alpha1.DriverName {
			t.Errorf("the cache holds a slice of driver %s", d)
		}
	}

	got := &resourceapi.ResourceClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
		t.Fatal(err)
	}
	if got.UID != stored.UID || got.ResourceVersion != stored.ResourceVersion || len(got.Status.ReservedFor) != 1 ||
		got.Status.Allocation == nil || len(got.Status.Allocation.Devices.Results) != 1 || got.Status.Allocation.Devices.Results[0].Pool != "node-0" {
		t.Errorf("the cached claim lost what the controller reads: %+v", got)
	}
	if len(got.Labels)+len(got.Annotations)+len(got.Finalizers)+len(got.ManagedFields) > 0 || len(got.Spec.Devices.Requests)+len(got.Spec.Devices.Config) > 0 ||
		len(got.Status.Devices) > 0 || got.Status.Allocation.Devices.Results[0].ConsumedCapacity != nil {
		t.Errorf("the cached claim keeps what the controller never reads: %+v", got)
	}
}
