package controller

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

// Metrics counts the controller's label writes. A nil *Metrics counts
// nothing. NewMetrics also registers the build information gauge.
type Metrics struct {
	podPatches  prometheus.Counter
	nodePatches prometheus.Counter
}

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
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: version.MetricName, Help: version.MetricHelp}, version.MetricLabels())
	build.WithLabelValues(version.Get().LabelValues()...).Set(1)
	if err := reg.Register(build); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return nil, fmt.Errorf("register %s: %w", version.MetricName, err)
	}
	for _, c := range []*prometheus.Counter{&m.podPatches, &m.nodePatches} {
		if err := reg.Register(*c); err != nil {
			// A second controller in one process (tests) shares them.
			are := prometheus.AlreadyRegisteredError{}
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(prometheus.Counter)
			if !ok {
				return nil, err
			}
			*c = existing
		}
	}
	return m, nil
}

// MetricNames are the names of the controller's own metrics (besides
// controller-runtime's).
func MetricNames() []string {
	return []string{"dra_swap_controller_pod_label_patches_total", "dra_swap_controller_node_label_patches_total", version.MetricName}
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
