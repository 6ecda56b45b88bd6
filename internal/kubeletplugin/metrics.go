package kubeletplugin

import (
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/nri"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

const (
	opPrepare   = "prepare"
	opUnprepare = "unprepare"
)

// claimNamespaceLabel is the per-claim metric's label for the claim's
// namespace: not "namespace", which the scrape gives every series (the
// plugin pod's namespace) and which would rename this one to
// exported_namespace.
const claimNamespaceLabel = "claim_namespace"

// Metrics are the plugin's Prometheus metrics, in a registry of their own.
type Metrics struct {
	registry  metrics.KubeRegistry
	requests  *metrics.CounterVec
	duration  *metrics.HistogramVec
	claims    *metrics.Gauge
	allocated *metrics.Gauge
	offered   *metrics.Gauge
	total     *metrics.Gauge
	used      *metrics.Gauge
	restored  *metrics.CounterVec
	failed    *metrics.CounterVec
	notHeld   *metrics.Gauge
	overBytes *metrics.Gauge
	nri       *metrics.Gauge
	psi       *metrics.GaugeVec
	psiOK     *metrics.Gauge
	swapUsed  *metrics.Gauge
	tainted   *metrics.GaugeVec
	statusErr *metrics.Counter
	build     *metrics.GaugeVec
	// kubeletConfigOK is 1 while the kubelet's swap behavior is known.
	kubeletConfigOK *metrics.Gauge
	// keptSpecs counts the checkpoint's unconfirmed entries.
	keptSpecs *metrics.Gauge
	// hookRuns is 1 once the installed hook ran; registered only when
	// the plugin installs the hook.
	hookRuns *metrics.Gauge
	// claimUsed is registered only when per-claim metrics are on.
	claimUsed *metrics.GaugeVec
	// offload are the offload loop's (registered with the loop on).
	offload *offloadMetrics
	names   []string
}

// NewMetrics creates and registers the plugin's metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry: metrics.NewKubeRegistry(),
		requests: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "dra_swap", Name: "claim_operations_total",
			Help: "Claims prepared or unprepared, by operation and result.", StabilityLevel: metrics.ALPHA,
		}, []string{"operation", "result"}),
		duration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: "dra_swap", Name: "claim_operation_duration_seconds",
			Help:    "Duration of the kubelet's prepare and unprepare calls.",
			Buckets: metrics.ExponentialBuckets(0.0005, 2, 14), StabilityLevel: metrics.ALPHA,
		}, []string{"operation"}),
		claims: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "prepared_claims",
			Help: "Claims currently prepared on this node.", StabilityLevel: metrics.ALPHA,
		}),
		allocated: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "node_swap_allocated_bytes",
			Help: "Sum of the swap limits of the claims prepared on this node (KEP-5359's kubelet_node_swap_allocated_bytes).", StabilityLevel: metrics.ALPHA,
		}),
		offered: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "node_swap_offered_bytes",
			Help: "Swap capacity published for workloads (0 when the node offers none).", StabilityLevel: metrics.ALPHA,
		}),
		total: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "node_swap_total_bytes",
			Help: "Active swap on the node.", StabilityLevel: metrics.ALPHA,
		}),
		used: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "node_swap_used_bytes",
			Help: "Swap in use on the node.", StabilityLevel: metrics.ALPHA,
		}),
		restored: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "dra_swap", Name: "limit_restored_total",
			Help: "Container swap limits found different from their claims' sum (rewritten by the kubelet, systemd or a person) and restored, by what found them: update (after a container update, through NRI), pod-update (after an update of the pod's own cgroup, through NRI), interval, nri-synchronize, start-up.", StabilityLevel: metrics.ALPHA,
		}, []string{"trigger"}),
		failed: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "dra_swap", Name: "limit_restore_failures_total",
			Help: "Container swap limits (or pods' swap budgets) found different from their claims' sum that could not be restored, each counted once until it holds again (the pod has a SwapLimitNotRestored event saying why).", StabilityLevel: metrics.ALPHA,
		}, []string{"trigger"}),
		notHeld: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "limits_not_restored",
			Help: "Container swap limits (or pods' swap budgets) that differ from their claims' sum and could not be restored, now (each is in its claims' status, condition SwapApplied, until it holds).", StabilityLevel: metrics.ALPHA,
		}),
		overBytes: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "over_granted_bytes",
			Help: "Swap that the limits counted in dra_swap_limits_not_restored allow beyond their claims' sum, now (+Inf for an unlimited one): on cgroup v1, a memory limit lowered while the container had memory swapped out leaves memory+swap where it was until its usage falls.", StabilityLevel: metrics.ALPHA,
		}),
		nri: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "nri_connected",
			Help: "1 while the plugin is registered with the container runtime over NRI (limits set in the OCI spec and updates corrected), 0 otherwise (the CDI hook and the verifier alone).", StabilityLevel: metrics.ALPHA,
		}),
		psi: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "node_memory_pressure_ratio",
			Help: "Memory pressure stall (PSI avg10 as a fraction 0..1 of the time; the --pressure-* thresholds are in percent) that the swap device's memory-pressure taint follows: source node (/proc/pressure/memory) or kubepods (the kubepods cgroup, cgroup v2), kind some or full.", StabilityLevel: metrics.ALPHA,
		}, []string{"source", "kind"}),
		psiOK: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "psi_available",
			Help: "1 when the node's pressure stall information is readable, 0 when it is not (no memory-pressure taint then; swap-full still works).", StabilityLevel: metrics.ALPHA,
		}),
		swapUsed: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "node_swap_used_ratio",
			Help: "Fraction (0..1) of the node's swap in use, as the swap-full taint sees it.", StabilityLevel: metrics.ALPHA,
		}),
		tainted: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "device_taint",
			Help: "1 while the node's swap device carries the taint (dra.swap/memory-pressure, dra.swap/swap-full, dra.swap/overcommitted), 0 otherwise.", StabilityLevel: metrics.ALPHA,
		}, []string{"key"}),
	}
	m.statusErr = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "dra_swap", Name: "claim_status_write_failures_total",
		Help: "Writes of a claim's status.devices (what was granted and applied) that failed after retries.", StabilityLevel: metrics.ALPHA,
	})
	m.build = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name: version.MetricName, Help: version.MetricHelp, StabilityLevel: metrics.ALPHA,
	}, version.MetricLabels())
	m.claimUsed = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "dra_swap", Name: "claim_swap_used_bytes",
		Help: "Swap in use by the containers of each prepared claim (v2 memory.swap.current, v1 memsw - memory usage; a container with several claims counts for each with that claim's part of its limit), by claim namespace and name. Only with --claim-usage-metrics: one series per claim.", StabilityLevel: metrics.ALPHA,
	}, []string{claimNamespaceLabel, "claim"})
	m.kubeletConfigOK = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "dra_swap", Name: "kubelet_config_readable",
		Help: "1 while the kubelet's configuration (--kubelet-config, --kubelet-config-dir) is read and gives its swap behavior, 0 while it cannot be read (swapBehavior published as Unknown; the Node has a KubeletConfigUnreadable event saying why).", StabilityLevel: metrics.ALPHA,
	})
	m.keptSpecs = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "dra_swap", Name: "kept_cdi_specs",
		Help: "CDI specs of claims kept without a checkpoint entry the API server confirmed (after an unusable checkpoint was set aside): they count against the offer and go when the kubelet unprepares their claims or a later check confirms or removes them (the Node has a CheckpointUnusable or CDISpecsKept event saying why).", StabilityLevel: metrics.ALPHA,
	})
	m.hookRuns = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "dra_swap", Name: "hook_runs",
		Help: "1 when the OCI hook the plugin installed runs where it is installed (its --version), 0 when it does not (the node offers no swap; the Node has a HookNotRunnable event saying why). Only when the plugin installs the hook (--install-hook-from).", StabilityLevel: metrics.ALPHA,
	})
	all := []metrics.Registerable{m.kubeletConfigOK, m.keptSpecs, m.requests, m.duration, m.claims, m.allocated, m.offered, m.total, m.used, m.restored, m.failed, m.notHeld, m.overBytes, m.nri,
		m.psi, m.psiOK, m.swapUsed, m.tainted, m.statusErr, m.build}
	m.registry.MustRegister(all...)
	m.build.WithLabelValues(version.Get().LabelValues()...).Set(1)
	m.offload = newOffloadMetrics()
	for _, c := range append(append(all, m.claimUsed, m.hookRuns), m.offload.all()...) {
		m.names = append(m.names, c.FQName())
	}
	for _, key := range []string{v1alpha1.TaintMemoryPressure, v1alpha1.TaintSwapFull, v1alpha1.TaintOvercommitted} {
		m.tainted.WithLabelValues(key).Set(0)
	}
	// Counters start at 0 for every label value known: increase() and
	// rate() see a first event only from a series that existed before it,
	// and the alerts' and dashboard's selectors have series to select.
	for _, op := range []string{opPrepare, opUnprepare} {
		for _, result := range []string{"success", "error"} {
			m.requests.WithLabelValues(op, result)
		}
	}
	for _, trigger := range limitTriggers() {
		m.restored.WithLabelValues(trigger)
		m.failed.WithLabelValues(trigger)
	}
	return m
}

