package kubeletplugin

import (
	"context"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
)

// Event reasons on the Node for the pressure taints, and for the pressure
// stall information (PSI) they need: ReasonPSIUnavailable when no PSI
// source can be read (at the first sample too), ReasonPSIAvailable when
// one can again.
const (
	ReasonPressureTainted = "SwapPressureTainted"
	ReasonPressureCleared = "SwapPressureCleared"
	ReasonPSIUnavailable  = "PSIUnavailable"
	ReasonPSIAvailable    = "PSIAvailable"
	// actionReadPSI is the PSI events' action.
	actionReadPSI = "ReadPSI"
)

// pressureWatcher samples the node's memory pressure and swap use and
// keeps the swap device's pressure taints in step with
// internal/kubeletplugin/pressure's decisions: the scheduler then places new
// swap claims elsewhere while the pods already running keep their swap.
type pressureWatcher struct {
	source  pressure.Source
	monitor *pressure.Monitor
	metrics *Metrics
	events  publish.EventSink
	clock   clock.PassiveClock
	// changed fires when a taint came or went (buffered, one).
	changed chan struct{}
	// psiProblem is the last reason PSI was missing, logged once.
	psiProblem string
	// psiOff is whether the Node was last told that no PSI source can be
	// read (false, available, before the first sample).
	psiOff bool
}

var _ publish.TaintSource = (*pressureWatcher)(nil)

func newPressureWatcher(source pressure.Source, monitor *pressure.Monitor, metrics *Metrics, events publish.EventSink, clk clock.PassiveClock) *pressureWatcher {
	return &pressureWatcher{source: source, monitor: monitor, metrics: metrics, events: events, clock: clk, changed: make(chan struct{}, 1)}
}

// kubepodsCgroup finds the kubepods cgroup on a cgroup v2 host (the
// systemd driver's kubepods.slice or the cgroupfs driver's kubepods), ""
// when there is none.
func kubepodsCgroup(root string, cgroupVersion int) string {
	if cgroupVersion != 2 {
		return ""
	}
	for _, name := range []string{"kubepods.slice", "kubepods"} {
		if _, err := os.Stat(filepath.Join(root, "sys", "fs", "cgroup", name, "memory.pressure")); err == nil {
			return name
		}
	}
	return ""
}

// Taints are the pressure taints to publish.
func (w *pressureWatcher) Taints() []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	for _, t := range w.monitor.Active() {
		since := metav1.NewTime(t.Since.Truncate(time.Second))
		out = append(out, resourceapi.DeviceTaint{Key: t.Key, Value: t.Value, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &since})
	}
	return out
}

// Seed starts the monitor from the pressure taints an earlier instance
// published (see Publisher.TakeOver): they stay, with their values and
// times, until the clear rule clears them.
func (w *pressureWatcher) Seed(ctx context.Context, published []resourceapi.DeviceTaint) {
	var taints []pressure.Taint
	for _, t := range published {
		since := w.clock.Now()
		if t.TimeAdded != nil {
			since = t.TimeAdded.Time
		}
		taints = append(taints, pressure.Taint{Key: t.Key, Value: t.Value, Since: since})
	}
	if keys := w.monitor.Seed(taints); len(keys) > 0 {
		klog.FromContext(ctx).Info("Keeping the pressure taints published before until they clear", "taints", keys)
	}
}

// Changed fires when a taint came or went.
func (w *pressureWatcher) Changed() <-chan struct{} { return w.changed }

// step takes one sample and acts on what changed.
func (w *pressureWatcher) step(ctx context.Context) {
	logger := klog.FromContext(ctx)
	sample, err := w.source.Read(ctx)
	if err != nil {
		logger.Error(err, "Cannot read the node's memory pressure and swap use; keeping the pressure taints as they are")
		return
	}
	if !sample.PSIAvailable && sample.PSIProblem != w.psiProblem {
		logger.Info("No pressure stall information: memory-pressure taints are off, swap-full taints stay on", "problem", sample.PSIProblem)
	}
	w.psiProblem = sample.PSIProblem
	w.checkPSI(sample)
	changed := w.monitor.Observe(w.clock.Now(), sample)
	w.metrics.setPressure(w.monitor.Figures(), w.monitor.Active())
	for _, tr := range changed {
		if tr.Set {
			logger.Info("Tainting the swap device", "taint", tr.Key, "value", tr.Value, "reason", tr.Reason)
			w.events.NodeEvent(corev1.EventTypeWarning, ReasonPressureTainted, publish.TaintAction("Taint", tr.Key), "Swap device tainted "+tr.Key+"="+tr.Value+":NoSchedule: "+tr.Reason+
				"; new swap claims go to other nodes, pods already running keep their swap")
		} else {
			logger.Info("Clearing a swap device taint", "taint", tr.Key, "value", tr.Value, "reason", tr.Reason)
			w.events.NodeEvent(corev1.EventTypeNormal, ReasonPressureCleared, publish.TaintAction("Untaint", tr.Key), "Swap device taint "+tr.Key+" removed: "+tr.Reason)
		}
	}
	if len(changed) > 0 {
		signal(w.changed)
	}
}

// checkPSI tells the Node when no PSI source can be read and when one can
// again: once per change, not on every sample; PSI from the start is the
// normal case, worth no event.
func (w *pressureWatcher) checkPSI(sample pressure.Sample) {
	off := !sample.PSIAvailable
	if off == w.psiOff {
		return
	}
	w.psiOff = off
	if off {
		w.events.NodeEvent(corev1.EventTypeWarning, ReasonPSIUnavailable, actionReadPSI, eventmsg.Note(
			"No memory pressure stall information (PSI) on this node, so its swap device never gets the %s taint; %s still works: %s. "+
				"Kernels built with CONFIG_PSI_DEFAULT_DISABLED=y (RHEL's, for one) turn PSI on with the boot parameter psi=1",
			v1alpha1.TaintMemoryPressure, v1alpha1.TaintSwapFull, sample.PSIProblem))
		return
	}
	w.events.NodeEvent(corev1.EventTypeNormal, ReasonPSIAvailable, actionReadPSI,
		"Memory pressure stall information (PSI) is readable again: the "+v1alpha1.TaintMemoryPressure+" taint works")
}

// run samples every interval until ctx ends.
func (w *pressureWatcher) run(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		w.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
