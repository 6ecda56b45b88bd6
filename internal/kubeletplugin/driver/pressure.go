package driver

import (
	"context"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
)

// Event reasons on the Node for the pressure taints.
const (
	ReasonPressureTainted = "SwapPressureTainted"
	ReasonPressureCleared = "SwapPressureCleared"
)

// pressureWatcher samples the node's memory pressure and swap use and
// keeps the swap device's pressure taints in step with
// internal/kubeletplugin/pressure's decisions: the scheduler then places new
// swap claims elsewhere while the pods already running keep their swap.
type pressureWatcher struct {
	source  pressure.Source
	monitor *pressure.Monitor
	metrics *Metrics
	// nodeEvent records an event on the Node; kick republishes.
	nodeEvent func(eventType, reason, action, message string)
	kick      func()
	now       func() time.Time
	// psiProblem is the last reason PSI was missing, logged once.
	psiProblem string
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

// taints are the pressure taints to publish.
func (w *pressureWatcher) taints() []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	for _, t := range w.monitor.Active() {
		since := metav1.NewTime(t.Since.Truncate(time.Second))
		out = append(out, resourceapi.DeviceTaint{Key: t.Key, Value: t.Value, Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &since})
	}
	return out
}

// seed starts the monitor from the pressure taints an earlier instance
// published (see Publisher.Seed): they stay, with their values and times,
// until the clear rule clears them.
func (w *pressureWatcher) seed(published []resourceapi.DeviceTaint) []string {
	var taints []pressure.Taint
	for _, t := range published {
		since := w.now()
		if t.TimeAdded != nil {
			since = t.TimeAdded.Time
		}
		taints = append(taints, pressure.Taint{Key: t.Key, Value: t.Value, Since: since})
	}
	return w.monitor.Seed(taints)
}

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
	changed := w.monitor.Observe(w.now(), sample)
	w.metrics.setPressure(w.monitor.Figures(), w.monitor.Active())
	for _, tr := range changed {
		if tr.Set {
			logger.Info("Tainting the swap device", "taint", tr.Key, "value", tr.Value, "reason", tr.Reason)
			w.nodeEvent(corev1.EventTypeWarning, ReasonPressureTainted, taintAction("Taint", tr.Key), "Swap device tainted "+tr.Key+"="+tr.Value+":NoSchedule: "+tr.Reason+
				"; new swap claims go to other nodes, pods already running keep their swap")
		} else {
			logger.Info("Clearing a swap device taint", "taint", tr.Key, "value", tr.Value, "reason", tr.Reason)
			w.nodeEvent(corev1.EventTypeNormal, ReasonPressureCleared, taintAction("Untaint", tr.Key), "Swap device taint "+tr.Key+" removed: "+tr.Reason)
		}
	}
	if len(changed) > 0 {
		w.kick()
	}
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
