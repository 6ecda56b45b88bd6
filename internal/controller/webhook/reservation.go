package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

// ReservationPath is where the reservation labeler is served.
const ReservationPath = "/label-reserved-pods"

// FieldManager names the controller's writes.
const FieldManager = "dra-swap-controller"

// ReservationLabeler labels a pod with its node's topology and swap labels
// when the scheduler reserves a dra.swap claim for it. The scheduler does
// that in the claim status update it makes just before it binds the pod,
// and the claim's allocation names the node (the driver's pool is named
// after it), so the labels are on the pod before the binding and the
// Downward API sees them when the containers start. Only such updates
// reach the handler (the webhook's match conditions); it never denies
// one, and it does not label on a dry run.
//
// Anyone who reaches the webhook Service can post a review, so the handler
// acts only on what the API confirms, as its informer cache shows it (it
// never reads the API server: a review that names what the cache does not
// show waits up to CacheWait for it, then labels nothing). The update
// under review is not stored yet, so the stored claim cannot show the new
// reservation; the handler checks everything that is stored:
//   - the claim: the review's namespace and name; its UID and
//     resourceVersion must be the review's, so the review's old object is
//     the stored claim and the newly reserved pods are those the update
//     adds to it;
//   - the node: the stored claim's dra.swap allocation; only while the
//     stored claim is unallocated (the update allocates it), the
//     allocation under review, and then only a node whose plugin publishes
//     the driver's device;
//   - each newly reserved pod (at most MaxNewReservations): in the claim's
//     namespace, with the reserved UID, not bound yet, not being deleted,
//     and using the claim (podlabels.UsesClaim: its spec names the claim,
//     its status names the claim generated for it, or the claim is the one
//     the scheduler made for the extended resources the pod requests,
//     which the pod's status names only after this reservation).
//
// What a forged review can still do is set the labels the controller owns
// on an unbound pod that uses the claim to those of a node that runs the
// driver, which the scheduler's own reservation and, once the pod is
// bound, the reconciler overwrite; Patches bounds how often.
type ReservationLabeler struct {
	// Claims and Pods read the cache.
	Claims client.Reader
	Pods   client.Reader
	Client client.Writer
	Nodes  NodeGetter
	Policy podlabels.Policy
	// CacheWait is how long a review waits for the cache to show the
	// claim and pods it names (0: it looks once).
	CacheWait time.Duration
	// Patches bounds the pod patches (nil: unbounded).
	Patches *PatchBudget
	// Patched, if set, is told about every pod it labeled; Deferred about
	// every pod it left to the reconciler, and why (DeferredNotCached,
	// DeferredRelabelBudget).
	Patched  func()
	Deferred func(reason string)
}

// Handle implements admission.Handler.
func (h *ReservationLabeler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update || req.SubResource != "status" || req.Kind.Kind != "ResourceClaim" {
		return admission.Allowed("not a claim status update")
	}
	if req.DryRun != nil && *req.DryRun {
		return admission.Allowed("dry run: nothing labeled")
	}
	view, oldView := &claimStatusView{}, &claimStatusView{}
	if err := json.Unmarshal(req.Object.Raw, view); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode ResourceClaim: %w", err))
	}
	if err := json.Unmarshal(req.OldObject.Raw, oldView); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the old ResourceClaim: %w", err))
	}
	key := types.NamespacedName{Namespace: req.Namespace, Name: req.Name}
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(key.Namespace, key.Name))
	for _, v := range []*claimStatusView{view, oldView} {
		if over := v.overLimits(); over != "" {
			return admission.Allowed("ignored: " + over + ", which the API server never sends")
		}
	}
	claim, old := view.claim(), oldView.claim()
	if claim.Namespace != key.Namespace || claim.Name != key.Name || old.UID != claim.UID || claim.UID == "" {
		return admission.Allowed("ignored: the objects are not the reviewed claim")
	}
	if swapNode(claim) == "" {
		return admission.Allowed("no dra.swap allocation")
	}
	until := time.Now().Add(h.CacheWait)
	stored, err := h.storedClaim(ctx, key, claim.UID, old.ResourceVersion, until)
	if err != nil {
		logger.Error(err, "Cannot label the claim's pods; the reconciler will")
		return admission.Allowed("claim not readable")
	}
	if stored == nil || stored.UID != claim.UID || stored.ResourceVersion != old.ResourceVersion {
		h.deferred(DeferredNotCached)
		return admission.Allowed("ignored: the review does not match the stored claim")
	}
	nodeName := swapNode(stored)
	switch {
	case nodeName == "" && stored.Status.Allocation != nil:
		return admission.Allowed("ignored: the stored claim is allocated to another driver")
	case nodeName == "":
		nodeName = swapNode(claim) // the update under review allocates it
	case nodeName != swapNode(claim):
		return admission.Allowed("ignored: the review's allocation is not the stored claim's")
	}
	node, err := h.Nodes.Node(ctx, nodeName)
	if err != nil {
		logger.Error(err, "Cannot label the claim's pods; the reconciler will")
		return admission.Allowed("node not readable")
	}
	if !node.RunsDriver() {
		return admission.Allowed("the driver does not run on the node")
	}
	desired := h.Policy.PodLabels(node)
	refs := newlyReserved(claim, stored)
	if len(refs) > MaxNewReservations {
		logger.Info("Review reserves more pods than one is labeled for; the reconciler labels the rest", "reserved", len(refs), "labeled", MaxNewReservations)
		refs = refs[:MaxNewReservations]
	}
	for _, ref := range refs {
		if err := h.label(ctx, stored, ref, desired, until); err != nil {
			logger.Error(err, "Cannot label pod; the reconciler will", "pod", klog.KRef(key.Namespace, ref.Name))
		}
	}
	return admission.Allowed("")
}

