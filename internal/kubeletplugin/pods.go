package kubeletplugin

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
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
	node string
	// factory starts the informer (start); nil in tests.
	factory informers.SharedInformerFactory
	lister  listersv1.PodLister
	synced  cache.InformerSynced
	// wait bounds the wait for a pod not in the cache yet (podCacheWait).
	wait time.Duration

	mu sync.Mutex
	// waiters are woken when the informer adds or updates the pod
	// (namespace/name) they wait for.
	waiters map[string][]chan struct{}
}

// newPodSource sets up the node's pod informer; start starts it.
func newPodSource(client kubernetes.Interface, nodeName string) (*podSource, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	}))
	informer := factory.Core().V1().Pods()
	// Only what prepare reads: the spec's claims and containers' claim
	// references and priority class, the status' claim names.
	if err := informer.Informer().SetTransform(trimPod); err != nil {
		return nil, fmt.Errorf("watch pods of node %s: %w", nodeName, err)
	}
	src := &podSource{node: nodeName, factory: factory, lister: informer.Lister(), synced: informer.Informer().HasSynced, wait: podCacheWait}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    src.arrived,
		UpdateFunc: func(_, obj any) { src.arrived(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watch pods of node %s: %w", nodeName, err)
	}
	return src, nil
}

// start starts the informer and waits for its first list.
func (s *podSource) start(ctx context.Context) error {
	return startInformer(ctx, s.factory, s.synced, "watch pods of node "+s.node)
}

// GetPod implements prepare.PodGetter from the cache. A pod the cache has
// not seen yet (the kubelet and the plugin learn of a binding at about the
// same time), or holds only under another UID (a pod recreated under the
// same name, whose predecessor's deletion the cache has not seen yet), is
// waited for, up to podCacheWait, woken by the informer as soon as it
// arrives; one that does not appear is reported as not found.
func (s *podSource) GetPod(ctx context.Context, namespace, name string, uid types.UID) (*corev1.Pod, error) {
	if pod, done, err := s.cached(namespace, name, uid); done {
		return pod, err
	}
	key := namespace + "/" + name
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.waiters == nil {
		s.waiters = map[string][]chan struct{}{}
	}
	s.waiters[key] = append(s.waiters[key], ch)
	s.mu.Unlock()
	defer s.forget(key, ch)
	timeout := time.NewTimer(s.wait)
	defer timeout.Stop()
	for {
		// Again, now that a waiter is registered: the pod may have
		// arrived in between.
		if pod, done, err := s.cached(namespace, name, uid); done {
			return pod, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout.C:
			return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
		case <-ch:
		}
	}
}

// cached returns the cached pod of that name and UID; done is false when
// the cache has no such pod (yet).
func (s *podSource) cached(namespace, name string, uid types.UID) (pod *corev1.Pod, done bool, err error) {
	pod, err = s.lister.Pods(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, true, err
	case pod.UID != uid:
		return nil, false, nil
	}
	return pod, true, nil
}

// initContainer says whether the cached pod has an init (or sidecar)
// container of that name; false when the pod is not in the cache.
func (s *podSource) initContainer(namespace, pod, container string) bool {
	p, err := s.lister.Pods(namespace).Get(pod)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == container })
}

// arrived wakes those who wait for the pod.
func (s *podSource) arrived(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.waiters[pod.Namespace+"/"+pod.Name] {
		signal(ch)
	}
}

func (s *podSource) forget(key string, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiters[key] = slices.DeleteFunc(s.waiters[key], func(c chan struct{}) bool { return c == ch })
	if len(s.waiters[key]) == 0 {
		delete(s.waiters, key)
	}
}

// trimPod keeps what the plugin reads of a pod: its claims, its
// extended-resource claim with the requests of the containers that it maps
// (the kubelet gives a container that claim's devices for a resource the
// container requests), the priority class.
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
		Status: corev1.PodStatus{
			ResourceClaimStatuses:       pod.Status.ResourceClaimStatuses,
			ExtendedResourceClaimStatus: pod.Status.ExtendedResourceClaimStatus,
		},
	}
	mapped := map[corev1.ResourceName]bool{}
	if e := pod.Status.ExtendedResourceClaimStatus; e != nil {
		for _, m := range e.RequestMappings {
			mapped[corev1.ResourceName(m.ResourceName)] = true
		}
	}
	trim := func(cs []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, Resources: corev1.ResourceRequirements{Claims: c.Resources.Claims}}
			for name, q := range c.Resources.Requests {
				if mapped[name] {
					if out[i].Resources.Requests == nil {
						out[i].Resources.Requests = corev1.ResourceList{}
					}
					out[i].Resources.Requests[name] = q
				}
			}
		}
		return out
	}
	trimmed.Spec.InitContainers = trim(pod.Spec.InitContainers)
	trimmed.Spec.Containers = trim(pod.Spec.Containers)
	return trimmed, nil
}