// limitTriggers are what makes the verifier look at the containers' swap
// limits (limitcheck.Drift.Trigger): internal/kubeletplugin/limitcheck's
// interval, internal/kubeletplugin/nri's update, pod-update and
// nri-synchronize, Run's start-up.
func limitTriggers() []string {
	return []string{"interval", "update", nri.PodUpdateTrigger, "nri-synchronize", "start-up"}
}

// setPressure shows what the pressure monitor saw and which of its taints
// are set.
func (m *Metrics) setPressure(f pressure.Figures, active []pressure.Taint) {
	for source, s := range map[string]pressure.SourceFigures{"node": f.Node, "kubepods": f.Kubepods} {
		if !s.Present {
			m.psi.DeleteLabelValues(source, "some")
			m.psi.DeleteLabelValues(source, "full")
			continue
		}
		// PSI is in percent, the metric a ratio (Prometheus base units).
		m.psi.WithLabelValues(source, "some").Set(s.SomeAvg10 / 100)
		m.psi.WithLabelValues(source, "full").Set(s.FullAvg10 / 100)
	}
	m.psiOK.Set(boolValue(f.PSIAvailable))
	m.swapUsed.Set(f.SwapUsedFraction)
	set := map[string]bool{}
	for _, t := range active {
		set[t.Key] = true
	}
	for _, key := range []string{v1alpha1.TaintMemoryPressure, v1alpha1.TaintSwapFull} {
		m.tainted.WithLabelValues(key).Set(boolValue(set[key]))
	}
}