func (h *ReservationLabeler) deferred(reason string) {
	if h.Deferred != nil {
		h.Deferred(reason)
	}
}

// storedClaim is the claim as the cache has it once the cache holds the
// version under review (or a later one, or until passes); nil if the cache
// has no claim of that name.
func (h *ReservationLabeler) storedClaim(ctx context.Context, key types.NamespacedName, uid types.UID, resourceVersion string, until time.Time) (*resourceapi.ResourceClaim, error) {
	var claim *resourceapi.ResourceClaim
	_, err := awaitCache(ctx, until, func() (bool, error) {
		c := &resourceapi.ResourceClaim{}
		if ok, err := cached(ctx, h.Claims, "ResourceClaim", key, c); !ok {
			return false, err
		}
		claim = c
		if c.ResourceVersion == resourceVersion && c.UID == uid {
			return true, nil
		}
		// Wait only while the cache is behind the review (a malformed
		// resourceVersion is not the API server's: no wait).
		if cmp, cmpErr := resourceversion.CompareResourceVersion(c.ResourceVersion, resourceVersion); cmpErr == nil && cmp < 0 {
			return false, nil
		}
		return true, nil
	})
	return claim, err
}

func (h *ReservationLabeler) label(ctx context.Context, claim *resourceapi.ResourceClaim, ref resourceapi.ResourceClaimConsumerReference, desired map[string]string, until time.Time) error {
	key := types.NamespacedName{Namespace: claim.Namespace, Name: ref.Name}
	pod := &corev1.Pod{}
	found, err := awaitCache(ctx, until, func() (bool, error) {
		if ok, err := cached(ctx, h.Pods, "pod", key, pod); !ok {
			return false, err
		}
		// The claim controller names a template's claim in the pod's
		// status: the cache may show the pod before that.
		return pod.UID == ref.UID && podlabels.UsesClaim(pod, claim), nil
	})
	if err != nil {
		return err
	}
	if !found {
		h.deferred(DeferredNotCached)
		return nil
	}
	if pod.DeletionTimestamp != nil || pod.Spec.NodeName != "" {
		return nil
	}
	change := podlabels.Diff(pod, desired, h.Policy.Owns)
	if change.Empty() {
		return nil
	}
	if !h.Patches.Allow(pod.UID) {
		h.deferred(DeferredRelabelBudget)
		return nil
	}
	patch, err := change.MergePatch()
	if err != nil {
		return err
	}
	if err := h.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch labels of pod %s: %w", key, err)
	}
	if h.Patched != nil {
		h.Patched()
	}
	klog.FromContext(ctx).V(2).Info("Labeled pod at its claim's reservation", "pod", klog.KObj(pod), "labels", change.Set)
	return nil
}

// swapNode is the node of the claim's dra.swap allocation (its pool is
// named after the node), "" when it has none.
func swapNode(claim *resourceapi.ResourceClaim) string {
	if claim.Status.Allocation == nil {
		return ""
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == v1alpha1.DriverName {
			return r.Pool
		}
	}
	return ""
}

// newlyReserved are the pods the claim is reserved for now and the stored
// claim is not, each once.
func newlyReserved(claim, stored *resourceapi.ResourceClaim) []resourceapi.ResourceClaimConsumerReference {
	seen := map[types.UID]bool{}
	for _, r := range stored.Status.ReservedFor {
		seen[r.UID] = true
	}
	var out []resourceapi.ResourceClaimConsumerReference
	for _, r := range claim.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" && !seen[r.UID] {
			seen[r.UID] = true
			out = append(out, r)
		}
	}
	return out
}
