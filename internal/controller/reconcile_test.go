package controller

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

func swapSlice(node, behavior string, offer string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-dra.swap"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "dra.swap", NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "swap",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"swapBehavior": {StringValue: ptr.To(behavior)}},
				Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"swap": {Value: resource.MustParse(offer)}},
			}}},
	}
}

func newClient(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, IndexNodeName, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithIndex(&resourceapi.ResourceSlice{}, IndexNodeName, func(o client.Object) []string {
			if n := o.(*resourceapi.ResourceSlice).Spec.NodeName; n != nil {
				return []string{*n}
			}
			return nil
		}).
		WithIndex(&resourceapi.ResourceSlice{}, IndexDriver, sliceDriver).Build()
}

func TestPodReconciler(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{podlabels.Zone: "z1", podlabels.Hostname: "n1"}}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Driver: "dra.swap", Pool: "n1", Device: "swap", Request: "r"}}}}}}
	withClaim := func(name string, podLabels, annotations map[string]string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: podLabels, Annotations: annotations},
			Spec:   corev1.PodSpec{NodeName: "n1", ResourceClaims: []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To("c")}}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want map[string]string // labels after reconcile (only these keys checked; "" = absent)
	}{
		{name: "labels a pod with a swap claim", pod: withClaim("a", nil, nil, corev1.PodRunning),
			want: map[string]string{podlabels.Zone: "z1", podlabels.Hostname: "n1", v1alpha1.LabelSwapBehavior: "NoSwap"}},
		{name: "removes a label it set that the node lost", pod: withClaim("b", map[string]string{podlabels.Region: "gone", "app": "x"}, map[string]string{v1alpha1.AnnotationManagedLabels: podlabels.Region}, corev1.PodRunning),
			want: map[string]string{podlabels.Region: "", "app": "x", podlabels.Zone: "z1"}},
		{name: "leaves a finished pod alone", pod: withClaim("c", nil, nil, corev1.PodSucceeded), want: map[string]string{podlabels.Zone: ""}},
		{name: "labels a pod whose swap is an extended resource", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"},
			Spec:   corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ExtendedResourceClaimStatus: &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "c"}}},
			want: map[string]string{podlabels.Zone: "z1", podlabels.Hostname: "n1", v1alpha1.LabelSwapBehavior: "NoSwap"}},
		{name: "leaves a pod without a claim alone", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns"}, Spec: corev1.PodSpec{NodeName: "n1"}},
			want: map[string]string{podlabels.Zone: ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			c := newClient(node, claim, swapSlice("n1", "NoSwap", "4Gi"), tc.pod)
			policy := podlabels.Policy{Selection: podlabels.SelectSwapClaims}
			r := &PodReconciler{Client: c, Nodes: Nodes{Reader: c}, Pods: Pods{Reader: c, Policy: policy}, Policy: policy}
			key := types.NamespacedName{Namespace: "ns", Name: tc.pod.Name}
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Pod{}
			if err := c.Get(context.Background(), key, got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got.Labels[k] != v {
					t.Errorf("label %s = %q, want %q (all %v)", k, got.Labels[k], v, got.Labels)
				}
			}
		})
	}
}

func TestNodeReconciler(t *testing.T) {
	tests := []struct {
		name          string
		objs          []client.Object
		removeWithout bool
		want          map[string]string
	}{
		{name: "behavior and capacity", objs: []client.Object{swapSlice("n1", "LimitedSwap", "2Gi")},
			want: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "2Gi"}},
		{name: "no usable swap", objs: []client.Object{swapSlice("n1", "NoSwap", "0")},
			want: map[string]string{v1alpha1.LabelSwapBehavior: "NoSwap", v1alpha1.LabelCapacity: ""}},
		{name: "plugin gone, kept", want: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "1Gi"}},
		{name: "plugin gone, removed", removeWithout: true, want: map[string]string{v1alpha1.LabelSwapBehavior: "", v1alpha1.LabelCapacity: ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "1Gi"}}}
			c := newClient(append(tc.objs, node)...)
			r := &NodeReconciler{Client: c, Nodes: Nodes{Reader: c}, RemoveWithoutDriver: tc.removeWithout}
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			got := &corev1.Node{}
			if err := c.Get(context.Background(), types.NamespacedName{Name: "n1"}, got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, got.Labels[k], v)
				}
			}
		})
	}
}

func TestTrimPod(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"},
			Annotations:   map[string]string{v1alpha1.AnnotationManagedLabels: "x", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i"}}, PriorityClassName: "batch"},
	}
	out, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if p.Spec.NodeName != "n1" || len(p.Spec.Containers) != 0 || p.Spec.PriorityClassName != "" || len(p.ManagedFields) != 0 || len(p.Annotations) != 1 || p.Labels["a"] != "b" {
		t.Errorf("trimmed pod %+v", p)
	}
}

// TestTrimPodKeepsExtendedResources: the cache keeps the name of a pod's
// extended-resource claim and, while the pod is unbound, the extended
// resources it requests (the pending explainer and the reservation
// labeler read them).
func TestTrimPodKeepsExtendedResources(t *testing.T) {
	swap := corev1.ResourceName("deviceclass.resource.kubernetes.io/dra.swap")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "a", Image: "i", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{swap: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}},
			{Name: "b", Image: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{swap: resource.MustParse("2")}}},
		}},
		Status: corev1.PodStatus{ExtendedResourceClaimStatus: &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-extended-resources-x",
			RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "a", ResourceName: string(swap), RequestName: "container-0-request-0"}}}},
	}
	for _, node := range []string{"", "n1"} {
		pod.Spec.NodeName = node
		out, err := trimPod(pod)
		if err != nil {
			t.Fatal(err)
		}
		p := out.(*corev1.Pod)
		if got := podlabels.ClaimNames(p); len(got) != 1 || got[0] != "p-extended-resources-x" {
			t.Errorf("node %q: the trimmed pod's claims %v, want its extended-resource claim", node, got)
		}
		want := []podlabels.ExtendedResource{{Name: swap, Quantity: 2}}
		if node != "" {
			want = []podlabels.ExtendedResource{}
		}
		if got := podlabels.ExtendedResources(p); !reflect.DeepEqual(got, want) {
			t.Errorf("node %q: the trimmed pod's extended resources %+v, want %+v", node, got, want)
		}
		if s := p.Status.ExtendedResourceClaimStatus; s != nil && s.RequestMappings != nil {
			t.Errorf("node %q: the trimmed pod keeps the request mappings", node)
		}
	}
}
