package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

type fakeNodes map[string]podlabels.Node

func (f fakeNodes) Node(_ context.Context, name string) (podlabels.Node, error) {
	if name == "broken" {
		return podlabels.Node{}, errors.New("cache not synced")
	}
	return f[name], nil
}

type selectAll bool

func (s selectAll) Selected(context.Context, *corev1.Pod) (bool, error) { return bool(s), nil }

func bindingRequest(t *testing.T, pod, node string, uid types.UID, dryRun bool) admission.Request {
	t.Helper()
	raw, err := json.Marshal(&corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "ns", UID: uid},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	})
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, SubResource: "binding", Namespace: "ns", Name: pod,
		Object: runtime.RawExtension{Raw: raw}, DryRun: ptr.To(dryRun),
	}}
}

func TestBindingLabeler(t *testing.T) {
	swapNode := podlabels.Node{
		Labels: map[string]string{podlabels.Zone: "z1", "example.com/rack": "r1", "secret/x": "y"},
		Device: &resourceapi.Device{Name: "swap", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"swapBehavior":           {StringValue: ptr.To("LimitedSwap")},
			"kubernetes.io/hostname": {StringValue: ptr.To("host-1")},
		}},
	}
	nodes := fakeNodes{"swap-node": swapNode, "plain-node": {Labels: map[string]string{podlabels.Zone: "z1"}}}
	want := map[string]string{podlabels.Zone: "z1", podlabels.Hostname: "host-1", v1alpha1.LabelSwapBehavior: "LimitedSwap", "example.com/rack": "r1"}
	tests := []struct {
		name       string
		pod, node  string
		uid        types.UID
		bound      bool
		dryRun     bool
		selected   bool
		wantLabels map[string]string
	}{
		{name: "selected pod on a swap node", pod: "p", node: "swap-node", selected: true, wantLabels: want},
		{name: "the binding's UID is the pod's", pod: "p", node: "swap-node", uid: "uid-p", selected: true, wantLabels: want},
		{name: "another pod's UID", pod: "p", node: "swap-node", uid: "uid-other", selected: true},
		{name: "a bound pod is the reconciler's", pod: "p", node: "swap-node", bound: true, selected: true},
		{name: "dry run labels nothing", pod: "p", node: "swap-node", dryRun: true, selected: true},
		{name: "pod not selected", pod: "p", node: "swap-node"},
		{name: "node without the driver", pod: "p", node: "plain-node", selected: true},
		{name: "unreadable node lets the binding through", pod: "p", node: "broken", selected: true},
		{name: "unknown pod lets the binding through", pod: "gone", node: "swap-node", selected: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"}}
			if tc.bound {
				pod.Spec.NodeName = "swap-node"
			}
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(pod).Build()
			patched := 0
			h := &BindingLabeler{Pods: c, Claims: c, Client: c, Nodes: nodes, Selector: selectAll(tc.selected), Patched: func() { patched++ },
				Policy: podlabels.Policy{Selection: podlabels.SelectAll, Allowlist: []string{"example.com/rack"}}}
			resp := h.Handle(ctx, bindingRequest(t, tc.pod, tc.node, tc.uid, tc.dryRun))
			if !resp.Allowed || len(resp.Patches) > 0 || resp.Patch != nil {
				t.Fatalf("response %+v: want allowed, the binding unchanged", resp.AdmissionResponse)
			}
			got := &corev1.Pod{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "p"}, got); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.Labels, tc.wantLabels) {
				t.Errorf("pod labels %v, want %v", got.Labels, tc.wantLabels)
			}
			if wantPatched := min(len(tc.wantLabels), 1); patched != wantPatched {
				t.Errorf("patched %d pods, want %d", patched, wantPatched)
			}
			if len(tc.wantLabels) > 0 && got.Annotations[v1alpha1.AnnotationManagedLabels] != podlabels.Managed(tc.wantLabels) {
				t.Errorf("managed annotation %q", got.Annotations[v1alpha1.AnnotationManagedLabels])
			}
		})
	}
}

func configRequest(t *testing.T, kind string, obj any) admission.Request {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: kind},
		Name: "x", Object: runtime.RawExtension{Raw: raw},
	}}
}

type offer int64

func (o offer) LargestOffer(context.Context) (int64, error) { return int64(o), nil }

func claimSpec(class, size, config string) resourceapi.ResourceClaimSpec {
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "swap",
		Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse(size)}}},
	}}}}
	if config != "" {
		spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "dra.swap", Parameters: runtime.RawExtension{Raw: []byte(config)}},
		}}}
	}
	return spec
}

