package kubeletplugin

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// A prepare that asks for a pod the cache has not seen yet is woken when
// the informer delivers it; one that never comes is not found.
func TestPodSourceWaitsForThePod(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	// Without the wake-up, the lookup would wait the whole hour.
	s := &podSource{lister: listersv1.NewPodLister(indexer), wait: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan *corev1.Pod, 1)
	errs := make(chan error, 1)
	go func() {
		pod, err := s.GetPod(ctx, "ns", "late", "u")
		got <- pod
		errs <- err
	}()
	// The informer delivers the pod once the lookup waits.
	for {
		s.mu.Lock()
		waiting := len(s.waiters["ns/late"])
		s.mu.Unlock()
		if waiting > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "late", UID: "u"}}
	if err := indexer.Add(pod); err != nil {
		t.Fatal(err)
	}
	s.arrived(pod)
	if p, err := <-got, <-errs; err != nil || p == nil || p.UID != "u" {
		t.Fatalf("GetPod = %v, %v", p, err)
	}
	if len(s.waiters) != 0 {
		t.Errorf("waiters left: %v", s.waiters)
	}
	s.wait = 10 * time.Millisecond
	if _, err := s.GetPod(ctx, "ns", "never", "u"); !apierrors.IsNotFound(err) {
		t.Errorf("a pod that never comes: %v, want not found", err)
	}
}

// The cache may still hold an earlier pod of the same name (a StatefulSet
// pod deleted and recreated): the lookup of the new one waits for it like
// for a pod not seen yet, and never answers with the earlier pod.
func TestPodSourceWaitsForThePodsUID(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	earlier := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0", UID: "old"}}
	if err := indexer.Add(earlier); err != nil {
		t.Fatal(err)
	}
	s := &podSource{lister: listersv1.NewPodLister(indexer), wait: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The earlier pod is all the cache has until the wait ends: not found.
	if p, err := s.GetPod(ctx, "ns", "web-0", "new"); !apierrors.IsNotFound(err) {
		t.Fatalf("GetPod = pod with UID %q, %v; want not found", p.GetUID(), err)
	}

	// Without the wake-up, the lookup would wait the whole hour.
	s.wait = time.Hour
	got := make(chan *corev1.Pod, 1)
	errs := make(chan error, 1)
	go func() {
		pod, err := s.GetPod(ctx, "ns", "web-0", "new")
		got <- pod
		errs <- err
	}()
	for {
		s.mu.Lock()
		waiting := len(s.waiters["ns/web-0"])
		s.mu.Unlock()
		if waiting > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// An update of the earlier pod wakes the lookup, which waits on.
	s.arrived(earlier)
	recreated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0", UID: "new"}}
	if err := indexer.Update(recreated); err != nil {
		t.Fatal(err)
	}
	s.arrived(recreated)
	if p, err := <-got, <-errs; err != nil || p.GetUID() != "new" {
		t.Fatalf("GetPod = pod with UID %q, %v; want the recreated pod", p.GetUID(), err)
	}
}

// The cache keeps what prepare reads of a pod: a container that asks for
// swap as an extended resource is mapped to the scheduler's claim by the
// pod's status, for the resources the container requests.
func TestTrimPodKeepsTheExtendedResourceClaim(t *testing.T) {
	const swapResource = "deviceclass.resource.kubernetes.io/dra.swap"
	status := &corev1.PodExtendedResourceClaimStatus{
		ResourceClaimName: "web-extended-resources-x7k2p",
		RequestMappings:   []corev1.ContainerExtendedResourceRequest{{ContainerName: "app", ResourceName: swapResource, RequestName: "container-0-request-0"}},
	}
	requests := corev1.ResourceList{swapResource: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("1")}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app",
			Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests}}}},
		Status: corev1.PodStatus{ExtendedResourceClaimStatus: status},
	}
	obj, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := obj.(*corev1.Pod)
	if !equality.Semantic.DeepEqual(trimmed.Status.ExtendedResourceClaimStatus, status) {
		t.Errorf("extended resource claim status = %+v, want %+v", trimmed.Status.ExtendedResourceClaimStatus, status)
	}
	want := corev1.ResourceList{swapResource: resource.MustParse("1")}
	if got := trimmed.Spec.Containers[0].Resources.Requests; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("container's requests = %v, want only the mapped resource %v", got, want)
	}
	if trimmed.Labels != nil || trimmed.Spec.Containers[0].Image != "" || trimmed.Spec.Containers[0].Resources.Limits != nil {
		t.Errorf("trimmed pod keeps what prepare does not read: %+v", trimmed)
	}
}
