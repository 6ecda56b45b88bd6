package plugin

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// podCacheWait bounds how long a prepare waits for a pod the node-scoped
// cache has not seen yet: the kubelet prepares a pod's claims as soon as
// it sees the pod bound to the node, which the plugin's watch reports at
// about the same time.
const podCacheWait = 2 * time.Second

// podSource serves the pods bound to this node from an informer whose
// list and watch carry the field selector spec.nodeName=<node>: the
// plugin reads no other node's pods, and no prepare waits for the API
// server.
type podSource struct {
	lister listersv1.PodLister
	synced cache.InformerSynced
	// wait bounds the wait for a pod not in the cache yet (podCacheWait).
	wait time.Duration
}

// watchPods starts the node's pod informer and waits for its first list.
func watchPods(ctx context.Context, client kubernetes.Interface, nodeName string) (*podSource, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	}))
	informer := factory.Core().V1().Pods()
	// Only what prepare reads: the spec's claims and containers' claim
	// references and priority class, the status' claim names.
	if err := informer.Informer().SetTransform(trimPod); err != nil {
		return nil, fmt.Errorf("watch pods of node %s: %w", nodeName, err)
	}
	src := &podSource{lister: informer.Lister(), synced: informer.Informer().HasSynced, wait: podCacheWait}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), src.synced) {
		return nil, fmt.Errorf("watch pods of node %s: cache did not sync", nodeName)
	}
	return src, nil
}

// GetPod implements prepare.PodGetter from the cache. A pod the cache has
// not seen yet is waited for briefly; one that does not appear is
// reported as not found (deleted, or not on this node).
func (s *podSource) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	deadline := time.Now().Add(s.wait)
	for {
		pod, err := s.lister.Pods(namespace).Get(name)
		if err == nil || !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			return pod, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// trimPod keeps what the plugin reads of a pod.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	trimmed := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		Spec: corev1.PodSpec{
			NodeName:          pod.Spec.NodeName,
			PriorityClassName: pod.Spec.PriorityClassName,
			ResourceClaims:    pod.Spec.ResourceClaims,
		},
		Status: corev1.PodStatus{ResourceClaimStatuses: pod.Status.ResourceClaimStatuses},
	}
	trim := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, Resources: corev1.ResourceRequirements{Claims: c.Resources.Claims}}
		}
		return out
	}
	trimmed.Spec.InitContainers = trim(pod.Spec.InitContainers)
	trimmed.Spec.Containers = trim(pod.Spec.Containers)
	return trimmed, nil
}