func TestConfigValidator(t *testing.T) {
	custom := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "fast-swap"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "dra.swap" && device.attributes["dra.swap"].medium == "zram"`}}},
	}}
	gpu := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}},
	}}
	classes := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(custom, gpu).Build()
	good := `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":10}`
	tests := []struct {
		name         string
		kind         string
		obj          client.Object
		wantDenied   string
		wantWarnings []string
	}{
		{name: "valid claim", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("dra.swap", "256Mi", good)}},
		{name: "bad claim config", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("dra.swap", "256Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":101}`)},
			wantDenied: "spec.devices.config[0].opaque.parameters.swappiness"},
		{name: "bad template config", kind: "ResourceClaimTemplate", obj: &resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec("dra.swap", "1Gi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":"high"}`)}},
			wantDenied: "spec.spec.devices.config[0].opaque.parameters"},
		{name: "bad class config", kind: "DeviceClass", obj: &resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "dra.swap", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"Sometimes"}`)}},
		}}}}}, wantDenied: "spec.config[0].opaque.parameters.zswap"},
		{name: "odd size", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("dra.swap", "1000Ki", "")},
			wantWarnings: []string{"spec.devices.requests[0].exactly.capacity.requests.swap: 1000Ki is not a multiple of 1Mi; it is rounded up to 1Mi"}},
		{name: "larger than any offer, custom class", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("fast-swap", "8Gi", "")},
			wantWarnings: []string{"8Gi exceeds the largest swap any node offers (4Gi)"}},
		{name: "another driver's class is not checked", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("gpu", "1000Ki", "")}},
		{name: "unknown class is not checked", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("absent", "1000Ki", "")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			v := &ConfigValidator{Decoder: v1alpha1.NewDecoder(), Classes: classes, Offers: offer(4 << 30)}
			resp := v.Handle(ctx, configRequest(t, tc.kind, tc.obj))
			if tc.wantDenied != "" {
				if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tc.wantDenied) {
					t.Fatalf("response %+v, want denied naming %q", resp.Result, tc.wantDenied)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if len(resp.Warnings) != len(tc.wantWarnings) {
				t.Fatalf("warnings %q, want %q", resp.Warnings, tc.wantWarnings)
			}
			for i, w := range tc.wantWarnings {
				if !strings.Contains(resp.Warnings[i], w) {
					t.Errorf("warning %q, want %q", resp.Warnings[i], w)
				}
			}
		})
	}
}

// support is a SupportSource that counts its calls.
type support struct {
	NodeSupport
	calls int
}

func (s *support) Support(context.Context) (NodeSupport, error) {
	s.calls++
	return s.NodeSupport, nil
}

// TestConfigValidatorSupportWarnings: offload or compressed-only swap that
// no node can apply now is admitted with a warning naming the field and
// the attribute that tells capable nodes; none while a node can, or while
// no node publishes; the nodes are counted once per review.
func TestConfigValidatorSupportWarnings(t *testing.T) {
	both := `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":0.5},"zswap":"CompressedOnly"}`
	classWith := func(config string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "dra.swap", Parameters: runtime.RawExtension{Raw: []byte(config)}},
		}}}}}
	}
	twoConfigs := claimSpec("dra.swap", "256Mi", both)
	twoConfigs.Devices.Config = append(twoConfigs.Devices.Config, twoConfigs.Devices.Config[0])
	tests := []struct {
		name         string
		kind         string
		obj          any
		nodes        NodeSupport
		wantWarnings []string
	}{
		{name: "a claim no node can apply", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("dra.swap", "256Mi", both)},
			nodes: NodeSupport{Nodes: 2},
			wantWarnings: []string{
				`spec.devices.config[0].opaque.parameters.offload: no node offloads now (none of the 2 nodes' swap devices has offload true`,
				`spec.devices.config[0].opaque.parameters.zswap: no node can keep pages compressed only now (none of the 2 nodes' swap devices has zswap and zswapWriteback true`}},
		{name: "a template, one node can offload", kind: "ResourceClaimTemplate",
			obj:          &resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec("dra.swap", "256Mi", both)}},
			nodes:        NodeSupport{Nodes: 2, Offload: 1},
			wantWarnings: []string{"spec.spec.devices.config[0].opaque.parameters.zswap: no node can keep pages compressed only now"}},
		{name: "a class", kind: "DeviceClass", obj: classWith(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{}}`), nodes: NodeSupport{Nodes: 1},
			wantWarnings: []string{"spec.config[0].opaque.parameters.offload: no node offloads now"}},
		{name: "every node can", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("dra.swap", "256Mi", both)},
			nodes: NodeSupport{Nodes: 2, Offload: 2, CompressedOnly: 1}},
		{name: "no node publishes yet", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("dra.swap", "256Mi", both)}},
		{name: "neither field", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: claimSpec("dra.swap", "256Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"Disabled"}`)},
			nodes: NodeSupport{Nodes: 2}},
		{name: "two configs: two of each, one count", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: twoConfigs}, nodes: NodeSupport{Nodes: 3},
			wantWarnings: []string{"config[0].opaque.parameters.offload", "config[0].opaque.parameters.zswap", "config[1].opaque.parameters.offload", "config[1].opaque.parameters.zswap"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			s := &support{NodeSupport: tc.nodes}
			v := &ConfigValidator{Decoder: v1alpha1.NewDecoder(), Offers: offer(4 << 30), Support: s}
			resp := v.Handle(ctx, configRequest(t, tc.kind, tc.obj))
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if len(resp.Warnings) != len(tc.wantWarnings) {
				t.Fatalf("warnings %q, want %q", resp.Warnings, tc.wantWarnings)
			}
			for i, w := range tc.wantWarnings {
				if !strings.Contains(resp.Warnings[i], w) {
					t.Errorf("warning %q, want %q", resp.Warnings[i], w)
				}
			}
			if s.calls > 1 {
				t.Errorf("the review counted the nodes %d times, want once at most", s.calls)
			}
		})
	}
}

