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

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/internal/podlabels"
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
// binds the pod carries the labels. It does not label on a dry run.
//
// A review is not trusted: the pod is read from the cache or the API
// server (by the review's namespace and name, with the Binding's UID when
// it names one), it must not be bound yet nor being deleted, the policy
// must select it and the target node must run the driver. A forged review
// can at most set the labels the controller owns on an unbound selected
// pod to those of a node that runs the driver, which the reconciler
// overwrites once the pod is bound.
type BindingLabeler struct {
	// Pods reads pods: the cache, then the API server (APIReader) for a
	// pod the cache has not seen yet.
	Pods      client.Reader
	APIReader client.Reader
	Client    client.Writer
	Nodes     NodeGetter
	Selector  PodSelector
	Policy    podlabels.Policy
	// Patched, if set, is told about every pod it labeled.
	Patched func()
}

// Handle labels the pod of a Binding. It always allows the binding: on
// any error the reconciler labels the pod once it is bound.
func (h *BindingLabeler) Handle(ctx context.Context, req admission.Request) admission.Response {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(req.Namespace, req.Name))
	if req.Operation != admissionv1.Create || req.SubResource != "binding" {
		return admission.Allowed("not a pod binding")
	}
	binding := &corev1.Binding{}
	if err := json.Unmarshal(req.Object.Raw, binding); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode Binding: %w", err))
	}
	if req.DryRun != nil && *req.DryRun {
		return admission.Allowed("dry run: nothing labeled")
	}
	if binding.Target.Kind != "" && binding.Target.Kind != "Node" {
		return admission.Allowed("binding target is not a node")
	}
	pod, err := h.pod(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, binding.UID)
	if err != nil {
		logger.Error(err, "Cannot label pod at binding; the reconciler will")
		return admission.Allowed("pod not readable")
	}
	if pod == nil || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		return admission.Allowed("no unbound pod of that name")
	}
	node, err := h.Nodes.Node(ctx, binding.Target.Name)
	if err != nil {
		logger.Error(err, "Cannot label pod at binding; the reconciler will")
		return admission.Allowed("node not readable")
	}
	if !node.RunsDriver() {
		return admission.Allowed("the driver does not run on the node")
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

// pod reads the pod from the cache, then the API server; nil when it does
// not exist or is not the one with uid (when uid is set).
func (h *BindingLabeler) pod(ctx context.Context, key types.NamespacedName, uid types.UID) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := h.Pods.Get(ctx, key, pod)
	if (apierrors.IsNotFound(err) || err == nil && uid != "" && pod.UID != uid) && h.APIReader != nil {
		pod = &corev1.Pod{}
		err = h.APIReader.Get(ctx, key, pod)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get pod %s: %w", key, err)
	case uid != "" && pod.UID != uid:
		return nil, nil
	}
	return pod, nil
}
