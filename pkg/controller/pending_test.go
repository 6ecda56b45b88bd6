package controller

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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
