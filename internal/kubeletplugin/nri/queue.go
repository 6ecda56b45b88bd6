package nri

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
)

// The runtime calls the plugin holding its NRI lock, the one every
// container create, update and stop on the node waits for, and drops the
// plugin when a call outlives its request timeout (2 s by default). A
// check waits for the hook state's lock (limitcheck.DefaultLockWait) and
// writes cgroup files, which on a thrashing node take as long as the
// kernel's reclaim does. So no callback checks anything: PostUpdateContainer
// and Synchronize queue the check and return, and a worker runs the queue.
const (
	// maxQueued bounds the containers waiting for a check; beyond it the
	// queue asks for one pass over every container instead.
	maxQueued = 1024
	// busyRetry is how soon a check that found the records' lock taken
	// (limitcheck.Busy) is tried again, and busyRetries how often: after
	// that, the verifier's interval pass checks the container.
	busyRetry   = 500 * time.Millisecond
	busyRetries = 20
)

// checkQueue is the checks the runtime's events asked for: containers
// after an update, each once however often it was updated, and a pass over
// all of them after a synchronization.
type checkQueue struct {
	mu sync.Mutex
	// ids are the containers to check, in the order their updates came;
	// busy counts the times a container's check found the lock taken.
	ids  []string
	busy map[string]int
	// all asks for a pass over every container (CheckAll); allTrigger
	// is what asked for it.
	all        bool
	allTrigger string
	wake       chan struct{}
	// retry is how soon a busy check is tried again (busyRetry).
	retry time.Duration
}

func newCheckQueue() *checkQueue {
	return &checkQueue{busy: map[string]int{}, wake: make(chan struct{}, 1), retry: busyRetry}
}

// add queues a check of the container; it never blocks.
func (q *checkQueue) add(id string) {
	q.mu.Lock()
	q.addLocked(id, 0)
	q.mu.Unlock()
	q.signal()
}

func (q *checkQueue) addLocked(id string, busy int) {
	if _, queued := q.busy[id]; queued {
		return
	}
	if len(q.ids) >= maxQueued {
		// A pass over every container covers this one too.
		q.all, q.allTrigger = true, "update"
		return
	}
	q.ids = append(q.ids, id)
	q.busy[id] = busy
}

// addAll queues a pass over every container; it never blocks.
func (q *checkQueue) addAll(trigger string) {
	q.mu.Lock()
	q.all, q.allTrigger = true, trigger
	q.mu.Unlock()
	q.signal()
}

func (q *checkQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued and empties the queue.
func (q *checkQueue) take() (ids []string, busy map[string]int, all bool, allTrigger string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids, busy, all, allTrigger = q.ids, q.busy, q.all, q.allTrigger
	q.ids, q.busy, q.all, q.allTrigger = nil, map[string]int{}, false, ""
	return ids, busy, all, allTrigger
}

// run checks what is queued with v until ctx ends.
func (q *checkQueue) run(ctx context.Context, v Verifier) {
	logger := klog.FromContext(ctx)
	var retry <-chan time.Time // nil: no busy check waits
	var waiting []string       // busy checks to try again
	var waitingBusy map[string]int
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		case <-retry:
			retry = nil
			q.mu.Lock()
			for _, id := range waiting {
				q.addLocked(id, waitingBusy[id])
			}
			q.mu.Unlock()
			waiting, waitingBusy = nil, nil
		}
		ids, busy, all, allTrigger := q.take()
		if all {
			sum, err := v.CheckAll(ctx, allTrigger, time.Minute)
			if err != nil {
				logger.Error(err, "Verifying swap limits", "trigger", allTrigger)
			}
			logger.V(2).Info("Verified swap limits", "trigger", allTrigger, "held", sum.Held, "restored", sum.Restored, "failed", sum.Failed, "busy", sum.Busy)
		}
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			outcome, err := v.Check(ctx, id, "update")
			if err != nil {
				logger.Error(err, "Verifying the swap limit after a container update", "containerID", id)
			}
			if outcome == limitcheck.Busy && busy[id] < busyRetries && len(waiting) < maxQueued {
				if waitingBusy == nil {
					waitingBusy = map[string]int{}
				}
				if _, ok := waitingBusy[id]; !ok {
					waiting = append(waiting, id)
				}
				waitingBusy[id] = busy[id] + 1
			}
		}
		if len(waiting) > 0 && retry == nil {
			retry = time.After(q.retry)
		}
	}
}
