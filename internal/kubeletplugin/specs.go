package kubeletplugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/prepare"
)

// reconcileInterval is how often the CDI specs are reconciled with the
// checkpoint after start-up (prepare.Manager.ReconcileSpecs): a spec kept
// unconfirmed is confirmed or removed within it once the API server can
// tell. A pass with nothing to reconcile takes the checkpoint's lock and
// lists the CDI directory, nothing more.
const reconcileInterval = time.Minute

// Node event reasons of the specs' reconciliation (action
// actionReconcileSpecs).
const (
	// reasonCheckpointUnusable: the checkpoint was set aside at start-up;
	// the note says what became of the specs its claims owned.
	reasonCheckpointUnusable = "CheckpointUnusable"
	// reasonSpecsKept: specs are kept that the API server did not confirm.
	reasonSpecsKept = "CDISpecsKept"
	// reasonSpecsResolved: no spec is kept unconfirmed any more.
	reasonSpecsResolved = "CDISpecsResolved"

	actionReconcileSpecs = "ReconcileCDISpecs"
)

// nodeEvents records events on the plugin's Node (nodeReporter).
type nodeEvents interface {
	NodeEvent(eventType, reason, action, message string)
}

// specReconciler reconciles the CDI specs with the checkpoint at start-up
// and every reconcileInterval, and says what it kept: the Node's events,
// dra_swap_kept_cdi_specs and the log.
type specReconciler struct {
	manager *prepare.Manager
	cluster prepare.Cluster
	events  nodeEvents
	metrics *Metrics
	// kept are the claims whose specs the last pass kept.
	kept map[string]bool
}

// startUp is the first pass; opened is what the checkpoint's Open found.
func (r *specReconciler) startUp(ctx context.Context, opened checkpoint.Opened, path string) {
	res, err := r.pass(ctx, "start-up")
	if opened.Unusable == nil {
		r.tellKept(res)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The checkpoint %s was unusable (%v) and is set aside as %s. ", path, opened.Unusable, opened.SetAside)
	if err != nil {
		fmt.Fprintf(&b, "Reconciling the CDI specs with it failed (%v); every spec is kept and the plugin tries again every %v. ", err, reconcileInterval)
	}
	fmt.Fprintf(&b, "Rebuilt %d prepared claims from their CDI specs and the API server, removed %d specs no container on this node can use", len(res.Rebuilt), len(res.Removed))
	if len(res.Kept) > 0 {
		fmt.Fprintf(&b, ", kept %s", keptNote(res.Kept))
	}
	b.WriteString(".")
	r.events.NodeEvent(corev1.EventTypeWarning, reasonCheckpointUnusable, actionReconcileSpecs, b.String())
	r.kept = setOf(res.Kept)
}

// run reconciles every interval until ctx ends.
func (r *specReconciler) run(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		res, err := r.pass(ctx, "interval")
		if err == nil {
			r.tellKept(res)
		}
	}
}

// pass is one reconciliation, logged, with the gauge set from its outcome.
func (r *specReconciler) pass(ctx context.Context, trigger string) (prepare.Reconciled, error) {
	logger := klog.FromContext(ctx)
	res, err := r.manager.ReconcileSpecs(ctx, r.cluster)
	if err != nil {
		logger.Error(err, "Reconciling the CDI specs with the checkpoint", "trigger", trigger)
	}
	for _, uid := range slices.Sorted(maps.Keys(res.Removed)) {
		logger.Info("Removed a CDI spec that no container on this node can use", "claimUID", uid, "why", res.Removed[uid], "trigger", trigger)
	}
	if len(res.Rebuilt) > 0 {
		logger.Info("Rebuilt the checkpoint entries of claims whose CDI specs it did not hold", "claims", res.Rebuilt, "trigger", trigger)
	}
	for _, uid := range slices.Sorted(maps.Keys(res.Kept)) {
		logger.Info("Keeping a CDI spec the API server did not confirm", "claimUID", uid, "why", res.Kept[uid], "trigger", trigger)
	}
	if err == nil || res.Unconfirmed > 0 {
		r.metrics.setKeptSpecs(res.Unconfirmed)
	}
	return res, err
}

// tellKept tells the Node when specs are kept that the last pass did not
// keep, and when none is kept any more.
func (r *specReconciler) tellKept(res prepare.Reconciled) {
	kept := setOf(res.Kept)
	var added []string
	for uid := range kept {
		if !r.kept[uid] {
			added = append(added, uid)
		}
	}
	switch {
	case len(added) > 0:
		slices.Sort(added)
		news := map[string]string{}
		for _, uid := range added {
			news[uid] = res.Kept[uid]
		}
		r.events.NodeEvent(corev1.EventTypeWarning, reasonSpecsKept, actionReconcileSpecs, "Kept "+keptNote(news)+".")
	case len(kept) == 0 && len(r.kept) > 0:
		r.events.NodeEvent(corev1.EventTypeNormal, reasonSpecsResolved, actionReconcileSpecs,
			"Every CDI spec kept without a confirmed checkpoint entry is now confirmed, unprepared or removed.")
	}
	r.kept = kept
}

// keptNote describes kept specs for an event: how many, what it means,
// and each claim with why, bounded to fit the note.
func keptNote(kept map[string]string) string {
	head := fmt.Sprintf("%d CDI specs the API server did not confirm (they count against the offer and stay until the kubelet unprepares "+
		"their claims or a later check, every %v, confirms or removes them; dra_swap_kept_cdi_specs): ", len(kept), reconcileInterval)
	var items []string
	for _, uid := range slices.Sorted(maps.Keys(kept)) {
		items = append(items, "claim "+uid+" ("+kept[uid]+")")
	}
	// The rest of a note (CheckpointUnusable's path, error and counts)
	// gets noteRoom; a longer error is cut by NodeEvent.
	const noteRoom = 320
	return head + eventmsg.List(items, "; ", 5, eventmsg.NoteLimit-noteRoom-len(head))
}

func setOf(m map[string]string) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// apiCluster is what ReconcileSpecs asks (prepare.Cluster): the node's
// pods from the plugin's synced cache, claims from the API server.
type apiCluster struct {
	pods   *podSource
	client kubernetes.Interface
}

func (c apiCluster) NodePods() ([]*corev1.Pod, error) { return c.pods.lister.List(labels.Everything()) }

func (c apiCluster) GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	return c.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}
