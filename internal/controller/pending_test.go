package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
)

type recordedEvent struct{ object, eventType, reason, note string }

type fakeRecorder struct{ events []recordedEvent }

func (f *fakeRecorder) Eventf(regarding runtime.Object, _ runtime.Object, eventType, reason, _ string, note string, args ...any) {
	name := ""
	if m, ok := regarding.(metav1.Object); ok {
		name = m.GetName()
	}
	f.events = append(f.events, recordedEvent{name, eventType, reason, fmt.Sprintf(note, args...)})
}

func TestPendingExplainer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "dra.swap"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "dra.swap"`}}}}}
	claim := func(name, class string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}}}}
	}
	pending := func(name, claimName string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec:   corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: ptr.To(claimName)}}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}}
	}
	tainted := swapSlice("node-a", "NoSwap", "1Gi")
	tainted.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: "dra.swap/swap-full", Value: "used-92", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	gpuPod := pending("gpu-pod", "gpu")
	c := newClient(class, tainted, swapSlice("node-b", "NoSwap", "512Mi"), claim("swap", "dra.swap"), claim("gpu", "gpu.example.com"),
		pending("waits", "swap"), gpuPod)
	rec := &fakeRecorder{}
	e := &PendingExplainer{Client: c, Recorder: rec}
	for range 2 { // told once while nothing changes
		res, err := e.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "waits"}})
		if err != nil || res.RequeueAfter == 0 {
			t.Fatalf("Reconcile = %+v, %v", res, err)
		}
	}
	if len(rec.events) != 1 || rec.events[0].reason != ReasonSwapUnavailable ||
		!strings.Contains(rec.events[0].note, "node node-a: swap device tainted dra.swap/swap-full=used-92:NoSchedule") ||
		!strings.Contains(rec.events[0].note, "node node-b: offers 512Mi") {
		t.Fatalf("events %+v", rec.events)
	}
	// A pod waiting for another driver's device is none of its business.
	if _, err := e.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "gpu-pod"}}); err != nil {
		t.Fatal(err)
	}
	if len(rec.events) != 1 {
		t.Errorf("events for another driver's pod: %+v", rec.events[1:])
	}
}

func swapClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "dra.swap"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "dra.swap"`}}}}}
}

func swapClaim(name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "dra.swap"}}}}}}
}

func pendingSwapPod(name, uid string, claims ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}}
	for i, c := range claims {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: fmt.Sprintf("c%d", i), ResourceClaimName: ptr.To(c)})
	}
	return pod
}

// TestPendingExplainerForgetsDeletedPods churns pending swap pods (created,
// told, deleted, reconciled as the delete event does): the explainer keeps
// nothing for a pod that is gone, also when a pod of the same name comes
// back with another UID.
func TestPendingExplainerForgetsDeletedPods(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := newClient(swapClass(), swapClaim("swap"), swapSlice("node-a", "NoSwap", "1Gi"))
	rec := &fakeRecorder{}
	e := &PendingExplainer{Client: c, Recorder: rec}
	const churn = 1000
	for i := range churn {
		// Names repeat: a StatefulSet-like pod recreated under its name.
		pod := pendingSwapPod(fmt.Sprintf("churn-%d", i%100), fmt.Sprintf("uid-%d", i), "swap")
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: pod.Name}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.remembered(); n != 0 {
		t.Errorf("after %d pending swap pods came and went the explainer remembers %d", churn, n)
	}
	// Every pod was told once, including the ones reusing a name.
	if len(rec.events) != churn {
		t.Errorf("%d events for %d pods", len(rec.events), churn)
	}
}

// TestPendingExplainerBoundsTheEvent: with 40 swap nodes (and a pod with
// many claims of long names) the event names the first few nodes and counts
// the rest, within the API server's 1,024-byte limit on a note.
func TestPendingExplainerBoundsTheEvent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	long := func(i int) string { return fmt.Sprintf("%s-%02d", strings.Repeat("claim", 40), i) }
	objs := []client.Object{swapClass()}
	var claims []string
	for i := range 6 {
		claims = append(claims, long(i))
		objs = append(objs, swapClaim(long(i)))
	}
	objs = append(objs, swapClaim("swap"))
	for i := range 40 {
		s := swapSlice(fmt.Sprintf("worker-%02d", i), "NoSwap", "4Gi")
		if i%2 == 0 {
			s.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{
				{Key: "dra.swap/memory-pressure", Value: "some-avg10-" + strings.Repeat("9", 40), Effect: resourceapi.DeviceTaintEffectNoSchedule},
				{Key: "dra.swap/swap-full", Value: "used-92", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		objs = append(objs, s)
	}
	for _, tc := range []struct {
		name   string
		claims []string
		want   []string
	}{
		{"short names", []string{"swap"}, []string{
			"Swap claim swap cannot be allocated on any node now: node worker-00: swap device tainted dra.swap/memory-pressure=",
			"; node worker-04: swap device tainted",
			"; … and 35 more (a claim may tolerate a taint"}},
		{"one claim", claims[:1], []string{
			"Swap claim " + long(0) + " cannot be allocated on any node now: ",
			"node worker-00: swap device tainted dra.swap/memory-pressure=",
			"node worker-01: offers 4Gi of swap in all",
			"… and 3", // at least 30 more
			`(a claim may tolerate a taint; see the README's "Swap pressure")`}},
		{"many claims", claims, []string{
			"Swap claim " + long(0) + ", … and 5 more cannot be allocated on any node now: ",
			"node worker-00: swap device tainted dra.swap/memory-pressure=",
			"… and 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(append(objs, pendingSwapPod("waits", "uid-waits", tc.claims...))...)
			rec := &fakeRecorder{}
			e := &PendingExplainer{Client: c, Recorder: rec}
			if _, err := e.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "waits"}}); err != nil {
				t.Fatal(err)
			}
			if len(rec.events) != 1 {
				t.Fatalf("events %+v", rec.events)
			}
			note := rec.events[0].note
			t.Logf("%d bytes: %s", len(note), note)
			if len(note) > eventmsg.NoteLimit || !utf8.ValidString(note) {
				t.Errorf("the note has %d bytes (limit %d), valid UTF-8 %v: %s", len(note), eventmsg.NoteLimit, utf8.ValidString(note), note)
			}
			for _, want := range tc.want {
				if !strings.Contains(note, want) {
					t.Errorf("the note lacks %q: %s", want, note)
				}
			}
		})
	}
}

