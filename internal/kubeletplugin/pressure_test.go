package kubeletplugin

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish/publishtest"
)

// The watcher turns the monitor's transitions into the device's taints,
// Node events, a republish and metrics, from the host's files.
func TestPressureWatcher(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	psi := func(some, full string) string {
		return "some avg10=" + some + " avg60=0.00 avg300=0.00 total=1\nfull avg10=" + full + " avg60=0.00 avg300=0.00 total=1\n"
	}
	meminfo := func(totalKiB, freeKiB string) string {
		return "MemTotal: 4000000 kB\nSwapTotal: " + totalKiB + " kB\nSwapFree: " + freeKiB + " kB\n"
	}
	write("proc/pressure/memory", psi("1.00", "0.00"))
	write("proc/meminfo", meminfo("1048576", "1000000"))
	write("sys/fs/cgroup/kubepods.slice/memory.pressure", psi("2.00", "0.00"))

	cfg := pressure.DefaultConfig()
	cfg.SetAfter, cfg.ClearAfter = 10*time.Second, 20*time.Second
	monitor, err := pressure.NewMonitor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	reporter := &publishtest.EventRecorder{}
	kicks := 0
	metrics := NewMetrics()
	w := newPressureWatcher(pressure.Source{Root: root, CgroupV2KubepodsPath: kubepodsCgroup(root, 2)}, monitor, metrics, reporter, clk)
	if w.source.CgroupV2KubepodsPath != "kubepods.slice" {
		t.Fatalf("kubepods cgroup %q, want kubepods.slice", w.source.CgroupV2KubepodsPath)
	}
	// Each step counts whether it told the publisher the taints changed.
	step := func(d time.Duration) {
		clk.SetTime(clk.Now().Add(d))
		w.step(ctx)
		select {
		case <-w.Changed():
			kicks++
		default:
		}
	}
	step(0)
	if len(w.Taints()) != 0 || kicks != 0 {
		t.Fatalf("taints %v, kicks %d on a quiet node", w.Taints(), kicks)
	}
	// The kubepods cgroup thrashes; swap fills.
	write("sys/fs/cgroup/kubepods.slice/memory.pressure", psi("45.50", "12.00"))
	write("proc/meminfo", meminfo("1048576", "52428"))
	step(5 * time.Second) // high from here
	step(5 * time.Second)
	if len(w.Taints()) != 0 {
		t.Fatalf("taints %v before the dwell time", w.Taints())
	}
	step(5 * time.Second)
	taints := w.Taints()
	if len(taints) != 2 || taints[0].Key != v1alpha1.TaintMemoryPressure || taints[1].Key != v1alpha1.TaintSwapFull ||
		taints[0].Effect != "NoSchedule" || taints[0].TimeAdded == nil {
		t.Fatalf("taints %+v, want memory-pressure and swap-full", taints)
	}
	events := reporter.Events
	if kicks != 1 || len(events) != 2 || events[0].Reason != ReasonPressureTainted || !strings.Contains(events[0].Message, "dra.swap/memory-pressure=") {
		t.Fatalf("kicks %d, events %+v", kicks, events)
	}
	// Two taints set at once are two events the events API keeps apart:
	// it folds events with the same object, reason and action.
	if events[0].Action != "TaintMemoryPressure" || events[1].Action != "TaintSwapFull" {
		t.Errorf("actions %q and %q, want TaintMemoryPressure and TaintSwapFull", events[0].Action, events[1].Action)
	}
	page := scrapeHandler(t, metrics)
	for _, want := range []string{
		`dra_swap_node_memory_pressure_ratio{kind="some",source="kubepods"} 0.455`,
		`dra_swap_node_memory_pressure_ratio{kind="full",source="kubepods"} 0.12`,
		`dra_swap_device_taint{key="dra.swap/swap-full"} 1`,
		`dra_swap_psi_available 1`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Back to quiet: the taints stay for clearAfter, then go.
	write("sys/fs/cgroup/kubepods.slice/memory.pressure", psi("0.10", "0.00"))
	write("proc/meminfo", meminfo("1048576", "1000000"))
	step(10 * time.Second) // low from here
	step(10 * time.Second)
	if len(w.Taints()) != 2 {
		t.Fatalf("taints cleared before the dwell time: %v", w.Taints())
	}
	step(10 * time.Second)
	events = reporter.Events
	if len(w.Taints()) != 0 || kicks != 2 || len(events) != 4 || events[3].Reason != ReasonPressureCleared {
		t.Fatalf("taints %v, kicks %d, events %+v after clearing", w.Taints(), kicks, events)
	}
	// A kernel without PSI: swap-full still works, and the metric and one
	// Node event say so.
	for _, dir := range []string{"proc/pressure", "sys/fs/cgroup/kubepods.slice"} {
		if err := os.RemoveAll(filepath.Join(root, dir)); err != nil {
			t.Fatal(err)
		}
	}
	step(time.Second)
	step(time.Second)
	if page := scrapeHandler(t, metrics); !strings.Contains(page, "dra_swap_psi_available 0") {
		t.Errorf("metrics do not say PSI is unavailable")
	}
	events = reporter.Events[4:]
	if len(events) != 1 || events[0].Reason != ReasonPSIUnavailable || events[0].EventType != "Warning" || events[0].Action != "ReadPSI" ||
		!strings.Contains(events[0].Message, "psi=1") || !strings.Contains(events[0].Message, "/proc/pressure/memory does not exist") {
		t.Fatalf("events %+v, want one PSIUnavailable saying why and psi=1", events)
	}
	write("proc/pressure/memory", psi("0.10", "0.00"))
	step(time.Second)
	step(time.Second)
	events = reporter.Events[5:]
	if len(events) != 1 || events[0].Reason != ReasonPSIAvailable || events[0].EventType != "Normal" {
		t.Fatalf("events %+v, want one PSIAvailable", events)
	}
	if page := scrapeHandler(t, metrics); !strings.Contains(page, "dra_swap_psi_available 1") {
		t.Errorf("metrics do not say PSI is available again")
	}
}

// On a kernel with PSI off at boot from the first sample, the Node is told
// at once, and told nothing more while it stays off.
func TestPressureWatcherWithoutPSI(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "meminfo"), []byte("SwapTotal: 1048576 kB\nSwapFree: 1048576 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	monitor, err := pressure.NewMonitor(pressure.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	reporter := &publishtest.EventRecorder{}
	metrics := NewMetrics()
	own := filepath.Join(t.TempDir(), "proc", "pressure", "memory") // the plugin's own /proc, without PSI
	w := newPressureWatcher(pressure.Source{Root: root, NodePressureFile: own}, monitor, metrics, reporter,
		clocktesting.NewFakePassiveClock(time.Now()))
	for range 3 {
		w.step(ctx)
	}
	if len(reporter.Events) != 1 || reporter.Events[0].Reason != ReasonPSIUnavailable || !strings.Contains(reporter.Events[0].Message, own+" does not exist") {
		t.Errorf("events %+v, want one PSIUnavailable naming %s", reporter.Events, own)
	}
	if page := scrapeHandler(t, metrics); !strings.Contains(page, "dra_swap_psi_available 0") {
		t.Errorf("metrics do not say PSI is unavailable")
	}
}

// scrapeHandler returns the metrics page.
func scrapeHandler(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}
