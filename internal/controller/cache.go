package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/podlabels"
)

// CacheOptions trim what the cache keeps of pods and nodes to the fields
// the controller reads, so that its memory grows with the number of pods
// by a few hundred bytes each, not by whole pod specs and node statuses
// (a node's image list alone is often tens of kilobytes).
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:  {Transform: trimPod},
			&corev1.Node{}: {Transform: trimNode},
		},
	}
}

func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: trimMeta(pod.ObjectMeta, v1alpha1.AnnotationManagedLabels),
		Spec: corev1.PodSpec{
			NodeName:          pod.Spec.NodeName,
			ResourceClaims:    pod.Spec.ResourceClaims,
			PriorityClassName: pod.Spec.PriorityClassName,
		},
		Status: corev1.PodStatus{
			Phase:                 pod.Status.Phase,
			ResourceClaimStatuses: pod.Status.ResourceClaimStatuses,
			Conditions:            scheduledCondition(pod.Status.Conditions),
		},
	}
	if e := pod.Status.ExtendedResourceClaimStatus; e != nil {
		out.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: e.ResourceClaimName}
	}
	if pod.Spec.NodeName == "" {
		out.Spec.Containers = extendedRequests(pod)
	}
	return out, nil
}

// extendedRequests keeps, for an unbound pod, the extended resources it
// requests (podlabels.ExtendedResources), as one container's requests:
// the pending explainer and the reservation labeler read them; a bound
// pod's claim is named in its status.
func extendedRequests(pod *corev1.Pod) []corev1.Container {
	ext := podlabels.ExtendedResources(pod)
	if len(ext) == 0 {
		return nil
	}
	requests := make(corev1.ResourceList, len(ext))
	for _, e := range ext {
		requests[e.Name] = *resource.NewQuantity(e.Quantity, resource.DecimalSI)
	}
	return []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: requests}}}
}

// scheduledCondition keeps the PodScheduled condition of an unbound pod
// (the pending explainer reads it).
func scheduledCondition(conditions []corev1.PodCondition) []corev1.PodCondition {
	for _, c := range conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return []corev1.PodCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason}}
		}
	}
	return nil
}

func trimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{TypeMeta: node.TypeMeta, ObjectMeta: trimMeta(node.ObjectMeta)}, nil
}

// trimMeta keeps identity, labels and the named annotations.
func trimMeta(m metav1.ObjectMeta, annotations ...string) metav1.ObjectMeta {
	var kept map[string]string
	for _, k := range annotations {
		if v, ok := m.Annotations[k]; ok {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		DeletionTimestamp: m.DeletionTimestamp,
		Labels:            m.Labels,
		Annotations:       kept,
	}
}
