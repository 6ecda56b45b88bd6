package publish

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish/publishtest"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

func TestPublisherSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := &publishtest.Node{Facts: publishtest.Facts(1 << 30), NodeLabels: map[string]string{"topology.kubernetes.io/zone": "a"}}
	written := &publishtest.SliceRecorder{}
	p := &Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, Node: node}
	if err := p.TakeOver(ctx, written); err != nil {
		t.Fatal(err)
	}
	devices := func(i int) int { return len(written.Published[i].Pools["node-a"].Slices[0].Devices) }

	steps := []struct {
		name          string
		change        func()
		wantPublished bool
		wantDevices   int
		wantErr       string
	}{
		{name: "first sync publishes", change: func() {}, wantPublished: true, wantDevices: 1},
		{name: "nothing changed", change: func() {}},
		{name: "used swap changes nothing published", change: func() { node.Facts.UsedBytes = 5 }},
		{name: "swapon", change: func() { node.Facts = publishtest.Facts(2 << 30) }, wantPublished: true, wantDevices: 1},
		{name: "label change", change: func() { node.NodeLabels = map[string]string{"topology.kubernetes.io/zone": "b"} }, wantPublished: true, wantDevices: 1},
		{name: "discovery fails", change: func() { node.Err = errors.New("malformed /proc/swaps") }, wantErr: "malformed /proc/swaps"},
		{name: "swapoff", change: func() { node.Err = nil; node.Facts = publishtest.Facts(0) }, wantPublished: true, wantDevices: 1},
	}
	for _, s := range steps {
		before := len(written.Published)
		s.change()
		got, err := p.Sync(ctx)
		if s.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), s.wantErr) || !strings.Contains(err.Error(), "node-a") {
				t.Fatalf("%s: error %v", s.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got != s.wantPublished || (len(written.Published) > before) != s.wantPublished {
			t.Fatalf("%s: published=%v (calls %d→%d), want %v", s.name, got, before, len(written.Published), s.wantPublished)
		}
		if s.wantPublished && devices(len(written.Published)-1) != s.wantDevices {
			t.Fatalf("%s: %d devices, want %d", s.name, devices(len(written.Published)-1), s.wantDevices)
		}
	}
	if dev, reason := p.Device(); dev == nil || len(dev.Taints) != 1 || !strings.Contains(reason, "no active swap device") {
		t.Errorf("Device() = %v, %q", dev, reason)
	}
}

// When the node's swap shrinks below what its prepared claims hold, the
// device is tainted so the scheduler allocates no more claims there, and
// the Node is told; when swap returns, the taint goes.
func TestPublisherOvercommitTaint(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := &publishtest.Node{Facts: publishtest.Facts(1 << 30), Prepared: 768 << 20}
	written := &publishtest.SliceRecorder{}
	reporter := &publishtest.EventRecorder{}
	p := &Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, Node: node, Reporter: reporter}
	if err := p.TakeOver(ctx, written); err != nil {
		t.Fatal(err)
	}
	taints := func() []string {
		var keys []string
		for _, tt := range written.Published[len(written.Published)-1].Pools["node-a"].Slices[0].Devices[0].Taints {
			keys = append(keys, tt.Key+"="+tt.Value+":"+string(tt.Effect))
		}
		return keys
	}
	sync := func(what string) {
		t.Helper()
		if _, err := p.Sync(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	sync("1Gi offered, 768Mi held")
	if got := taints(); len(got) != 0 || len(reporter.Events) != 0 {
		t.Fatalf("taints %v, events %v; want none", got, reporter.Events)
	}
	if got := p.Offer(); got != 1<<30 {
		t.Errorf("Offer() = %d", got)
	}
	node.Facts = publishtest.Facts(512 << 20) // a swap file was turned off
	sync("512Mi offered")
	if got := taints(); len(got) != 1 || got[0] != v1alpha1.TaintOvercommitted+"=held-768Mi-offered-512Mi:NoSchedule" {
		t.Fatalf("taints %v, want %s", got, v1alpha1.TaintOvercommitted)
	}
	if !reporter.Tainted {
		t.Errorf("the metrics were not told of the overcommit")
	}
	events := func() []publishtest.NodeEvent { return reporter.Events }
	if len(events()) != 1 || events()[0].EventType != "Warning" || events()[0].Reason != ReasonOvercommitted ||
		!strings.Contains(events()[0].Message, "hold 768Mi but the node offers 512Mi") {
		t.Fatalf("events %+v", events())
	}
	n := len(written.Published)
	sync("nothing changed")
	if len(written.Published) != n || len(events()) != 1 {
		t.Errorf("an unchanged overcommit republished (%d→%d) or told the Node again (%d events)", n, len(written.Published), len(events()))
	}
	node.Facts = publishtest.Facts(1 << 30)
	sync("swap is back")
	if got := taints(); len(got) != 0 || reporter.Tainted {
		t.Fatalf("taints %v after swap returned (metrics told overcommitted: %v)", got, reporter.Tainted)
	}
	if len(events()) != 2 || events()[1].Reason != ReasonOvercommitCleared || events()[0].Action != "TaintOvercommitted" || events()[1].Action != "UntaintOvercommitted" {
		t.Fatalf("events %+v", events())
	}
}

func TestTaintAction(t *testing.T) {
	for _, tc := range []struct{ verb, key, want string }{
		{"Taint", "dra.swap/swap-full", "TaintSwapFull"},
		{"Untaint", "dra.swap/memory-pressure", "UntaintMemoryPressure"},
		{"Taint", v1alpha1.TaintOvercommitted, "TaintOvercommitted"},
		{"Taint", "plain", "TaintPlain"},
		{"Taint", "dra.swap/a--b", "TaintAB"},
	} {
		if got := TaintAction(tc.verb, tc.key); got != tc.want {
			t.Errorf("TaintAction(%q, %q) = %q, want %q", tc.verb, tc.key, got, tc.want)
		}
	}
}
