// Package webhook holds the controller's admission handlers: a mutating
// webhook on pods/binding that puts the node's topology and swap labels on
// the Binding (the API server copies them onto the pod in the same write
// that binds it, so the Downward API sees them when containers start), and
// a validating webhook for the driver's opaque configuration.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/pkg/labels"
)

// Paths the handlers are served at.
const (
	BindingPath = "/mutate-pods-binding"
	ConfigPath  = "/validate-swap-config"
)

// NodeGetter returns what is known of a node.
type NodeGetter interface {
	Node(ctx context.Context, name string) (labels.Node, error)
}

// PodSelector decides whether a pod gets labels.
type PodSelector interface {
	Selected(ctx context.Context, pod *corev1.Pod) (bool, error)
}

// BindingLabeler is the mutating handler for pods/binding.
type BindingLabeler struct {
	// Pods reads pods: the cache, then the API server for a pod the cache
	// has not seen yet.
	Pods      client.Reader
	APIReader client.Reader
	Nodes     NodeGetter
	Selector  PodSelector
	Policy    labels.Policy
}

// Handle adds labels to a Binding. It never denies: on any error the
// binding goes ahead unchanged and the reconciler labels the pod later.
func (h *BindingLabeler) Handle(ctx context.Context, req admission.Request) admission.Response {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(req.Namespace, req.Name))
	if req.Operation != admissionv1.Create || req.SubResource != "binding" {
		return admission.Allowed("not a pod binding")
	}
	binding := &corev1.Binding{}
	if err := json.Unmarshal(req.Object.Raw, binding); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode Binding: %w", err))
	}
	if binding.Target.Kind != "" && binding.Target.Kind != "Node" {
		return admission.Allowed("binding target is not a node")
	}
	podName := binding.Name
	if podName == "" {
		podName = req.Name
	}
	pod, err := h.pod(ctx, types.NamespacedName{Namespace: req.Namespace, Name: podName})
	if err != nil {
		logger.Error(err, "Cannot label binding; the reconciler will label the pod")
		return admission.Allowed("pod not readable: " + err.Error())
	}
	node, err := h.Nodes.Node(ctx, binding.Target.Name)
	if err != nil {
		logger.Error(err, "Cannot label binding; the reconciler will label the pod")
		return admission.Allowed("node not readable")
	}
	if !node.RunsDriver() {
		return admission.Allowed("the driver does not run on the node")
	}
	selected, err := h.Selector.Selected(ctx, pod)
	if err != nil {
		logger.Error(err, "Cannot label binding; the reconciler will label the pod")
		return admission.Allowed("selection failed")
	}
	if !selected {
		return admission.Allowed("pod not selected")
	}
	desired := h.Policy.PodLabels(node)
	if len(desired) == 0 {
		return admission.Allowed("no labels")
	}
	bindingLabels := maps.Clone(binding.Labels)
	if bindingLabels == nil {
		bindingLabels = map[string]string{}
	}
	maps.Copy(bindingLabels, desired)
	annotations := maps.Clone(binding.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	// Binding annotations replace the pod's: keep the keys it set earlier
	// listed, so the reconciler can still remove them.
	managed := maps.Clone(desired)
	for _, k := range labels.ParseManaged(pod.Annotations[labels.ManagedAnnotation]) {
		if _, ok := pod.Labels[k]; ok && h.Policy.Owns(k) {
			managed[k] = ""
		}
	}
	annotations[labels.ManagedAnnotation] = labels.Managed(managed)
	// Patch the request's own JSON, not a re-encoded Binding, so that the
	// patch touches the labels and annotations only, whatever else a newer
	// API server sends.
	var object map[string]any
	if err := json.Unmarshal(req.Object.Raw, &object); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode Binding: %w", err))
	}
	metadata, _ := object["metadata"].(map[string]any)
	if metadata == nil {
		metadata = map[string]any{}
		object["metadata"] = metadata
	}
	metadata["labels"], metadata["annotations"] = bindingLabels, annotations
	raw, err := json.Marshal(object)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encode Binding: %w", err))
	}
	logger.V(2).Info("Labeling pod at binding", "node", binding.Target.Name, "labels", desired)
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

func (h *BindingLabeler) pod(ctx context.Context, key types.NamespacedName) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := h.Pods.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) && h.APIReader != nil {
		err = h.APIReader.Get(ctx, key, pod)
	}
	if err != nil {
		return nil, fmt.Errorf("get pod %s: %w", key, err)
	}
	return pod, nil
}
