package kubeletplugin

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish/publishtest"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

// TestPublisherSwapBehaviorEvents: the publisher follows the kubelet's swap
// behavior from one rescan to the next. Under a behavior that gives
// containers swap of their own (LimitedSwap, WorkloadControlledSwap,
// Unknown) the node offers none, unless the policy names the behavior: the
// published device has capacity 0 and the taint kubelet-swap-behavior with
// the behavior as its value, prepare's offer is 0, the device is unhealthy
// with a short reason, and the Node is told once per change why and how to
// fix it; back under NoSwap the offer returns and the Node is told. Under a
// behavior the policy names, swap is offered and the Node is told what that
// risks.
func TestPublisherSwapBehaviorEvents(t *testing.T) {
	withBehavior := func(b string) discovery.Facts {
		f := publishtest.Facts(1 << 30)
		f.SwapBehavior = b
		return f
	}
	type step struct {
		behavior string
		// wantOffer is the published capacity (and prepare's offer).
		wantOffer int64
		// wantEvent is "type reason action", "" for no event; wantInNote
		// are in its note.
		wantEvent  string
		wantInNote []string
	}
	conflict := func(b string) string { return "Warning SwapBehaviorConflict TaintKubeletSwapBehavior" + b }
	tests := []struct {
		name   string
		unsafe []string
		steps  []step
	}{
		{name: "default: swap offered under NoSwap only", steps: []step{
			{behavior: "NoSwap", wantOffer: 1 << 30},
			{behavior: "LimitedSwap", wantEvent: conflict("LimitedSwap"), wantInNote: []string{
				"The node offers no swap to claims: its swap device has capacity 0 and the taint dra.swap/kubelet-swap-behavior=LimitedSwap:NoSchedule",
				"gives every Burstable container without a swap claim its own share of the node's swap", "promised twice",
				"set memorySwap.swapBehavior: NoSwap in the kubelet's configuration and restart the kubelet",
				"no reinstall", "add LimitedSwap to the chart's kubeletPlugin.unsafeOfferSwapUnder"}},
			{behavior: "LimitedSwap"},
			{behavior: "WorkloadControlledSwap", wantEvent: conflict("WorkloadControlledSwap"), wantInNote: []string{
				"taint dra.swap/kubelet-swap-behavior=WorkloadControlledSwap:NoSchedule", "KEP-5359", "set memorySwap.swapBehavior: NoSwap"}},
			{behavior: "Unknown", wantEvent: conflict("Unknown"), wantInNote: []string{
				"cannot be told (Unknown)", "point the chart's kubeletPlugin.kubeletConfig", "add Unknown to the chart's kubeletPlugin.unsafeOfferSwapUnder"}},
			{behavior: "NoSwap", wantOffer: 1 << 30, wantEvent: "Normal SwapBehaviorConflictCleared UntaintKubeletSwapBehavior", wantInNote: []string{
				"is NoSwap (it was Unknown)", "it offers 1Gi (taint dra.swap/kubelet-swap-behavior removed)"}},
			{behavior: "NoSwap", wantOffer: 1 << 30},
		}},
		{name: "under the first sync", steps: []step{
			{behavior: "WorkloadControlledSwap", wantEvent: conflict("WorkloadControlledSwap"), wantInNote: []string{"KEP-5359"}},
		}},
		{name: "LimitedSwap offered knowingly", unsafe: []string{"LimitedSwap"}, steps: []step{
			{behavior: "LimitedSwap", wantOffer: 1 << 30, wantEvent: "Warning SwapOfferedUnsafely OfferUnderLimitedSwap", wantInNote: []string{
				"The node offers 1Gi of swap to claims although the kubelet's memorySwap.swapBehavior is LimitedSwap", "promised twice",
				"OOM-killed below its claim", "kubeletPlugin.unsafeOfferSwapUnder (--unsafe-offer-swap-under) names LimitedSwap"}},
			{behavior: "LimitedSwap", wantOffer: 1 << 30},
			{behavior: "WorkloadControlledSwap", wantEvent: conflict("WorkloadControlledSwap")},
			{behavior: "NoSwap", wantOffer: 1 << 30, wantEvent: "Normal SwapBehaviorConflictCleared UntaintKubeletSwapBehavior"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := &publishtest.Node{}
			reporter := &publishtest.EventRecorder{}
			written := &publishtest.SliceRecorder{}
			p := &publish.Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1, UnsafeOfferUnder: tc.unsafe}, Node: node, Reporter: reporter}
			if err := p.TakeOver(ctx, written); err != nil {
				t.Fatal(err)
			}
			d := &driver{poolName: "node-a", publisher: p}
			for i, s := range tc.steps {
				before := len(reporter.Events)
				node.Facts = withBehavior(s.behavior)
				if _, err := p.Sync(ctx); err != nil {
					t.Fatalf("step %d (%s): %v", i, s.behavior, err)
				}
				dev := written.Published[len(written.Published)-1].Pools["node-a"].Slices[0].Devices[0]
				if got := dev.Capacity[v1alpha1.CapacitySwap].Value; got.Value() != s.wantOffer || p.Offer() != s.wantOffer {
					t.Errorf("step %d (%s): capacity %v, prepare's offer %d; want %d", i, s.behavior, got.String(), p.Offer(), s.wantOffer)
				}
				var wantTaints []string
				if s.wantOffer == 0 {
					wantTaints = []string{v1alpha1.TaintKubeletSwapBehavior + "=" + s.behavior + ":NoSchedule"}
				}
				if got := deviceTaintList(dev.Taints); strings.Join(got, ",") != strings.Join(wantTaints, ",") {
					t.Errorf("step %d (%s): taints %v, want %v", i, s.behavior, got, wantTaints)
				}
				if b := dev.Attributes[v1alpha1.AttrSwapBehavior].StringValue; b == nil || *b != s.behavior {
					t.Errorf("step %d: swapBehavior attribute %v, want %s", i, b, s.behavior)
				}
				h := d.healthReport().Devices[0]
				if (h.Health == draplugin.HealthStatusHealthy) != (s.wantOffer > 0) {
					t.Errorf("step %d (%s): health %s %q", i, s.behavior, h.Health, h.Message)
				}
				if s.wantOffer == 0 && (!strings.Contains(h.Message, s.behavior) || len(h.Message) > 256) {
					t.Errorf("step %d (%s): health message %q does not name the behavior in one short line", i, s.behavior, h.Message)
				}

				got := reporter.Events[before:]
				if s.wantEvent == "" {
					if len(got) != 0 {
						t.Errorf("step %d (%s): events %+v, want none", i, s.behavior, got)
					}
					continue
				}
				var mine []publishtest.NodeEvent
				for _, e := range got {
					if !strings.HasPrefix(e.Reason, "KubeletConfig") {
						mine = append(mine, e)
					}
				}
				if len(mine) != 1 || mine[0].EventType+" "+mine[0].Reason+" "+mine[0].Action != s.wantEvent {
					t.Fatalf("step %d (%s): events %+v, want one %s", i, s.behavior, got, s.wantEvent)
				}
				for _, want := range s.wantInNote {
					if !strings.Contains(mine[0].Message, want) {
						t.Errorf("step %d (%s): note %q lacks %q", i, s.behavior, mine[0].Message, want)
					}
				}
				if n := len(mine[0].Message); n > eventmsg.NoteLimit || strings.Contains(mine[0].Message, eventmsg.Marker) {
					t.Errorf("step %d (%s): note of %d bytes, cut or over the API's limit: %q", i, s.behavior, n, mine[0].Message)
				}
			}
		})
	}
}

