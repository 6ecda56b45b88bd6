package controller

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

// CacheOptions trim what the cache keeps of pods, nodes and claims to the
// fields the controller reads, so that its memory grows with the number of
// pods by a few hundred bytes each, not by whole pod specs and node
// statuses (a node's image list alone is often tens of kilobytes), and
// watch only the driver's own ResourceSlices (the API server filters them
// by spec.driver): other drivers' slices, which GPU drivers make large and
// numerous, never reach the controller.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:                {Transform: trimPod},
			&corev1.Node{}:               {Transform: trimNode},
			&resourceapi.ResourceClaim{}: {Transform: trimClaim},
			&resourceapi.ResourceSlice{}: {Field: fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, v1alpha1.DriverName)},
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
			NodeName:       pod.Spec.NodeName,
			ResourceClaims: pod.Spec.ResourceClaims,
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

// trimClaim keeps what the controller reads of a claim: its identity; of
// an allocated claim, the allocation's node selector and its dra.swap
// results, and the pods it is reserved for when it has one; of an
// unallocated one, the device classes it requests (the pending explainer
// tells swap claims by them); and the marks of a claim made for a pod's
// extended resources (podlabels.UsesClaim): its annotation and its
// controlling pod. Another driver's allocated claim keeps an allocation
// without results: allocated, and not to this driver.
func trimClaim(obj any) (any, error) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return obj, nil
	}
	out := &resourceapi.ResourceClaim{
		TypeMeta: claim.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              claim.Name,
			Namespace:         claim.Namespace,
			UID:               claim.UID,
			ResourceVersion:   claim.ResourceVersion,
			DeletionTimestamp: claim.DeletionTimestamp,
		},
	}
	if v, ok := claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation]; ok {
		out.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: v}
	}
	if ref := metav1.GetControllerOfNoCopy(claim); ref != nil && ref.APIVersion == "v1" && ref.Kind == "Pod" {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	if a := claim.Status.Allocation; a != nil {
		kept := &resourceapi.AllocationResult{NodeSelector: a.NodeSelector}
		for _, r := range a.Devices.Results {
			if r.Driver == v1alpha1.DriverName {
				kept.Devices.Results = append(kept.Devices.Results, resourceapi.DeviceRequestAllocationResult{
					Request: r.Request, Driver: r.Driver, Pool: r.Pool, Device: r.Device,
				})
			}
		}
		out.Status.Allocation = kept
		if len(kept.Devices.Results) > 0 {
			out.Status.ReservedFor = claim.Status.ReservedFor
		}
		return out, nil
	}
	for _, r := range claim.Spec.Devices.Requests {
		req := resourceapi.DeviceRequest{Name: r.Name}
		if r.Exactly != nil {
			req.Exactly = &resourceapi.ExactDeviceRequest{DeviceClassName: r.Exactly.DeviceClassName}
		}
		for _, s := range r.FirstAvailable {
			req.FirstAvailable = append(req.FirstAvailable, resourceapi.DeviceSubRequest{Name: s.Name, DeviceClassName: s.DeviceClassName})
		}
		out.Spec.Devices.Requests = append(out.Spec.Devices.Requests, req)
	}
	return out, nil
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
