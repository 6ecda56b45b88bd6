package kubeletplugin

import (
	"strings"
	"testing"

	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish/publishtest"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

// TestHealthReport: the health the kubelet shows for the swap device in
// the status of the pods using it, after each sequence of syncs (the
// node's swap and what its prepared claims hold at each).
func TestHealthReport(t *testing.T) {
	type node struct{ total, prepared int64 }
	for _, tc := range []struct {
		name        string
		syncs       []node
		wantHealth  draplugin.HealthStatus
		wantMessage string // "" for none
	}{
		{name: "healthy", syncs: []node{{1 << 30, 768 << 20}}, wantHealth: draplugin.HealthStatusHealthy},
		{name: "claims hold the whole offer", syncs: []node{{1 << 30, 1 << 30}}, wantHealth: draplugin.HealthStatusHealthy},
		{name: "not discovered yet", wantHealth: draplugin.HealthStatusUnhealthy, wantMessage: "the node's swap is not discovered yet"},
		{name: "no swap", syncs: []node{{1 << 30, 0}, {0, 0}}, wantHealth: draplugin.HealthStatusUnhealthy,
			wantMessage: "no active swap device in /proc/swaps (swap is off)"},
		{name: "no swap under prepared claims says swap is off", syncs: []node{{1 << 30, 768 << 20}, {0, 768 << 20}},
			wantHealth: draplugin.HealthStatusUnhealthy, wantMessage: "no active swap device in /proc/swaps (swap is off)"},
		{name: "overcommitted", syncs: []node{{1 << 30, 768 << 20}, {512 << 20, 768 << 20}}, wantHealth: draplugin.HealthStatusUnhealthy,
			wantMessage: "swap overcommitted (held-768Mi-offered-512Mi): the claims prepared on the node hold more swap than it offers now"},
		{name: "swap back after overcommit", syncs: []node{{512 << 20, 768 << 20}, {1 << 30, 768 << 20}}, wantHealth: draplugin.HealthStatusHealthy},
		{name: "claims ended after overcommit", syncs: []node{{512 << 20, 768 << 20}, {512 << 20, 256 << 20}}, wantHealth: draplugin.HealthStatusHealthy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			fake := &publishtest.Node{}
			p := &publish.Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, Node: fake}
			if err := p.TakeOver(ctx, &publishtest.SliceRecorder{}); err != nil {
				t.Fatal(err)
			}
			for _, n := range tc.syncs {
				fake.Facts, fake.Prepared = publishtest.Facts(n.total), n.prepared
				if _, err := p.Sync(ctx); err != nil {
					t.Fatalf("sync %+v: %v", n, err)
				}
			}
			d := &driver{poolName: "node-a", publisher: p}
			report := d.healthReport()
			if len(report.Devices) != 1 {
				t.Fatalf("report has %d devices, want 1", len(report.Devices))
			}
			h := report.Devices[0]
			if h.PoolName != "node-a" || h.DeviceName != v1alpha1.DeviceName || h.HealthCheckTimeout != 3*healthInterval || h.LastUpdated.IsZero() {
				t.Errorf("device %+v", h)
			}
			if h.Health != tc.wantHealth || h.Message != tc.wantMessage {
				t.Errorf("health %s %q, want %s %q", h.Health, h.Message, tc.wantHealth, tc.wantMessage)
			}
			if len(h.Message) > 256 || strings.Contains(h.Message, "\n") {
				t.Errorf("message %q is not one short line", h.Message)
			}
		})
	}
}
