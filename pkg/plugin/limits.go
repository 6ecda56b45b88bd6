package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/pkg/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/pkg/verify"
)

// Event reasons of the verifier.
const (
	ReasonLimitRestored    = "SwapLimitRestored"
	ReasonLimitNotRestored = "SwapLimitNotRestored"
)

// limitReporter turns the verifier's findings into metrics and Warning
// events on the pods: a limit that is not what the claims say is never
// silent.
type limitReporter struct {
	node     string
	metrics  *Metrics
	recorder events.EventRecorder
}

var _ verify.Reporter = (*limitReporter)(nil)

func (r *limitReporter) Restored(ctx context.Context, c hookstate.Container, found, want int64, trigger string) {
	r.metrics.restored.WithLabelValues(trigger).Inc()
	if pod := podRef(c); pod != nil {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonLimitRestored, "RestoreSwapLimit",
			"Swap limit of container %q on node %q was %s instead of %s (found at %s); wrote %s back",
			c.Name, r.node, describe(found), describe(want), trigger, describe(want))
	}
}

func (r *limitReporter) NotRestored(ctx context.Context, c hookstate.Container, found, want int64, trigger string, err error) {
	r.metrics.failed.WithLabelValues(trigger).Inc()
	klog.FromContext(ctx).Error(err, "Swap limit not restored", "container", c.String(), "found", found, "want", want, "trigger", trigger)
	if pod := podRef(c); pod != nil {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonLimitNotRestored, "RestoreSwapLimit",
			"Swap limit of container %q on node %q is %s, not %s as its claims say, and could not be restored: %v",
			c.Name, r.node, describe(found), describe(want), err)
	}
}

func podRef(c hookstate.Container) *corev1.Pod {
	if c.Pod == "" || c.PodUID == "" {
		return nil
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Pod, UID: types.UID(c.PodUID)},
	}
}

// describe prints a limit as a quantity; -1 is unlimited ("max").
func describe(bytes int64) string {
	if bytes == verify.Unreadable {
		return "unreadable"
	}
	if bytes < 0 {
		return "unlimited"
	}
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}
