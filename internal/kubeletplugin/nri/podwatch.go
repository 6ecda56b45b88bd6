package nri

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// PodUpdateTrigger is the verifier's trigger for the checks of a pod after
// an update of its own cgroup (dra_swap_limit_restored_total{trigger}).
const PodUpdateTrigger = "pod-update"

// Defaults of a podWatch: after an event, the pod is checked every
// DefaultPodWatchInterval for DefaultPodWatchWindow.
const (
	DefaultPodWatchInterval = 100 * time.Millisecond
	DefaultPodWatchWindow   = 10 * time.Second
	// podWatchQueue bounds the events waiting for the watch's loop; one
	// more is dropped with a log line (the verifier's interval pass still
	// holds the pod's limits, only later).
	podWatchQueue = 256
)

// podWatch re-checks a pod's budget (and its containers' limits) for a
// while after the runtime tells of an update that comes before or after
// the kubelet's update of the pod's own cgroup. With the systemd cgroup
// driver the kubelet sets the pod slice's properties over D-Bus, and
// systemd writes every memory property of the slice again:
// memory.swap.max=max, the pod's budget gone. The kubelet 1.37 updates the
// pod's cgroup before its containers for an increase and after them for a
// decrease, and tells the runtime first (UpdatePodSandboxResources: NRI
// UpdatePodSandbox, which CRI-O sends and containerd 2.2 does not), so no
// event follows the write itself: PostUpdateContainer, UpdatePodSandbox
// and PostUpdatePodSandbox (where a runtime sends it) start a watch of
// the pod that checks it every interval for window (a later event of the
// same pod extends it). A budget reset by the kubelet's write then reads
// max for at most about one interval and one check, where the interval
// pass of the verifier left it for up to --verify-interval.
//
// One goroutine (run) serves every watch: each interval it checks every
// watched pod's records and cgroups in one pass (Verifier.CheckPods, one
// lock of the records however many pods starting or resized at once), and
// a watch ends window after the pod's last event.
type podWatch struct {
	verifier Verifier
	interval time.Duration
	window   time.Duration
	events   chan string
}

func newPodWatch(v Verifier, interval, window time.Duration) *podWatch {
	if interval <= 0 {
		interval = DefaultPodWatchInterval
	}
	if window <= 0 {
		window = DefaultPodWatchWindow
	}
	return &podWatch{verifier: v, interval: interval, window: window, events: make(chan string, podWatchQueue)}
}

// touch starts or extends the watch of the pod; it never blocks.
func (w *podWatch) touch(ctx context.Context, podUID string) {
	if podUID == "" {
		return
	}
	select {
	case w.events <- podUID:
	default:
		klog.FromContext(ctx).Info("Pod update events queued beyond the bound; this one waits for the verifier's interval pass", "podUID", podUID, "bound", podWatchQueue)
	}
}

// run serves the watches until ctx ends.
func (w *podWatch) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	until := map[string]time.Time{}
	ticker := time.NewTicker(w.interval)
	ticker.Stop()
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case uid := <-w.events:
			if len(until) == 0 {
				ticker.Reset(w.interval)
			}
			until[uid] = time.Now().Add(w.window)
			continue
		case <-ticker.C:
		}
		now := time.Now()
		uids := make([]string, 0, len(until))
		for uid, end := range until {
			uids = append(uids, uid)
			if now.After(end) {
				delete(until, uid)
			}
		}
		sum, err := w.verifier.CheckPods(ctx, uids, PodUpdateTrigger)
		if err != nil {
			logger.Error(err, "Verifying pods' swap limits after an update", "pods", len(uids))
		} else if sum.Restored > 0 {
			logger.V(2).Info("Restored pods' swap limits after an update", "pods", len(uids), "restored", sum.Restored)
		}
		if len(until) == 0 {
			ticker.Stop()
		}
	}
}
