package kubeletplugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/podevents"
)

// ReasonOffloadBackedOff is the Normal event on a container whose memory
// stall rose above its claim's offload budget: the loop pauses its
// offload until the stall is back within it (once per episode).
const ReasonOffloadBackedOff = "SwapOffloadBackedOff"

// offloadMetrics are the offload loop's metrics: the node's, and one
// series per prepared claim with offload (and a container the loop
// drives), deleted when the claim goes.
type offloadMetrics struct {
	containers *metrics.Gauge
	pass       *metrics.Histogram
	backoffs   *metrics.Counter
	reclaimed  *metrics.CounterVec
	swapUsed   *metrics.GaugeVec
	swapPeak   *metrics.GaugeVec
	stall      *metrics.GaugeVec
	budget     *metrics.GaugeVec
	paused     *metrics.GaugeVec
}

func newOffloadMetrics() *offloadMetrics {
	claim := []string{claimNamespaceLabel, "claim"}
	return &offloadMetrics{
		containers: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "offload_containers",
			Help: "Containers of prepared claims with SwapConfig offload that the offload loop drives on this node.", StabilityLevel: metrics.ALPHA,
		}),
		pass: metrics.NewHistogram(&metrics.HistogramOpts{
			Namespace: "dra_swap", Name: "offload_pass_duration_seconds",
			Help:    "Duration of one pass of the offload loop over its containers, the kernel's reclaim on its behalf included.",
			Buckets: metrics.ExponentialBuckets(0.0005, 2, 14), StabilityLevel: metrics.ALPHA,
		}),
		backoffs: metrics.NewCounter(&metrics.CounterOpts{
			Namespace: "dra_swap", Name: "offload_backoffs_total",
			Help: "Pressure episodes of the offload loop: a container's memory stall rose above its claim's budget and its offload paused (each has a SwapOffloadBackedOff event on the pod).", StabilityLevel: metrics.ALPHA,
		}),
		reclaimed: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "dra_swap", Name: "offload_reclaimed_bytes_total",
			Help: "Memory the offload loop had the kernel reclaim from each offload claim's containers (memory.reclaim writes the kernel satisfied in full), by claim namespace and name.", StabilityLevel: metrics.ALPHA,
		}, claim),
		swapUsed: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "offload_swap_used_bytes",
			Help: "Swap in use by each offload claim's containers (memory.swap.current, summed; a container with several claims counts for each), by claim namespace and name.", StabilityLevel: metrics.ALPHA,
		}, claim),
		swapPeak: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "offload_swap_peak_bytes",
			Help: "The highest swap use of each offload claim's containers (memory.swap.peak, summed), where the kernel has it (Linux 6.5 and later).", StabilityLevel: metrics.ALPHA,
		}, claim),
		stall: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "offload_stall_ratio",
			Help: "Memory stall of each offload claim's containers over the loop's last interval (PSI some, the highest of its containers, as a fraction 0..1 of the time).", StabilityLevel: metrics.ALPHA,
		}, claim),
		budget: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "offload_max_stall_ratio",
			Help: "Each offload claim's stall budget (SwapConfig offload.maxStallPercent, as a fraction 0..1 of the time).", StabilityLevel: metrics.ALPHA,
		}, claim),
		paused: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: "dra_swap", Name: "offload_paused",
			Help: "1 while the offload of a claim's container is paused because its stall is above the claim's budget, 0 otherwise.", StabilityLevel: metrics.ALPHA,
		}, claim),
	}
}

func (m *offloadMetrics) all() []metrics.Registerable {
	return []metrics.Registerable{m.containers, m.pass, m.backoffs, m.reclaimed, m.swapUsed, m.swapPeak, m.stall, m.budget, m.paused}
}

// deleteClaim drops a claim's series.
func (m *offloadMetrics) deleteClaim(key types.NamespacedName) {
	for _, v := range []interface{ DeleteLabelValues(...string) bool }{m.reclaimed, m.swapUsed, m.swapPeak, m.stall, m.budget, m.paused} {
		v.DeleteLabelValues(key.Namespace, key.Name)
	}
}

// checkpointClaims reads the prepared claims for the loop from the
// checkpoint (offload.Claims).
type checkpointClaims struct{ store *checkpoint.Store }

func (c checkpointClaims) Prepared() (map[types.UID]types.NamespacedName, error) {
	cp, err := c.store.Read()
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]types.NamespacedName, len(cp.Claims))
	for uid, info := range cp.Claims {
		out[uid] = types.NamespacedName{Namespace: info.Namespace, Name: info.Name}
	}
	return out, nil
}

