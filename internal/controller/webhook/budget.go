package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What a review may make the controller ask of the API server. The
// handlers read only the informer cache: a review that names an object
// the cache does not show (yet) waits for it, up to CacheWait, and then
// labels nothing (the reconciler labels the pod once it is bound). So no
// review, forged or not, costs an API read, and the only API calls
// reviews cause are the pod label patches, which PatchBudget bounds.
const (
	// DefaultCacheWait is how long a review waits for the cache to show
	// what it names: the scheduler writes a claim (finalizer, then status)
	// moments before the review of its status, and the watch brings the
	// write to the cache within milliseconds, or seconds on an overloaded
	// control plane; it stays under the chart's 3 s webhook timeout, so the
	// label patch can still follow.
	DefaultCacheWait = 2 * time.Second
	// cachePoll is how often a waiting review looks at the cache again.
	cachePoll = 10 * time.Millisecond
	// RecentPatches is how many of the pods the webhooks labelled last
	// are remembered; RelabelQPS and RelabelBurst bound how often one of
	// them is labelled again (a pod rescheduled to another node, or a
	// forger alternating nodes).
	RecentPatches = 16384
	RelabelQPS    = 1
	RelabelBurst  = 5
)

// Why a review left a pod to the reconciler (the labelers' Deferred).
const (
	// DeferredNotCached: the cache did not show the claim, pod or
	// allocation the review names within CacheWait.
	DeferredNotCached = "not-cached"
	// DeferredRelabelBudget: the pod was labelled lately and the relabel
	// budget is spent.
	DeferredRelabelBudget = "relabel-budget"
)

// PatchBudget bounds the pod label patches the webhooks make, whatever
// the reviews they are sent. A pod is labelled once by the webhooks when
// it is about to be bound (at its claim's reservation, or at its binding);
// a review can make them label it again, with other labels, only while the
// node is not yet confirmed by the API, and only a forger (or a rare
// rescheduling) does that. So the first patch of a pod is free, and a pod
// among the RecentPatches patched last takes a token of a bucket of
// RelabelQPS (burst RelabelBurst), shared by every pod and both labelers:
// what forged reviews can add to the patches real ones cause is that
// rate, not the rate at which they are posted. A nil budget allows all.
type PatchBudget struct {
	mu      sync.Mutex
	recent  map[types.UID]struct{}
	order   []types.UID // ring of the recent UIDs, oldest at next
	next    int
	relabel flowcontrol.RateLimiter
}

// NewPatchBudget returns a budget remembering the last remember pods,
// with qps and burst for labelling one of them again.
func NewPatchBudget(remember int, qps float32, burst int) *PatchBudget {
	remember = max(remember, 1)
	return &PatchBudget{
		recent:  make(map[types.UID]struct{}, remember),
		order:   make([]types.UID, 0, remember),
		relabel: flowcontrol.NewTokenBucketRateLimiter(qps, burst),
	}
}

// Allow reports whether the pod may be patched now, and if so counts the
// patch.
func (b *PatchBudget) Allow(uid types.UID) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.recent[uid]; ok {
		return b.relabel.TryAccept()
	}
	if len(b.order) < cap(b.order) {
		b.order = append(b.order, uid)
	} else {
		delete(b.recent, b.order[b.next])
		b.order[b.next] = uid
		b.next = (b.next + 1) % len(b.order)
	}
	b.recent[uid] = struct{}{}
	return true
}

// awaitCache calls look until it reports done or fails, at once and then
// every cachePoll until until; it reports whether look was done.
func awaitCache(ctx context.Context, until time.Time, look func() (bool, error)) (bool, error) {
	for {
		done, err := look()
		if done || err != nil {
			return done, err
		}
		wait := min(cachePoll, time.Until(until))
		if wait <= 0 {
			return false, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
	}
}

// cached reads the object key from the cache r into obj, for awaitCache's
// look: false (and no error) while the cache does not show it; kind names
// it in the error.
func cached(ctx context.Context, r client.Reader, kind string, key types.NamespacedName, obj client.Object) (bool, error) {
	switch err := r.Get(ctx, key, obj); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("get %s %s from the cache: %w", kind, key, err)
	}
	return true, nil
}