// countingOffers counts LargestOffer calls.
type countingOffers struct{ calls int }

func (c *countingOffers) LargestOffer(context.Context) (int64, error) {
	c.calls++
	return 4 << 30, nil
}

// countingReader counts Gets.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestConfigValidatorBounds: a review costs at most one offer computation
// and one class read per class name, whatever the number of requests, and
// a spec over the API's limits is refused without being worked through.
func TestConfigValidatorBounds(t *testing.T) {
	custom := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "fast-swap"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "dra.swap"`}}},
	}}
	good := `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":10}`
	spec := func(requests, subRequests, configs int) resourceapi.ResourceClaimSpec {
		s := claimSpec("fast-swap", "8Gi", good)
		r := s.Devices.Requests[0]
		s.Devices.Requests = nil
		for i := range requests {
			r.Name = fmt.Sprintf("r%d", i)
			s.Devices.Requests = append(s.Devices.Requests, r)
		}
		for i := range subRequests {
			s.Devices.Requests[0].FirstAvailable = append(s.Devices.Requests[0].FirstAvailable,
				resourceapi.DeviceSubRequest{Name: fmt.Sprintf("s%d", i), DeviceClassName: "fast-swap", Capacity: r.Exactly.Capacity})
		}
		c := s.Devices.Config[0]
		s.Devices.Config = nil
		for range configs {
			s.Devices.Config = append(s.Devices.Config, c)
		}
		return s
	}
	tests := []struct {
		name         string
		kind         string
		obj          any
		wantDenied   string
		wantWarnings int
	}{
		{name: "the API's maximum: 32 requests, 8 subrequests, 32 configs", kind: "ResourceClaim",
			obj: &resourceapi.ResourceClaim{Spec: spec(MaxRequests, MaxSubRequests, MaxConfigs)}, wantWarnings: MaxRequests + MaxSubRequests},
		{name: "33 requests", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: spec(MaxRequests+1, 0, 1)},
			wantDenied: "spec.devices.requests: Too many: 33: must have at most 32 items"},
		{name: "75,000 requests", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: spec(75000, 0, 1)},
			wantDenied: "spec.devices.requests: Too many: 75000"},
		{name: "9 subrequests", kind: "ResourceClaimTemplate", obj: &resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec(1, MaxSubRequests+1, 1)}},
			wantDenied: "spec.spec.devices.requests[0].firstAvailable: Too many: 9"},
		{name: "33 configs", kind: "ResourceClaim", obj: &resourceapi.ResourceClaim{Spec: spec(1, 0, MaxConfigs+1)},
			wantDenied: "spec.devices.config: Too many: 33"},
		{name: "a class with 33 configs", kind: "DeviceClass", obj: &resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{Config: make([]resourceapi.DeviceClassConfiguration, MaxConfigs+1)}},
			wantDenied: "spec.config: Too many: 33"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			offers := &countingOffers{}
			classes := &countingReader{Reader: fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(custom).Build()}
			v := &ConfigValidator{Decoder: v1alpha1.NewDecoder(), Classes: classes, Offers: offers}
			resp := v.Handle(ctx, configRequest(t, tc.kind, tc.obj))
			if tc.wantDenied != "" {
				if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tc.wantDenied) {
					t.Fatalf("response %+v, want denied saying %q", resp.Result, tc.wantDenied)
				}
			} else if !resp.Allowed || len(resp.Warnings) != tc.wantWarnings {
				t.Fatalf("response %+v with %d warnings, want allowed with %d", resp.Result, len(resp.Warnings), tc.wantWarnings)
			}
			if offers.calls > 1 || classes.gets > 1 {
				t.Errorf("the review computed the offers %d times and read classes %d times, want at most once each", offers.calls, classes.gets)
			}
		})
	}
}