// offloadReporter passes what the offload loop did on to the metrics,
// the claims' status and the pods' events (offload.Reporter).
type offloadReporter struct {
	node     string
	interval time.Duration
	metrics  *offloadMetrics
	statuses offloadStatuses
	recorder events.EventRecorder
	// initContainer: see limitReporter.
	initContainer func(namespace, pod, container string) bool
	// counted is each claim's reclaimed bytes as the counter has them;
	// argument the memory.reclaim argument last logged.
	counted  map[types.UID]int64
	names    map[types.UID]types.NamespacedName
	argument string
}

// offloadStatuses is where the loop's figures go into the claims' status
// (*claimstatus.Writer).
type offloadStatuses interface {
	Offloaded(figures []offload.ClaimFigures, interval time.Duration)
}

var _ offload.Reporter = (*offloadReporter)(nil)

func (r *offloadReporter) Pass(ctx context.Context, p offload.PassReport) {
	if r.counted == nil {
		r.counted, r.names = map[types.UID]int64{}, map[types.UID]types.NamespacedName{}
	}
	if p.Argument != "" && p.Argument != r.argument {
		klog.FromContext(ctx).Info("Offload: memory.reclaim's argument, the strongest preference for anonymous memory this kernel takes", "argument", p.Argument)
		r.argument = p.Argument
	}
	m := r.metrics
	m.containers.Set(float64(p.Containers))
	m.pass.Observe(p.Duration.Seconds())
	seen := map[types.UID]bool{}
	for _, f := range p.Claims {
		seen[f.UID] = true
		r.names[f.UID] = f.Claim
		labels := []string{f.Claim.Namespace, f.Claim.Name}
		if d := f.ReclaimedBytes - r.counted[f.UID]; d > 0 {
			m.reclaimed.WithLabelValues(labels...).Add(float64(d))
		} else {
			m.reclaimed.WithLabelValues(labels...)
		}
		r.counted[f.UID] = f.ReclaimedBytes
		m.swapUsed.WithLabelValues(labels...).Set(float64(f.SwapBytes))
		if f.SwapPeakBytes >= 0 {
			m.swapPeak.WithLabelValues(labels...).Set(float64(f.SwapPeakBytes))
		}
		if f.StallPPM >= 0 {
			m.stall.WithLabelValues(labels...).Set(float64(f.StallPPM) / 1e6)
		}
		m.budget.WithLabelValues(labels...).Set(float64(f.BudgetPPM) / 1e6)
		m.paused.WithLabelValues(labels...).Set(boolValue(f.Reason == offload.ReasonOverBudget))
	}
	for uid, key := range r.names {
		if !seen[uid] {
			m.deleteClaim(key)
			delete(r.names, uid)
			delete(r.counted, uid)
		}
	}
	r.statuses.Offloaded(p.Claims, r.interval)
}

func (r *offloadReporter) BackedOff(ctx context.Context, c hookstate.Container, claims []types.NamespacedName, stallPPM, budgetPPM int64) {
	r.metrics.backoffs.Inc()
	var names []string
	for _, n := range claims {
		names = append(names, n.Name)
	}
	klog.FromContext(ctx).V(2).Info("Offload paused: stall above the budget", "container", c.String(), "claims", names,
		"stallPPM", stallPPM, "budgetPPM", budgetPPM)
	if c.Pod == "" || c.PodUID == "" {
		return
	}
	init := r.initContainer != nil && r.initContainer(c.Namespace, c.Pod, c.Name)
	ref := podevents.ContainerRef(c.Namespace, c.Pod, c.PodUID, c.Name, init)
	r.recorder.Eventf(ref, nil, corev1.EventTypeNormal, ReasonOffloadBackedOff, "OffloadSwap", "%s", eventmsg.Note(
		"Offload of container %q on node %q paused: it stalled on memory %s%% of the last %s, above the budget of %s%% of claim %s; "+
			"the plugin offloads again once the stall is back within the budget",
		c.Name, r.node, percent(stallPPM), r.interval, percent(budgetPPM), strings.Join(names, ", ")))
}

// percent prints parts per million of wall time as a percentage with two
// decimals, as PSI does ("0.52").
func percent(ppm int64) string { return fmt.Sprintf("%.2f", float64(ppm)/1e4) }
