// Package webhook holds the controller's admission handlers: side-effect
// labelers that put the node's topology and swap labels on a pod, through
// the controller's own pod patch, just before the scheduler binds it (when
// it reserves the pod's dra.swap claim, or at the pods/binding write with
// --pod-selection all or namespaces), so the Downward API sees them when
// containers start; and a validating webhook for the driver's opaque
// configuration. See limits.go for what any caller can make them do.
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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

// Paths the handlers are served at.
const (
	BindingPath = "/label-bound-pods"
	ConfigPath  = "/validate-swap-config"
)

// NodeGetter returns what is known of a node.
type NodeGetter interface {
	Node(ctx context.Context, name string) (podlabels.Node, error)
}

// PodSelector decides whether a pod gets labels.
type PodSelector interface {
	Selected(ctx context.Context, pod *corev1.Pod) (bool, error)
}

// BindingLabeler is the validating handler for pods/binding. It never
// denies and never changes the Binding: it labels the pod with a patch of
// its own (the controller's identity, which the chart's labels-only
// admission policy checks) before the binding is stored, so the write that
// binds the pod carries the labels. It does not label on a dry run. The
// controller serves it only when the chart renders its webhook
// (podSelection all or namespaces).
//
// A review is not trusted, and the handler reads only its informer cache
// (a review naming what the cache does not show waits up to CacheWait for
// it, then labels nothing): the pod is read by the review's namespace and
// name, with the Binding's UID when it names one; it must not be bound yet
// nor being deleted; every claim it uses must be allocated, and each
// allocation must be usable on the target node (its node selector selects
// the node; a dra.swap result is in the node's pool): the scheduler
// allocates a pod's claims before it binds the pod, so a binding to
// another node is not the scheduler's; the policy must select the pod and
// the target node must run the driver. A forged review can at most set
// the labels the controller owns on an unbound selected pod to those of a
// node that runs the driver where the pod's claims are allocated (for a
// pod without claims, any such node), which the reconciler overwrites
// once the pod is bound; Patches bounds how often.
type BindingLabeler struct {
	// Pods and Claims read the cache.
	Pods     client.Reader
	Claims   client.Reader
	Client   client.Writer
	Nodes    NodeGetter
	Selector PodSelector
	Policy   podlabels.Policy
	// CacheWait is how long a review waits for the cache to show the pod
	// and its allocated claims (0: it looks once).
	CacheWait time.Duration
	// Patches bounds the pod patches (nil: unbounded).
	Patches *PatchBudget
	// Patched, if set, is told about every pod it labeled; Deferred as the
	// ReservationLabeler's.
	Patched  func()
	Deferred func(reason string)
}

// Handle labels the pod of a Binding. It always allows the binding: on
// any error the reconciler labels the pod once it is bound.
func (h *BindingLabeler) Handle(ctx context.Context, req admission.Request) admission.Response {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(req.Namespace, req.Name))
	if req.Operation != admissionv1.Create || req.SubResource != "binding" {
		return admission.Allowed("not a pod binding")
	}
	binding := &bindingView{}
	if err := json.Unmarshal(req.Object.Raw, binding); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode Binding: %w", err))
	}
	if req.DryRun != nil && *req.DryRun {
		return admission.Allowed("dry run: nothing labeled")
	}
	if binding.Target.Kind != "" && binding.Target.Kind != "Node" {
		return admission.Allowed("binding target is not a node")
	}
	until := time.Now().Add(h.CacheWait)
	pod, err := h.pod(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, binding.Metadata.UID, until)
	if err != nil {
		logger.Error(err, "Cannot label pod at binding; the reconciler will")
		return admission.Allowed("pod not readable")
	}
	if pod == nil {
		h.deferred(DeferredNotCached)
		return admission.Allowed("no such pod in the cache")
	}
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		return admission.Allowed("the pod is bound or being deleted")
	}
	node, err := h.Nodes.Node(ctx, binding.Target.Name)
	if err != nil {
		logger.Error(err, "Cannot label pod at binding; the reconciler will")
		return admission.Allowed("node not readable")
	}
	if !node.RunsDriver() {
		return admission.Allowed("the driver does not run on the node")
	}
	if why, err := h.claimsAllocatedOn(ctx, pod, binding.Target.Name, node.Labels, until); err != nil || why != "" {
		if err != nil {
			logger.Error(err, "Cannot label pod at binding; the reconciler will")
			why = "claims not readable"
		}
		return admission.Allowed(why)
	}
	selected, err := h.Selector.Selected(ctx, pod)
	if err != nil {
		logger.Error(err, "Cannot label pod at binding; the reconciler will")
		return admission.Allowed("selection failed")
	}
	if !selected {
		return admission.Allowed("pod not selected")
	}
	change := podlabels.Diff(pod, h.Policy.PodLabels(node), h.Policy.Owns)
	if change.Empty() {
		return admission.Allowed("labels current")
	}
	if !h.Patches.Allow(pod.UID) {
		h.deferred(DeferredRelabelBudget)
		return admission.Allowed("labelled lately: left to the reconciler")
	}
	patch, err := change.MergePatch()
	if err != nil {
		logger.Error(err, "Cannot label pod at binding; the reconciler will")
		return admission.Allowed("patch not encodable")
	}
	if err := h.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		logger.Error(err, "Cannot label pod at binding; the reconciler will")
		return admission.Allowed("pod not patched")
	}
	if h.Patched != nil {
		h.Patched()
	}
	logger.V(2).Info("Labeled pod at binding", "node", binding.Target.Name, "labels", change.Set)
	return admission.Allowed("")
}

