package driver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
	"github.com/dra-driver-swap/dra-driver-swap/internal/podevents"
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
	// initContainer says whether a pod's container is an init container
	// (for the event's field path); nil takes every one for a container.
	initContainer func(namespace, pod, container string) bool
}

var _ limitcheck.Reporter = (*limitReporter)(nil)

func (r *limitReporter) Restored(ctx context.Context, d limitcheck.Drift) {
	r.metrics.restored.WithLabelValues(d.Trigger).Inc()
	if pod := r.regarding(d); pod != nil {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonLimitRestored, "RestoreSwapLimit", "%s",
			eventmsg.Note("%s on node %q was %s instead of %s (found at %s); wrote %s back",
				subject(d), r.node, describe(d.Found), describe(d.Want), d.Trigger, describe(d.Want)))
	}
}

func (r *limitReporter) NotRestored(ctx context.Context, d limitcheck.Drift, err error) {
	r.metrics.failed.WithLabelValues(d.Trigger).Inc()
	klog.FromContext(ctx).Error(err, "Swap limit not restored", "container", d.Container.String(), "podBudget", d.Pod,
		"found", d.Found, "want", d.Want, "trigger", d.Trigger)
	if pod := r.regarding(d); pod != nil {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonLimitNotRestored, "RestoreSwapLimit", "%s",
			eventmsg.Note("%s on node %q is %s, not %s as its claims say, and could not be restored: %v",
				subject(d), r.node, describe(d.Found), describe(d.Want), err))
	}
}

// subject names the drifted limit in an event.
func subject(d limitcheck.Drift) string {
	if d.Pod {
		return "The pod's shared swap budget"
	}
	return fmt.Sprintf("Swap limit of container %q", d.Container.Name)
}

// regarding is what an event about the drift regards: the pod for its
// swap budget, the container (the pod with its field path) for its own
// limit, so that two containers' events are not folded into one series;
// nil for a container the runtime did not create for a pod.
func (r *limitReporter) regarding(d limitcheck.Drift) *corev1.ObjectReference {
	c := d.Container
	if c.Pod == "" || c.PodUID == "" {
		return nil
	}
	if d.Pod {
		return podevents.PodRef(c.Namespace, c.Pod, c.PodUID)
	}
	init := r.initContainer != nil && r.initContainer(c.Namespace, c.Pod, c.Name)
	return podevents.ContainerRef(c.Namespace, c.Pod, c.PodUID, c.Name, init)
}

// describe prints a limit as a quantity; -1 is unlimited ("max").
func describe(bytes int64) string {
	if bytes == limitcheck.Unreadable {
		return "unreadable"
	}
	if bytes < 0 {
		return "unlimited"
	}
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}
