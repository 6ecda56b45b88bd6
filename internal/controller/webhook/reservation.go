package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/podlabels"
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
// acts only on what the API confirms. The update under review is not
// stored yet, so the stored claim cannot show the new reservation; the
// handler checks everything that is stored:
//   - the claim: the review's namespace and name, read from the cache (or
//     the API server when the cache lags); its UID and resourceVersion
//     must be the review's, so the review's old object is the stored claim
//     and the newly reserved pods are those the update adds to it;
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
// bound, the reconciler overwrite.
type ReservationLabeler struct {
	// Claims and Pods read the cache; APIReader reads the API server when
	// the cache lags (pods were created a moment ago).
	Claims    client.Reader
	Pods      client.Reader
	APIReader client.Reader
	Client    client.Writer
	Nodes     NodeGetter
	Policy    podlabels.Policy
	// Patched, if set, is told about every pod it labeled.
	Patched func()
}

// Handle implements admission.Handler.
func (h *ReservationLabeler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update || req.SubResource != "status" || req.Kind.Kind != "ResourceClaim" {
		return admission.Allowed("not a claim status update")
	}
	if req.DryRun != nil && *req.DryRun {
		return admission.Allowed("dry run: nothing labeled")
	}
	claim, old := &resourceapi.ResourceClaim{}, &resourceapi.ResourceClaim{}
	if err := json.Unmarshal(req.Object.Raw, claim); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode ResourceClaim: %w", err))
	}
	if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode the old ResourceClaim: %w", err))
	}
	key := types.NamespacedName{Namespace: req.Namespace, Name: req.Name}
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(key.Namespace, key.Name))
	if len(claim.Status.ReservedFor) > MaxReservedFor || len(old.Status.ReservedFor) > MaxReservedFor {
		return admission.Allowed(fmt.Sprintf("ignored: more than %d reservedFor entries, which the API server never sends", MaxReservedFor))
	}
	if claim.Namespace != key.Namespace || claim.Name != key.Name || old.UID != claim.UID || claim.UID == "" {
		return admission.Allowed("ignored: the objects are not the reviewed claim")
	}
	if swapNode(claim) == "" {
		return admission.Allowed("no dra.swap allocation")
	}
	stored, err := h.storedClaim(ctx, key, old.ResourceVersion)
	if err != nil {
		logger.Error(err, "Cannot label the claim's pods; the reconciler will")
		return admission.Allowed("claim not readable")
	}
	if stored == nil || stored.UID != claim.UID || stored.ResourceVersion != old.ResourceVersion {
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
		if err := h.label(ctx, stored, ref, desired); err != nil {
			logger.Error(err, "Cannot label pod; the reconciler will", "pod", klog.KRef(key.Namespace, ref.Name))
		}
	}
	return admission.Allowed("")
}

// storedClaim reads the claim from the cache, or from the API server when
// the cache does not have the version under review; nil if it does not
// exist.
func (h *ReservationLabeler) storedClaim(ctx context.Context, key types.NamespacedName, resourceVersion string) (*resourceapi.ResourceClaim, error) {
	claim := &resourceapi.ResourceClaim{}
	err := h.Claims.Get(ctx, key, claim)
	if err == nil && claim.ResourceVersion == resourceVersion || h.APIReader == nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get ResourceClaim %s from the cache: %w", key, err)
		}
		return claim, nil
	}
	claim = &resourceapi.ResourceClaim{}
	switch err := h.APIReader.Get(ctx, key, claim); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get ResourceClaim %s: %w", key, err)
	}
	return claim, nil
}

func (h *ReservationLabeler) label(ctx context.Context, claim *resourceapi.ResourceClaim, ref resourceapi.ResourceClaimConsumerReference, desired map[string]string) error {
	key := types.NamespacedName{Namespace: claim.Namespace, Name: ref.Name}
	pod := &corev1.Pod{}
	err := h.Pods.Get(ctx, key, pod)
	if (apierrors.IsNotFound(err) || err == nil && pod.UID != ref.UID) && h.APIReader != nil {
		pod = &corev1.Pod{}
		err = h.APIReader.Get(ctx, key, pod)
	}
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if pod.UID != ref.UID || pod.DeletionTimestamp != nil || pod.Spec.NodeName != "" || !podlabels.UsesClaim(pod, claim) {
		return nil
	}
	change := podlabels.Diff(pod, desired, h.Policy.Owns)
	if change.Empty() {
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