// TestPendingExplainerExtendedResources: a pod that asks for swap as an
// extended resource has no claim while it waits (the scheduler makes one
// only once it found a node); the explainer reads the request and the
// class that backs it, as the scheduler maps it.
func TestPendingExplainerExtendedResources(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	classNamed := func(name, resourceName, driver string, created time.Time) *resourceapi.DeviceClass {
		c := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}}}
		if resourceName != "" {
			c.Spec.ExtendedResourceName = ptr.To(resourceName)
		}
		return c
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	objs := []client.Object{
		swapClass(), swapClaim("swap"), swapSlice("node-a", "NoSwap", "1Gi"),
		classNamed("gpu.example.com", "", "gpu.example.com", t0),
		classNamed("swap-named", "example.com/swap", "dra.swap", t0),
		// Two classes name example.com/moved: the scheduler takes the newer.
		classNamed("moved-old", "example.com/moved", "dra.swap", t0),
		classNamed("moved-new", "example.com/moved", "gpu.example.com", t0.Add(time.Hour)),
		classNamed("back-old", "example.com/back", "gpu.example.com", t0),
		classNamed("back-new", "example.com/back", "dra.swap", t0.Add(time.Hour)),
	}
	const implicit = "deviceclass.resource.kubernetes.io/dra.swap"
	for _, tc := range []struct {
		name     string
		requests map[string]string
		claims   []string
		status   string // the pod's extended-resource claim, named in its status
		want     string // "": no event
	}{
		{name: "the class's implicit name", requests: map[string]string{implicit: "1"},
			want: "Swap extended resource " + implicit + " cannot be allocated on any node now: node node-a: offers 1Gi"},
		{name: "more devices than a node has", requests: map[string]string{implicit: "2"},
			want: "Swap extended resource " + implicit + ": 2 (each node has one swap device, so only 1 can be allocated) cannot be allocated"},
		{name: "a name the swap class gives", requests: map[string]string{"example.com/swap": "1"},
			want: "Swap extended resource example.com/swap cannot be allocated"},
		{name: "the newer class that names it is a swap class", requests: map[string]string{"example.com/back": "1"},
			want: "Swap extended resource example.com/back cannot be allocated"},
		{name: "the newer class that names it is another driver's", requests: map[string]string{"example.com/moved": "1"}},
		{name: "another driver's class", requests: map[string]string{"deviceclass.resource.kubernetes.io/gpu.example.com": "1"}},
		{name: "no class backs it", requests: map[string]string{"example.com/unbacked": "1"}},
		{name: "a claim and an extended resource", requests: map[string]string{implicit: "1"}, claims: []string{"swap"},
			want: "Swap claim swap and extended resource " + implicit + " cannot be allocated"},
		{name: "its claim exists: the claim is explained", requests: map[string]string{implicit: "1"}, status: "swap",
			want: "Swap claim swap cannot be allocated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := pendingSwapPod("waits", "uid-waits", tc.claims...)
			limits := corev1.ResourceList{}
			for name, q := range tc.requests {
				limits[corev1.ResourceName(name)] = resource.MustParse(q)
			}
			pod.Spec.Containers = []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Limits: limits}}}
			if tc.status != "" {
				pod.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: tc.status}
			}
			trimmed, err := trimPod(pod) // what the cache holds
			if err != nil {
				t.Fatal(err)
			}
			c := newClient(append(objs, trimmed.(*corev1.Pod))...)
			rec := &fakeRecorder{}
			e := &PendingExplainer{Client: c, Recorder: rec}
			if _, err := e.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "waits"}}); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(rec.events) > 0:
				t.Errorf("events %+v, want none", rec.events)
			case tc.want != "" && (len(rec.events) != 1 || !strings.Contains(rec.events[0].note, tc.want)):
				t.Errorf("events %+v, want one containing %q", rec.events, tc.want)
			}
		})
	}
}
