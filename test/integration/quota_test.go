package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/test/docs/mdblock"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

const (
	// quotaDevices is the quota's resource for the swap requests in a
	// namespace's ResourceClaims (Kubernetes' DRA quota by DeviceClass).
	quotaDevices = corev1.ResourceName("dra.swap" + corev1.ResourceClaimsPerClass)
	// quotaExtended is its resource for pods' requests of the class's
	// extended resource.
	quotaExtended = corev1.ResourceName(corev1.ResourceImplicitExtendedClaimsPerClass + "dra.swap")
	// extendedSwap is that extended resource.
	extendedSwap corev1.ResourceName = "deviceclass.resource.kubernetes.io/dra.swap"
)

// TestSwapClaimQuota: docs/sizing.md's ResourceQuota, as the doc shows it,
// caps a namespace's swap requests on a real kube-apiserver (its
// ResourceQuota admission), with the chart's DeviceClass: claims count one
// per request whatever their capacity (the quota counts no bytes), pods
// asking for the extended resource count at their creation, the claim the
// scheduler makes for such a pod does not count it twice, a claim of
// another class does not count, and the request past the cap is refused
// naming the quota. No kube-controller-manager runs here: the test writes
// the quota's status as the quota controller's first sync does (hard as
// in the spec, nothing used); from then on the admission plugin counts,
// as it does in a cluster.
func TestSwapClaimQuota(t *testing.T) {
	const ns = "team-a"
	s := framework.StartAPIServer(t)
	ctx := context.Background()
	quota := docQuota(t)
	limit := quota.Spec.Hard[quotaExtended]
	if limit.IsZero() {
		t.Fatalf("docs/sizing.md's ResourceQuota does not cap %s: %v", quotaExtended, quota.Spec.Hard)
	}
	n := int(limit.Value())
	if n < 3 {
		t.Fatalf("docs/sizing.md's ResourceQuota caps %s at %d: the test needs 3 or more", quotaExtended, n)
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "dra.swap"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: v1alpha1.DriverSelector(v1alpha1.DriverName)}}}}}
	if _, err := s.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyQuota(ctx, t, s.Client, ns, quota)
	used := func(name corev1.ResourceName) int64 {
		t.Helper()
		q, err := s.Client.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u := q.Status.Used[name]
		return u.Value()
	}

	// n-1 claims, each of another capacity, then a pod asking for the
	// extended resource: n requests.
	for i := range n - 1 {
		if _, err := s.Client.ResourceV1().ResourceClaims(ns).Create(ctx, quotaClaim(fmt.Sprintf("swap-%d", i), "dra.swap", int64(i+1)<<30), metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim %d of a cap of %d: %v", i+1, n, err)
		}
	}
	if got := used(quotaExtended); got != int64(n-1) {
		t.Errorf("%d claims of 1 GiB to %d GiB: quota used %s=%d, want %d (one per request)", n-1, n-1, quotaExtended, got, n-1)
	}
	pod, err := s.Client.CoreV1().Pods(ns).Create(ctx, extendedSwapPod("extended"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a pod asking for the extended resource beside %d claims, a cap of %d: %v", n-1, n, err)
	}
	// The claim the scheduler makes for it (owned by the pod, annotated)
	// is the pod's, counted once. The quota admission finds the owner in
	// its pod informer, which may not have the pod yet: until it does, the
	// claim counts on its own and is refused, and the scheduler retries. So
	// does the test, for a bounded time.
	var claimErr error
	tries := 0
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		tries++
		_, claimErr = s.Client.ResourceV1().ResourceClaims(ns).Create(ctx, schedulerClaim(pod), metav1.CreateOptions{})
		if claimErr == nil || !apierrors.IsForbidden(claimErr) || time.Now().After(deadline) {
			break
		}
	}
	if claimErr != nil {
		t.Errorf("the scheduler's claim for the extended-resource pod at the cap, %d tries in 30s: %v (counted twice?)", tries, claimErr)
	} else if tries > 1 {
		t.Logf("the scheduler's claim for the extended-resource pod: admitted at try %d (the quota's pod informer had not seen the pod)", tries)
	}
	if got := used(quotaExtended); got != int64(n) {
		t.Errorf("quota used %s=%d after %d claims and a pod with its claim, want %d", quotaExtended, got, n-1, n)
	}
	if _, err := s.Client.ResourceV1().ResourceClaims(ns).Create(ctx, quotaClaim("other-class", "other.example.com", 1<<20), metav1.CreateOptions{}); err != nil {
		t.Errorf("a claim of another class at the cap: %v (the quota counts dra.swap only)", err)
	}

	want := "exceeded quota: " + quota.Name + ", requested: "
	_, err = s.Client.ResourceV1().ResourceClaims(ns).Create(ctx, quotaClaim("one-too-many", "dra.swap", 1<<20), metav1.CreateOptions{})
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("a claim past the cap of %d: %v, want refused with %q", n, err, want)
	} else {
		t.Logf("a claim past the cap: %v", err)
	}
	_, err = s.Client.CoreV1().Pods(ns).Create(ctx, extendedSwapPod("one-too-many"), metav1.CreateOptions{})
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("an extended-resource pod past the cap of %d: %v, want refused with %q", n, err, want)
	} else {
		t.Logf("a pod past the cap: %v", err)
	}
	t.Logf("quota used: %s=%d, %s=%d", quotaExtended, used(quotaExtended), quotaDevices, used(quotaDevices))
}

