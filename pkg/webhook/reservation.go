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

	"github.com/dra-driver-swap/dra-driver-swap/pkg/labels"
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
type ReservationLabeler struct {
	// Pods reads the pods to label from the API server: they were created
	// a moment ago, so a cache may not have them yet.
	Pods   client.Reader
	Client client.Writer
	Nodes  NodeGetter
	Policy labels.Policy
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
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim))
	nodeName := swapNode(claim)
	if nodeName == "" {
		return admission.Allowed("no dra.swap allocation")
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
	for _, ref := range newlyReserved(claim, old) {
		if err := h.label(ctx, claim.Namespace, ref, desired); err != nil {
			logger.Error(err, "Cannot label pod; the reconciler will", "pod", klog.KRef(claim.Namespace, ref.Name))
		}
	}
	return admission.Allowed("")
}

func (h *ReservationLabeler) label(ctx context.Context, namespace string, ref resourceapi.ResourceClaimConsumerReference, desired map[string]string) error {
	pod := &corev1.Pod{}
	if err := h.Pods.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, pod); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pod.UID != ref.UID || pod.DeletionTimestamp != nil {
		return nil
	}
	change := labels.Diff(pod, desired, h.Policy.Owns)
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
		return fmt.Errorf("patch labels of pod %s/%s: %w", namespace, ref.Name, err)
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
		if r.Driver == labels.DriverName {
			return r.Pool
		}
	}
	return ""
}

// newlyReserved are the pods the claim is reserved for now and was not
// before.
func newlyReserved(claim, old *resourceapi.ResourceClaim) []resourceapi.ResourceClaimConsumerReference {
	before := map[types.UID]bool{}
	for _, r := range old.Status.ReservedFor {
		before[r.UID] = true
	}
	var out []resourceapi.ResourceClaimConsumerReference
	for _, r := range claim.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" && !before[r.UID] {
			out = append(out, r)
		}
	}
	return out
}