func (m *Metrics) statusFailed() { m.statusErr.Inc() }

func (m *Metrics) setOvercommitted(tainted bool) {
	m.tainted.WithLabelValues(v1alpha1.TaintOvercommitted).Set(boolValue(tainted))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Names are the names of every metric the plugin can export.
func (m *Metrics) Names() []string { return slices.Clone(m.names) }

// enableHookRuns registers dra_swap_hook_runs.
func (m *Metrics) enableHookRuns() { m.registry.MustRegister(m.hookRuns) }

// enableOffload registers the offload loop's metrics.
func (m *Metrics) enableOffload() { m.registry.MustRegister(m.offload.all()...) }

// enableClaimUsage registers the per-claim usage gauges.
func (m *Metrics) enableClaimUsage() { m.registry.MustRegister(m.claimUsed) }

// Handler serves the metrics in the Prometheus text format: the plugin's
// own and the process-wide registry's (k8s.io/component-base's legacy
// registry: the Go runtime's go_* and the process's process_* series, and
// client-go's rest_client_* once the command registered client-go's
// metrics there, see cmd/dra-swap-kubeletplugin).
func (m *Metrics) Handler() http.Handler {
	return metrics.HandlerFor(prometheus.Gatherers{m.registry, legacyregistry.DefaultGatherer}, metrics.HandlerOpts{})
}

func (m *Metrics) observe(op string, err error, d time.Duration) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.requests.WithLabelValues(op, result).Inc()
	m.duration.WithLabelValues(op).Observe(d.Seconds())
}

func (m *Metrics) setPrepared(claims int, bytes int64) {
	m.claims.Set(float64(claims))
	m.allocated.Set(float64(bytes))
}

func (m *Metrics) setNode(offered, total, used int64) {
	m.offered.Set(float64(offered))
	m.total.Set(float64(total))
	m.used.Set(float64(used))
}

func (m *Metrics) setKeptSpecs(n int) { m.keptSpecs.Set(float64(n)) }

func (m *Metrics) setKubeletConfigReadable(readable bool) { m.kubeletConfigOK.Set(boolValue(readable)) }

func (m *Metrics) setHookRuns(runs bool) { m.hookRuns.Set(boolValue(runs)) }

// setNotHeld shows the limits not restored and the swap they allow beyond
// their claims.
func (m *Metrics) setNotHeld(limits int, overBytes float64) {
	m.notHeld.Set(float64(limits))
	m.overBytes.Set(overBytes)
}

// NRIConnected sets dra_swap_nri_connected (nri.Observer).
func (m *Metrics) NRIConnected(connected bool) { m.nri.Set(boolValue(connected)) }