// schedulerClaim is the claim the scheduler makes for a pod that asks for
// the extended resource: owned by the pod, annotated as such, a request
// for one device of the class without a capacity.
func schedulerClaim(pod *corev1.Pod) *resourceapi.ResourceClaim {
	c := quotaClaim(pod.Name+"-extended-resources", "dra.swap", 0)
	c.Spec.Devices.Requests[0].Exactly.Capacity = nil
	c.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
	return c
}

// docQuota is the ResourceQuota of docs/sizing.md: its one manifest of
// that kind.
func docQuota(t *testing.T) *corev1.ResourceQuota {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := mdblock.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var found []*corev1.ResourceQuota
	for _, b := range blocks {
		if b.File != filepath.Join("docs", "sizing.md") || b.Lang != mdblock.YAML {
			continue
		}
		objs, err := manifest.Decode(b.Text)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		for _, o := range objs {
			if o.GetKind() != "ResourceQuota" {
				continue
			}
			q := &corev1.ResourceQuota{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, q, true); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			found = append(found, q)
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/sizing.md holds %d ResourceQuota manifests, want 1", len(found))
	}
	return found[0]
}

// applyQuota creates the quota in ns and writes its status as the quota
// controller's first sync does: hard as the spec says, nothing used. It
// returns once the API server's quota admission enforces it: a server-side
// dry run of a claim asking for more devices than the cap is refused (a
// dry run is checked against the quota but not counted).
func applyQuota(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string, q *corev1.ResourceQuota) {
	t.Helper()
	q = q.DeepCopy()
	q.Namespace = ns
	created, err := client.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Hard = created.Spec.Hard.DeepCopy()
	created.Status.Used = corev1.ResourceList{}
	for name := range created.Spec.Hard {
		created.Status.Used[name] = resource.MustParse("0")
	}
	if _, err := client.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	limit := created.Spec.Hard[quotaExtended]
	probe := quotaClaim("probe", "dra.swap", 1<<20)
	probe.Spec.Devices.Requests[0].Exactly.Count = limit.Value() + 1
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"), nil
	})
	if err != nil {
		t.Fatalf("the quota's admission did not enforce %s within 30 s: %v", q.Name, err)
	}
}

// quotaClaim is a claim for one device of class with a capacity request.
func quotaClaim(name, class string, bytes int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "swap",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					"swap": *resource.NewQuantity(bytes, resource.BinarySI),
				}},
			},
		}}}},
	}
}

// extendedSwapPod is a pod whose container asks for swap as the class's
// extended resource (docs/usage.md).
func extendedSwapPod(name string) *corev1.Pod {
	one := resource.MustParse("1")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "worker",
			Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{extendedSwap: one, corev1.ResourceMemory: resource.MustParse("64Mi")},
				Requests: corev1.ResourceList{extendedSwap: one},
			},
		}}},
	}
}
