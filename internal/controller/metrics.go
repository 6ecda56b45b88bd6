package controller

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	swapwebhook "github.com/dra-driver-swap/dra-driver-swap/internal/controller/webhook"
	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

// Metrics counts the controller's label writes. A nil *Metrics counts
// nothing. NewMetrics also registers the build information gauge.
type Metrics struct {
	podPatches  prometheus.Counter
	nodePatches prometheus.Counter
	// deferred counts the pods the webhooks left to the reconciler, by
	// reason.
	deferred *prometheus.CounterVec
}

const labelsDeferredName = "dra_swap_controller_webhook_labels_deferred_total"

// NewMetrics creates the counters and registers them, and the build
// information gauge (version.MetricName, always 1), with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		podPatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dra_swap_controller_pod_label_patches_total",
			Help: "Pod label patches written by the reconciler (the binding webhook's labels are not counted).",
		}),
		nodePatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dra_swap_controller_node_label_patches_total",
			Help: "Node label patches written by the reconciler.",
		}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: labelsDeferredName,
			Help: "Pods a webhook review did not label, leaving them to the reconciler once bound (their Downward API environment then lacks the labels): " +
				"not-cached, the informer cache did not show the claim, pod or allocation the review named within 2 s (cache lag, or a forged review); " +
				"relabel-budget, the pod was labelled lately and the budget for labelling pods again was spent.",
		}, []string{"reason"}),
	}
	for _, reason := range []string{swapwebhook.DeferredNotCached, swapwebhook.DeferredRelabelBudget} {
		m.deferred.WithLabelValues(reason)
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: version.MetricName, Help: version.MetricHelp}, version.MetricLabels())
	build.WithLabelValues(version.Get().LabelValues()...).Set(1)
	if err := reg.Register(build); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return nil, fmt.Errorf("register %s: %w", version.MetricName, err)
	}
	for _, c := range []*prometheus.Counter{&m.podPatches, &m.nodePatches} {
		if err := register(reg, c); err != nil {
			return nil, err
		}
	}
	if err := register(reg, &m.deferred); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers *c with reg; when a second controller in one process
// (tests) finds it registered, *c becomes the registered one.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	are := prometheus.AlreadyRegisteredError{}
	if !errors.As(err, &are) {
		return err
	}
	existing, ok := are.ExistingCollector.(C)
	if !ok {
		return err
	}
	*c = existing
	return nil
}

// MetricNames are the names of the controller's own metrics (besides
// controller-runtime's).
func MetricNames() []string {
	return []string{"dra_swap_controller_pod_label_patches_total", "dra_swap_controller_node_label_patches_total", labelsDeferredName, version.MetricName}
}

func (m *Metrics) podPatched() {
	if m != nil {
		m.podPatches.Inc()
	}
}

func (m *Metrics) nodePatched() {
	if m != nil {
		m.nodePatches.Inc()
	}
}

// labelsDeferred counts a pod a webhook left to the reconciler.
func (m *Metrics) labelsDeferred(reason string) {
	if m != nil {
		m.deferred.WithLabelValues(reason).Inc()
	}
}
