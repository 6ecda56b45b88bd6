package controller

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts the controller's label writes. A nil *Metrics counts
// nothing.
type Metrics struct {
	podPatches  prometheus.Counter
	nodePatches prometheus.Counter
}

// NewMetrics creates the counters and registers them with reg.
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
	return []string{"dra_swap_controller_pod_label_patches_total", "dra_swap_controller_node_label_patches_total"}
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
