package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/claimstatus"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/podevents"
)

// Event reasons of the verifier.
const (
	ReasonLimitRestored    = "SwapLimitRestored"
	ReasonLimitNotRestored = "SwapLimitNotRestored"
)

// limitReporter turns the verifier's findings into metrics, Warning
// events on the pods and the claims' status: a limit that is not what the
// claims say is never silent.
type limitReporter struct {
	node     string
	metrics  *Metrics
	recorder events.EventRecorder
	// statuses, if set, carries a limit that is not held into the
	// status of the claims of its container (or pod).
	statuses limitStatuses
	// initContainer says whether a pod's container is an init container
	// (for the event's field path); nil takes every one for a container.
	initContainer func(namespace, pod, container string) bool

	mu sync.Mutex
	// notHeld are the limits reported not restored, by Drift.Key.
	notHeld map[string]notHeldLimit
}

// notHeldLimit is a limit reported not restored and the error of its
// first failure.
type notHeldLimit struct {
	drift limitcheck.Drift
	err   string
}

// limitStatuses is where a limit that is not held goes into the claims'
// status (*claimstatus.Writer).
type limitStatuses interface {
	LimitNotHeld(d limitcheck.Drift, text string)
	LimitHeld(d limitcheck.Drift)
}

var _ limitcheck.Reporter = (*limitReporter)(nil)

func (r *limitReporter) Restored(ctx context.Context, d limitcheck.Drift) {
	r.metrics.restored.WithLabelValues(d.Trigger).Inc()
	r.held(d)
	if pod := r.regarding(d); pod != nil {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonLimitRestored, "RestoreSwapLimit", "%s",
			eventmsg.Note("%s on node %q was %s instead of %s (found at %s); wrote %s back",
				subject(d), r.node, describe(d.Found), describe(d.Want), d.Trigger, describe(d.Want)))
	}
}

// NotRestored is told once per limit that cannot be written back: the
// event says why and what happens next; the metrics and the claims'
// status show it until it holds.
func (r *limitReporter) NotRestored(ctx context.Context, d limitcheck.Drift, err error) {
	r.metrics.failed.WithLabelValues(d.Trigger).Inc()
	klog.FromContext(ctx).Error(err, "Swap limit not restored", "container", d.Container.String(), "podBudget", d.Pod,
		"found", d.Found, "want", d.Want, "trigger", d.Trigger)
	r.notHeldNow(d, err)
	if pod := r.regarding(d); pod != nil {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonLimitNotRestored, "RestoreSwapLimit", "%s", notRestoredNote(r.node, d, err))
	}
}

func (r *limitReporter) StillNotRestored(_ context.Context, d limitcheck.Drift) { r.notHeldNow(d, nil) }

func (r *limitReporter) Cleared(_ context.Context, d limitcheck.Drift) { r.held(d) }

// notHeldNow records a limit not held (err: the first failure's, nil to
// keep the one recorded) for the metrics and the claims' status.
func (r *limitReporter) notHeldNow(d limitcheck.Drift, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notHeld == nil {
		r.notHeld = map[string]notHeldLimit{}
	}
	n := r.notHeld[d.Key()]
	n.drift = d
	if err != nil {
		n.err = err.Error()
	}
	r.notHeld[d.Key()] = n
	r.setMetricsLocked()
	if r.statuses != nil && d.Container.Pod != "" {
		r.statuses.LimitNotHeld(d, conditionText(d, n.err))
	}
}

// held drops a limit that holds again (or is gone).
func (r *limitReporter) held(d limitcheck.Drift) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.notHeld[d.Key()]; !ok {
		return
	}
	delete(r.notHeld, d.Key())
	r.setMetricsLocked()
	if r.statuses != nil && d.Container.Pod != "" {
		r.statuses.LimitHeld(d)
	}
}

func (r *limitReporter) setMetricsLocked() {
	over := 0.0
	for _, n := range r.notHeld {
		if b := n.drift.OverBytes(); b == math.MaxInt64 {
			over = math.Inf(1) // unlimited
		} else {
			over += float64(b)
		}
	}
	r.metrics.setNotHeld(len(r.notHeld), over)
}

// overGrantedOnV1 says whether d is cgroup v1's refusal to lower
// memory+swap below the usage, leaving the container more swap than its
// claims grant.
func overGrantedOnV1(d limitcheck.Drift, err error) bool {
	return d.Container.CgroupVersion == 1 && d.OverBytes() > 0 && errors.Is(err, syscall.EBUSY)
}

// retryText says when the verifier writes a limit not held again.
func retryText(v1 bool) string {
	last := time.Duration(0)
	for n := 1; n <= limitcheck.MaxRetries; n++ {
		last += limitcheck.RetryAfter(n)
	}
	s := fmt.Sprintf("written again at most %d times over %v", limitcheck.MaxRetries, last)
	if v1 {
		s += ", and whenever its memory+swap usage fits"
	}
	return s
}

// notRestoredNote is the SwapLimitNotRestored event's note.
func notRestoredNote(node string, d limitcheck.Drift, err error) string {
	v1 := d.Container.CgroupVersion == 1
	if overGrantedOnV1(d, err) {
		return eventmsg.Note("%s on node %q is %s, %s more than its claims' %s, and cannot be lowered yet: its memory limit was lowered "+
			"(an in-place resize) while it had memory swapped out, and cgroup v1 refuses to set memory+swap below what the "+
			"container uses. It may use that much swap until its usage falls; the limit is %s, the claim's status "+
			"(condition %s) and dra_swap_over_granted_bytes show it until then: %v",
			subject(d), node, describe(d.Found), describe(d.OverBytes()), describe(d.Want), retryText(v1), claimstatus.ConditionSwapApplied, err)
	}
	return eventmsg.Note("%s on node %q is %s, not %s as its claims say, and could not be restored; it is %s, and the claim's status "+
		"(condition %s) and dra_swap_limits_not_restored show it until it holds: %v",
		subject(d), node, describe(d.Found), describe(d.Want), retryText(v1), claimstatus.ConditionSwapApplied, err)
}

// conditionText is what a claim's condition says of a limit not held
// whose first failure was err.
func conditionText(d limitcheck.Drift, err string) string {
	what := fmt.Sprintf("container %s", d.Container.Name)
	if d.Pod {
		what = "the pod's shared budget"
	}
	s := fmt.Sprintf("%s: swap limit %s, not %s, since %s (%d writes failed)", what, describe(d.Found), describe(d.Want),
		d.Since.UTC().Format(time.RFC3339), d.Attempts)
	if over := d.OverBytes(); over > 0 {
		s = fmt.Sprintf("%s: swap limit %s, %s more than its claims grant (%s), since %s (%d writes failed)", what, describe(d.Found), describe(over),
			describe(d.Want), d.Since.UTC().Format(time.RFC3339), d.Attempts)
	}
	if err != "" {
		s += ": " + eventmsg.Truncate(err, 512)
	}
	return s
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
