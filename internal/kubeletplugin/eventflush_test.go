package kubeletplugin

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
)

// gatedSink writes once the test opens its gate.
type gatedSink struct {
	events.EventSink
	gate chan struct{}
}

func (s gatedSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	<-s.gate
	return s.EventSink.Create(ctx, event)
}

// TestNodeEventLedger: the plugin can wait, before it exits on purpose,
// for the Node events it told to be written by client-go's broadcaster,
// which writes them in the background; the wait is bounded, and events
// on other objects do not count.
func TestNodeEventLedger(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	ledger := newNodeEventLedger()
	gate := make(chan struct{})
	broadcaster := events.NewBroadcaster(ledgerSink{EventSink: gatedSink{EventSink: &events.EventSinkImpl{Interface: client.EventsV1()}, gate: gate}, ledger: ledger})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, "dra.swap")
	node := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}

	if !ledger.wait(ctx, time.Millisecond) {
		t.Fatal("nothing told, yet not flushed")
	}
	ledger.tell(publish.ReasonKubeletConfigUnreadable)
	recorder.Eventf(node, nil, corev1.EventTypeWarning, publish.ReasonKubeletConfigUnreadable, "ReadKubeletConfig", "replaced")
	if ledger.wait(ctx, 200*time.Millisecond) {
		t.Fatal("flushed before the sink wrote the event")
	}
	close(gate)
	if !ledger.wait(ctx, time.Minute) {
		t.Fatal("not flushed after the sink wrote the event")
	}
	list, err := client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Reason != publish.ReasonKubeletConfigUnreadable {
		t.Fatalf("events written: %+v, %v", list, err)
	}

	// A pod's event is not the Node's.
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	ledger.tell(publish.ReasonSwapBehaviorConflict)
	recorder.Eventf(pod, nil, corev1.EventTypeWarning, publish.ReasonSwapBehaviorConflict, "Test", "on a pod")
	if ledger.wait(ctx, 200*time.Millisecond) {
		t.Fatal("a pod's event counted as the Node's")
	}
}