// TestBindingLabelerChecksTheClaimsNode: a pod with claims is labelled at
// its binding only when every claim is allocated, as the cache shows it,
// to devices usable on the binding's node; a binding to another node is
// not the scheduler's (it allocates the claims first), so the pod keeps
// its labels whatever the review says. A claim that reaches the cache
// late is waited for, up to CacheWait.
func TestBindingLabelerChecksTheClaimsNode(t *testing.T) {
	swapDevice := &resourceapi.Device{Name: "swap", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"swapBehavior": {StringValue: ptr.To("NoSwap")},
	}}
	nodes := fakeNodes{
		"node-a": {Labels: map[string]string{podlabels.Zone: "a", "rack": "r1"}, Device: swapDevice},
		"node-b": {Labels: map[string]string{podlabels.Zone: "b", "rack": "r2"}, Device: swapDevice},
	}
	onNode := func(node string) *corev1.NodeSelector {
		return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}},
		}}}}
	}
	byRack := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}},
	}}}}
	swapOn := func(node string) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{NodeSelector: onNode(node), Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "swap", Driver: v1alpha1.DriverName, Pool: node, Device: "swap"}}}}
	}
	gpuWith := func(sel *corev1.NodeSelector) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{NodeSelector: sel, Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: "gpu.example.com", Pool: "rack-r1", Device: "gpu-0"}}}}
	}
	tests := []struct {
		name      string
		claims    map[string]*resourceapi.AllocationResult // claim name -> allocation (nil: unallocated)
		template  bool                                     // a template claim whose status is not set yet
		lateClaim bool                                     // the claims reach the cache after a few reads
		node      string
		wantLabel bool
	}{
		{name: "no claims: any node running the driver", node: "node-b", wantLabel: true},
		{name: "swap claim allocated on the node", claims: map[string]*resourceapi.AllocationResult{"swap": swapOn("node-a")}, node: "node-a", wantLabel: true},
		{name: "swap claim allocated on another node", claims: map[string]*resourceapi.AllocationResult{"swap": swapOn("node-a")}, node: "node-b"},
		{name: "a claim not allocated", claims: map[string]*resourceapi.AllocationResult{"swap": nil}, node: "node-a"},
		{name: "a claim the cache does not have", claims: map[string]*resourceapi.AllocationResult{"absent": nil}, node: "node-a"},
		{name: "another driver's claim on a rack the node is in", claims: map[string]*resourceapi.AllocationResult{"gpu": gpuWith(byRack)}, node: "node-a", wantLabel: true},
		{name: "another driver's claim on a rack the node is not in", claims: map[string]*resourceapi.AllocationResult{"gpu": gpuWith(byRack)}, node: "node-b"},
		{name: "a network device usable anywhere", claims: map[string]*resourceapi.AllocationResult{"gpu": gpuWith(nil)}, node: "node-b", wantLabel: true},
		{name: "one of two claims on another node", claims: map[string]*resourceapi.AllocationResult{"swap": swapOn("node-a"), "gpu": gpuWith(onNode("node-b"))}, node: "node-a"},
		{name: "a template claim not created yet", template: true, node: "node-a"},
		{name: "a claim allocated a moment ago reaches the cache within CacheWait", claims: map[string]*resourceapi.AllocationResult{"swap": swapOn("node-a")}, lateClaim: true, node: "node-a", wantLabel: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"}}
			var objs []client.Object
			for name, alloc := range tc.claims {
				pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(name)})
				if name == "absent" {
					continue
				}
				objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Status: resourceapi.ResourceClaimStatus{Allocation: alloc}})
			}
			if tc.template {
				pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "t", ResourceClaimTemplateName: ptr.To("t")})
			}
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(append(objs, pod)...).Build()
			var claims client.Reader = c
			if tc.lateClaim {
				claims = &lagging{Reader: c, misses: 5}
			}
			h := &BindingLabeler{Pods: c, Claims: claims, Client: c, Nodes: nodes, Selector: selectAll(true), CacheWait: time.Second,
				Policy: podlabels.Policy{Selection: podlabels.SelectAll}}
			if resp := h.Handle(ctx, bindingRequest(t, "p", tc.node, "uid-p", false)); !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			got := &corev1.Pod{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "p"}, got); err != nil {
				t.Fatal(err)
			}
			if labelled := got.Labels[podlabels.Zone] != ""; labelled != tc.wantLabel {
				t.Errorf("labelled %v (%v), want %v", labelled, got.Labels, tc.wantLabel)
			}
		})
	}
}

// lagging is a cache that does not show objects for its first misses reads.
type lagging struct {
	client.Reader
	misses int
}

func (l *lagging) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if l.misses > 0 {
		l.misses--
		return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
	}
	return l.Reader.Get(ctx, key, obj, opts...)
}