// TestPublisherOvercommitUnderSwapBehavior: claims prepared before the
// kubelet turned to LimitedSwap hold swap the node no longer offers: the
// overcommit taint's event names that cause instead of a shrunken swap.
func TestPublisherOvercommitUnderSwapBehavior(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := &publishtest.Node{Facts: publishtest.Facts(1 << 30), Prepared: 256 << 20}
	reporter := &publishtest.EventRecorder{}
	p := &publish.Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, Node: node, Reporter: reporter}
	if err := p.TakeOver(ctx, &publishtest.SliceRecorder{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	node.Facts.SwapBehavior = v1alpha1.SwapBehaviorLimitedSwap
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var overcommit *publishtest.NodeEvent
	for i, e := range reporter.Events {
		if e.Reason == publish.ReasonOvercommitted {
			overcommit = &reporter.Events[i]
		}
	}
	if overcommit == nil || overcommit.EventType != corev1.EventTypeWarning ||
		!strings.Contains(overcommit.Message, "hold 256Mi but the node offers 0 now") ||
		!strings.Contains(overcommit.Message, "it offers none: the kubelet's swapBehavior LimitedSwap") ||
		strings.Contains(overcommit.Message, "shrank") {
		t.Errorf("overcommit event %+v; events %+v", overcommit, reporter.Events)
	}
}

func deviceTaintList(taints []resourceapi.DeviceTaint) []string {
	var out []string
	for _, t := range taints {
		s := t.Key
		if t.Value != "" {
			s += "=" + t.Value
		}
		out = append(out, s+":"+string(t.Effect))
	}
	return out
}

// TestPublisherKubeletConfigReplaced: a kubelet configuration file
// replaced on the host after the plugin's container mounted it is stale
// in the container for good. The publisher publishes the behavior as
// Unknown (so, by default, no swap), tells the Node that the plugin
// restarts, and Sync and Run return discovery.ErrKubeletConfigReplaced,
// on which the plugin exits so that its restarted container mounts the
// new file.
func TestPublisherKubeletConfigReplaced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := &publishtest.Node{Facts: publishtest.Facts(1 << 30)}
	reporter := &publishtest.EventRecorder{}
	written := &publishtest.SliceRecorder{}
	p := &publish.Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, Node: node, Reporter: reporter}
	if err := p.TakeOver(ctx, written); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	node.Facts.SwapBehavior = v1alpha1.SwapBehaviorUnknown
	node.Facts.SwapBehaviorProblem = "kubelet configuration /host/var/lib/kubelet/config.yaml: " + discovery.ErrKubeletConfigReplaced.Error()
	node.Facts.KubeletConfigReplaced = true
	published, err := p.Sync(ctx)
	if !published || !errors.Is(err, discovery.ErrKubeletConfigReplaced) {
		t.Fatalf("Sync = %v, %v; want published and ErrKubeletConfigReplaced", published, err)
	}
	dev := written.Published[len(written.Published)-1].Pools["node-a"].Slices[0].Devices[0]
	if got := dev.Capacity[v1alpha1.CapacitySwap].Value; !got.IsZero() || len(dev.Taints) != 1 || dev.Taints[0].Value != v1alpha1.SwapBehaviorUnknown {
		t.Errorf("published capacity %v, taints %v; want 0 and the Unknown behavior's taint", got.String(), dev.Taints)
	}
	var told bool
	for _, e := range reporter.Events {
		told = told || e.Reason == publish.ReasonKubeletConfigUnreadable && strings.Contains(e.Message, "replaced on the host") &&
			strings.Contains(e.Message, "The plugin exits, and its restarted container reads the new file")
	}
	if !told {
		t.Errorf("events %+v, want a KubeletConfigUnreadable saying the file was replaced and the plugin restarts", reporter.Events)
	}
	var conflict bool
	for _, e := range reporter.Events {
		conflict = conflict || e.Reason == publish.ReasonSwapBehaviorConflict && strings.Contains(e.Message, "wait for the plugin's restart") &&
			!strings.Contains(e.Message, "point the chart's kubeletPlugin.kubeletConfig")
	}
	if !conflict {
		t.Errorf("events %+v, want a SwapBehaviorConflict telling to wait for the restart, not to fix the configuration's path", reporter.Events)
	}
	// Run (a new instance: TakeOver runs once) stops at its first sync.
	restarted := &publish.Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, Node: node}
	if err := restarted.Run(ctx, written, time.Hour); !errors.Is(err, discovery.ErrKubeletConfigReplaced) {
		t.Errorf("Run = %v, want ErrKubeletConfigReplaced", err)
	}
}
