package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// TestSwapUnavailableEventStored: the explainer's SwapUnavailable event
// for a pod that waits while 40 nodes offer swap goes through a real
// events broadcaster (events.k8s.io/v1, as the controller's recorder) to
// the real kube-apiserver, which stores it: its note fits the API's
// 1,024-byte limit (listing every node made 4 kB, which the API server
// refused and the broadcaster dropped).
func TestSwapUnavailableEventStored(t *testing.T) {
	t.Parallel()
	const ns, nodes = "waiting", 40
	s := framework.StartAPIServer(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "dra.swap"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: v1alpha1.DriverSelector(v1alpha1.DriverName)}}}}}
	if _, err := s.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		name := fmt.Sprintf("worker-%02d", i)
		f := discovery.Facts{TotalBytes: 4 << 30, Medium: discovery.MediumSSD, CgroupVersion: 2, SwapControl: true, SwapBehavior: "NoSwap",
			Devices: []discovery.SwapDevice{{Path: "/swapfile", Type: "file", SizeBytes: 4 << 30}}}
		dev, _ := swapdevice.Device(f, map[string]string{podlabels.Hostname: name}, swapdevice.Policy{OvercommitRatio: 1})
		rs := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-dra.swap"},
			Spec: resourceapi.ResourceSliceSpec{Driver: v1alpha1.DriverName, NodeName: ptr.To(name),
				Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}, Devices: []resourceapi.Device{*dev}}}
		if _, err := s.Client.ResourceV1().ResourceSlices().Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Client.ResourceV1().ResourceClaims(ns).Create(ctx, swapClaim("waits", "64Gi", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := s.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "waits"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To("waits")}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/40 nodes are available: 40 cannot allocate all claims."}}
	if _, err := s.Client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	reader, err := client.New(s.Config, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: s.Client.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer broadcaster.Shutdown()
	explainer := &controller.PendingExplainer{Client: reader, Recorder: broadcaster.NewRecorder(clientgoscheme.Scheme, "dra-swap-controller")}
	if _, err := explainer.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "waits"}}); err != nil {
		t.Fatal(err)
	}

	var note string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := s.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.Reason == controller.ReasonSwapUnavailable && ev.Regarding.Name == "waits" {
				note = ev.Note
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event stored for the pod (the API server refuses a note over %d bytes): %v", controller.ReasonSwapUnavailable, eventmsg.NoteLimit, err)
	}
	t.Logf("stored note of %d bytes: %s", len(note), note)
	for _, want := range []string{"Swap claim waits cannot be allocated on any node now: node worker-00: offers 4Gi", "… and 3"} {
		if !strings.Contains(note, want) {
			t.Errorf("the note lacks %q", want)
		}
	}
	if len(note) > eventmsg.NoteLimit || !utf8.ValidString(note) {
		t.Errorf("stored note of %d bytes, valid UTF-8 %v", len(note), utf8.ValidString(note))
	}
}
