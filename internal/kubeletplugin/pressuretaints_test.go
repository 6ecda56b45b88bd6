package kubeletplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish/publishtest"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

// resourceSlice is a published slice of driver on node with the given
// pool and device taints.
func resourceSlice(name, driver, node, pool string, generation int64, taints ...resourceapi.DeviceTaint) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node),
			Pool:    resourceapi.ResourcePool{Name: pool, Generation: generation, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: v1alpha1.DeviceName, Taints: taints}},
		},
	}
}

// taintStrings are a published device's taints as key=value@time.
func taintStrings(r resourceslice.DriverResources, pool string) []string {
	var out []string
	for _, t := range r.Pools[pool].Slices[0].Devices[0].Taints {
		s := t.Key + "=" + t.Value
		if t.TimeAdded != nil {
			s += "@" + t.TimeAdded.UTC().Format(time.RFC3339)
		}
		out = append(out, s)
	}
	return out
}

// A restarted plugin starts from the taints already published: a
// swap-full taint set by the previous instance stays, with its value and
// time, until swap use has been below the clear threshold for ClearAfter;
// an overcommit taint stays without telling the Node again. Slices of
// other drivers, nodes or pools, and older generations, are not read.
func TestPublisherKeepsPublishedTaints(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	added := metav1.NewTime(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
	swapFull := resourceapi.DeviceTaint{Key: v1alpha1.TaintSwapFull, Value: "used-95", Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &added}
	overcommitted := resourceapi.DeviceTaint{Key: v1alpha1.TaintOvercommitted, Value: "held-768Mi-offered-512Mi", Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &added}
	other := resourceapi.DeviceTaint{Key: v1alpha1.TaintMemoryPressure, Value: "full-50.0", Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &added}
	client := fake.NewClientset(
		resourceSlice("current", "dra.swap", "node-a", "node-a", 3, overcommitted, swapFull),
		resourceSlice("older", "dra.swap", "node-a", "node-a", 2, other),
		resourceSlice("other-driver", "gpu.example.com", "node-a", "node-a", 9, other),
		resourceSlice("other-node", "dra.swap", "node-b", "node-b", 9, other),
		resourceSlice("other-pool", "dra.swap", "node-a", "node-b", 9, other),
	)

	root := t.TempDir()
	meminfo := func(usedPercent int64) {
		t.Helper()
		const total = 1000000
		content := "MemTotal: 4000000 kB\nSwapTotal: 1000000 kB\nSwapFree: " + strconv.FormatInt(total-total/100*usedPercent, 10) + " kB\n"
		if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "proc", "meminfo"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meminfo(85) // between the clear (80%) and set (90%) thresholds
	// PSI, quiet.
	if err := os.MkdirAll(filepath.Join(root, "proc", "pressure"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "pressure", "memory"),
		[]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := pressure.DefaultConfig()
	cfg.SetAfter, cfg.ClearAfter = 10*time.Second, 20*time.Second
	monitor, err := pressure.NewMonitor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(added.Add(time.Hour))
	reporter := &publishtest.EventRecorder{}
	node := &publishtest.Node{Facts: publishtest.Facts(512 << 20), Prepared: 768 << 20,
		Publish: func(ctx context.Context) (*resourceapi.Device, error) {
			return publish.PublishedDevice(ctx, client, "dra.swap", "node-a")
		}}
	w := newPressureWatcher(pressure.Source{Root: root}, monitor, NewMetrics(), reporter, clk)
	p := &publish.Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, LockPath: filepath.Join(t.TempDir(), "publish.lock"),
		Node: node, Reporter: reporter, Taints: w, Clock: clk}
	written := &publishtest.SliceRecorder{}
	if err := p.TakeOver(ctx, written); err != nil {
		t.Fatal(err)
	}
	published := func() []resourceslice.DriverResources { return written.Published }
	events := func() []string {
		var reasons []string
		for _, e := range reporter.Events {
			reasons = append(reasons, e.Reason)
		}
		return reasons
	}
	defer p.Close()
	resync := func(what string) {
		t.Helper()
		if _, err := p.Sync(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	resync("first publish after the restart")
	want := []string{v1alpha1.TaintOvercommitted + "=held-768Mi-offered-512Mi@2026-11-25T09:00:00Z", v1alpha1.TaintSwapFull + "=used-95@2026-11-25T09:00:00Z"}
	if len(published()) != 1 || !slices.Equal(taintStrings(published()[0], "node-a"), want) {
		t.Fatalf("published %v, want one publish with taints %v", published(), want)
	}
	if len(events()) != 0 {
		t.Errorf("the restart told the Node again: %v", events())
	}
	// Swap use in the band keeps the taint; below the clear threshold it
	// goes after ClearAfter, by the usual rule.
	for _, step := range []struct {
		usedPercent int64
		after       time.Duration
		want        bool
	}{
		{85, 0, true}, {85, 30 * time.Second, true}, {10, 10 * time.Second, true}, {10, 10 * time.Second, true}, {10, 20 * time.Second, false},
	} {
		meminfo(step.usedPercent)
		clk.SetTime(clk.Now().Add(step.after))
		w.step(ctx)
		resync("after a sample")
		got := taintStrings(published()[len(published())-1], "node-a")
		if has := slices.Contains(got, want[1]); has != step.want {
			t.Fatalf("%d%% used after %v: taints %v, want swap-full %v", step.usedPercent, step.after, got, step.want)
		}
	}
	if !slices.Equal(events(), []string{ReasonPressureCleared}) {
		t.Errorf("events %v, want only the clear", events())
	}
}
