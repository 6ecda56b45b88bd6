package publish

import (
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish/publishtest"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

// TestPublisherHookEvents: a hook that does not run withdraws the node's
// offer (capacity 0, usable false, the no-usable-swap taint, the reason
// as the device's health), told to the Node once; when it runs again the
// offer returns, with a Normal event.
func TestPublisherHookEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const problem = "the hook /opt/dra-swap/bin/dra-swap-hook, which the runtime runs for every container with a swap claim, cannot run where the plugin installed it: permission denied: its directory is on a noexec mount"
	node := &publishtest.Node{Facts: publishtest.Facts(1 << 30)}
	node.Facts.HookProblem = problem
	reporter := &publishtest.EventRecorder{}
	written := &publishtest.SliceRecorder{}
	p := &Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, Node: node, Reporter: reporter}
	if err := p.TakeOver(ctx, written); err != nil {
		t.Fatal(err)
	}
	sync := func(what string) {
		t.Helper()
		if _, err := p.Sync(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	sync("the hook does not run")
	dev, reason := p.Device()
	if reason != problem || p.Offer() != 0 || len(dev.Taints) != 1 || dev.Taints[0].Key != v1alpha1.TaintNoUsableSwap ||
		*dev.Attributes[v1alpha1.AttrUsable].BoolValue {
		t.Fatalf("device %+v, reason %q, offer %d; want no offer, tainted %s, with the hook's problem", dev, reason, p.Offer(), v1alpha1.TaintNoUsableSwap)
	}
	if len(reporter.Events) != 1 || reporter.Events[0].Reason != ReasonHookNotRunnable || reporter.Events[0].EventType != "Warning" ||
		reporter.Events[0].Action != "RunHook" || !strings.Contains(reporter.Events[0].Message, "noexec mount") {
		t.Fatalf("events %+v, want one %s", reporter.Events, ReasonHookNotRunnable)
	}
	sync("still")
	if len(reporter.Events) != 1 {
		t.Errorf("events %+v, want no more while nothing changed", reporter.Events)
	}
	node.Facts.HookProblem = ""
	sync("runs again")
	if _, reason := p.Device(); reason != "" || p.Offer() != 1<<30 {
		t.Errorf("after the hook runs: reason %q, offer %d; want the swap offered", reason, p.Offer())
	}
	if len(reporter.Events) != 2 || reporter.Events[1].Reason != ReasonHookRuns || reporter.Events[1].EventType != "Normal" {
		t.Errorf("events %+v, want a %s", reporter.Events, ReasonHookRuns)
	}
}
