package controller

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
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