func (h *BindingLabeler) deferred(reason string) {
	if h.Deferred != nil {
		h.Deferred(reason)
	}
}

// pod reads the pod from the cache, waiting until until for it (with uid,
// when uid is set, and naming every claim it uses: the claim controller
// names a template's claim in the pod's status, which the cache may show
// later than the pod); nil when the cache does not show it by then.
func (h *BindingLabeler) pod(ctx context.Context, key types.NamespacedName, uid types.UID, until time.Time) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	found, err := awaitCache(ctx, until, func() (bool, error) {
		if ok, err := cached(ctx, h.Pods, "pod", key, pod); !ok {
			return false, err
		}
		return (uid == "" || pod.UID == uid) && claimsNamed(pod), nil
	})
	if err != nil || !found {
		return nil, err
	}
	return pod, nil
}

// claimsAllocatedOn tells why the pod's claims do not confirm the node
// ("" when they do): each must be created, allocated (as the cache shows
// it, waiting until until) and usable on the node.
func (h *BindingLabeler) claimsAllocatedOn(ctx context.Context, pod *corev1.Pod, nodeName string, nodeLabels map[string]string, until time.Time) (string, error) {
	if !claimsNamed(pod) {
		return "a claim of the pod is not created yet", nil
	}
	for _, name := range podlabels.ClaimNames(pod) {
		key := types.NamespacedName{Namespace: pod.Namespace, Name: name}
		claim := &resourceapi.ResourceClaim{}
		allocated, err := awaitCache(ctx, until, func() (bool, error) {
			if ok, err := cached(ctx, h.Claims, "ResourceClaim", key, claim); !ok {
				return false, err
			}
			return claim.Status.Allocation != nil, nil
		})
		if err != nil {
			return "", err
		}
		if !allocated {
			h.deferred(DeferredNotCached)
			return fmt.Sprintf("claim %s is not allocated", name), nil
		}
		if !usableOn(claim.Status.Allocation, nodeName, nodeLabels) {
			return fmt.Sprintf("claim %s is not allocated on node %s", name, nodeName), nil
		}
	}
	return "", nil
}

// claimsNamed reports whether the pod names every claim it uses (a
// template's, once the claim controller made it, in its status).
func claimsNamed(pod *corev1.Pod) bool {
	for i := range pod.Spec.ResourceClaims {
		if _, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i]); err != nil {
			return false
		}
	}
	return true
}

// usableOn reports whether an allocation's devices can be used on the
// node: its dra.swap results are in the node's pool (the driver names each
// node's pool after it) and its node selector, if any, selects the node.
func usableOn(a *resourceapi.AllocationResult, nodeName string, nodeLabels map[string]string) bool {
	for _, r := range a.Devices.Results {
		if r.Driver == v1alpha1.DriverName && r.Pool != nodeName {
			return false
		}
	}
	if a.NodeSelector == nil {
		return true
	}
	for _, term := range a.NodeSelector.NodeSelectorTerms {
		if termSelects(term, nodeName, nodeLabels) {
			return true
		}
	}
	return false
}

// selectorOperator maps a node selector's operator onto a label
// selector's.
func selectorOperator(op corev1.NodeSelectorOperator) (selection.Operator, bool) {
	switch op {
	case corev1.NodeSelectorOpIn:
		return selection.In, true
	case corev1.NodeSelectorOpNotIn:
		return selection.NotIn, true
	case corev1.NodeSelectorOpExists:
		return selection.Exists, true
	case corev1.NodeSelectorOpDoesNotExist:
		return selection.DoesNotExist, true
	case corev1.NodeSelectorOpGt:
		return selection.GreaterThan, true
	case corev1.NodeSelectorOpLt:
		return selection.LessThan, true
	}
	return "", false
}

// termSelects evaluates a node selector term as the scheduler does: its
// expressions over the node's labels and its fields (metadata.name, In or
// NotIn one value) all hold; an empty term selects nothing.
func termSelects(term corev1.NodeSelectorTerm, nodeName string, nodeLabels map[string]string) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for _, e := range term.MatchExpressions {
		op, ok := selectorOperator(e.Operator)
		if !ok {
			return false
		}
		r, err := labels.NewRequirement(e.Key, op, e.Values)
		if err != nil || !r.Matches(labels.Set(nodeLabels)) {
			return false
		}
	}
	for _, f := range term.MatchFields {
		if f.Key != "metadata.name" || len(f.Values) != 1 {
			return false
		}
		switch f.Operator {
		case corev1.NodeSelectorOpIn:
			if f.Values[0] != nodeName {
				return false
			}
		case corev1.NodeSelectorOpNotIn:
			if f.Values[0] == nodeName {
				return false
			}
		default:
			return false
		}
	}
	return true
}
