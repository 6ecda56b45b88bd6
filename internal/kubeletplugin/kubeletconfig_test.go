package kubeletplugin

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish/publishtest"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

// TestPublisherKubeletConfigEvents: a kubelet configuration that cannot
// be read is published as swapBehavior Unknown and told to the Node once
// per change (a Warning when it becomes unreadable, the first sync
// included, a Normal event when it is read again), under an action no
// taint event uses, with a bounded note.
func TestPublisherKubeletConfigEvents(t *testing.T) {
	unreadable := func(problem string) discovery.Facts {
		f := publishtest.Facts(1 << 30)
		f.SwapBehavior, f.SwapBehaviorProblem = v1alpha1.SwapBehaviorUnknown, problem
		return f
	}
	steps := []struct {
		name       string
		facts      discovery.Facts
		wantEvent  string // reason, "" for none
		wantInNote string
	}{
		{name: "missing from the start", facts: unreadable("read kubelet configuration: open /host/etc/kubelet.yaml: no such file or directory"),
			wantEvent: publish.ReasonKubeletConfigUnreadable, wantInNote: "/host/etc/kubelet.yaml"},
		{name: "still missing", facts: unreadable("read kubelet configuration: open /host/etc/kubelet.yaml: no such file or directory")},
		{name: "another problem, still unreadable", facts: unreadable("parse kubelet configuration /host/etc/kubelet.yaml: error")},
		{name: "read again", facts: publishtest.Facts(1 << 30), wantEvent: publish.ReasonKubeletConfigRead, wantInNote: "swapBehavior NoSwap"},
		{name: "still readable", facts: publishtest.Facts(1 << 30)},
		{name: "a long problem is cut", facts: unreadable(strings.Repeat("x", 5000)), wantEvent: publish.ReasonKubeletConfigUnreadable, wantInNote: eventmsg.Marker},
	}

	_, ctx := ktesting.NewTestContext(t)
	node := &publishtest.Node{}
	reporter := &publishtest.EventRecorder{}
	written := &publishtest.SliceRecorder{}
	p := &publish.Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, Node: node, Reporter: reporter}
	if err := p.TakeOver(ctx, written); err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		before := len(reporter.Events)
		node.Facts = s.facts
		if _, err := p.Sync(ctx); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		// The swap behavior's own events (Unknown is a conflict) are
		// TestPublisherSwapBehaviorEvents'.
		var got []publishtest.NodeEvent
		for _, e := range reporter.Events[before:] {
			if strings.HasPrefix(e.Reason, "KubeletConfig") {
				got = append(got, e)
			}
		}
		if s.wantEvent == "" {
			if len(got) != 0 {
				t.Errorf("%s: events %+v, want none", s.name, got)
			}
			continue
		}
		if len(got) != 1 {
			t.Fatalf("%s: events %+v, want one %s", s.name, got, s.wantEvent)
		}
		e := got[0]
		wantType := corev1.EventTypeWarning
		if s.wantEvent == publish.ReasonKubeletConfigRead {
			wantType = corev1.EventTypeNormal
		}
		if e.EventType != wantType || e.Reason != s.wantEvent || e.Action != "ReadKubeletConfig" {
			t.Errorf("%s: event %s/%s/%s, want %s/%s/ReadKubeletConfig", s.name, e.EventType, e.Reason, e.Action, wantType, s.wantEvent)
		}
		if !strings.Contains(e.Message, s.wantInNote) || len(e.Message) > eventmsg.NoteLimit {
			t.Errorf("%s: note (%d bytes) %q, want at most %d bytes mentioning %q", s.name, len(e.Message), e.Message, eventmsg.NoteLimit, s.wantInNote)
		}
		if e.Action == publish.TaintAction("Taint", v1alpha1.TaintOvercommitted) || e.Action == publish.TaintAction("Untaint", v1alpha1.TaintOvercommitted) {
			t.Errorf("%s: action %s is a taint's", s.name, e.Action)
		}
	}
	// What the last step published: the behavior as Unknown.
	last := written.Published[len(written.Published)-1].Pools["node-a"].Slices[0].Devices[0]
	if got := last.Attributes[v1alpha1.AttrSwapBehavior].StringValue; got == nil || *got != v1alpha1.SwapBehaviorUnknown {
		t.Errorf("published swapBehavior %v, want %s", got, v1alpha1.SwapBehaviorUnknown)
	}
}

// TestKubeletConfigReadableMetric: dra_swap_kubelet_config_readable
// follows the last discovery.
func TestKubeletConfigReadableMetric(t *testing.T) {
	m := NewMetrics()
	for _, readable := range []bool{false, true, false} {
		m.setKubeletConfigReadable(readable)
		want := "dra_swap_kubelet_config_readable 0\n"
		if readable {
			want = "dra_swap_kubelet_config_readable 1\n"
		}
		if page := scrapeHandler(t, m); !strings.Contains(page, want) {
			t.Errorf("readable=%v: metrics lack %q", readable, want)
		}
	}
}
