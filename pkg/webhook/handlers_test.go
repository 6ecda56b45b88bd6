package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/pkg/labels"
)

type fakeNodes map[string]labels.Node

func (f fakeNodes) Node(_ context.Context, name string) (labels.Node, error) {
	if name == "broken" {
		return labels.Node{}, errors.New("cache not synced")
	}
	return f[name], nil
}

type selectAll bool

func (s selectAll) Selected(context.Context, *corev1.Pod) (bool, error) { return bool(s), nil }

func bindingRequest(t *testing.T, pod, node string) admission.Request {
	t.Helper()
	raw, err := json.Marshal(&corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "ns"},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	})
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, SubResource: "binding", Namespace: "ns", Name: pod,
		Object: runtime.RawExtension{Raw: raw},
	}}
}

func TestBindingLabeler(t *testing.T) {
	swapNode := labels.Node{
		Labels: map[string]string{labels.Zone: "z1", "example.com/rack": "r1", "secret/x": "y"},
		Device: &resourceapi.Device{Name: "swap", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"swapBehavior":           {StringValue: ptr.To("LimitedSwap")},
			"kubernetes.io/hostname": {StringValue: ptr.To("host-1")},
		}},
	}
	nodes := fakeNodes{"swap-node": swapNode, "plain-node": {Labels: map[string]string{labels.Zone: "z1"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	reader := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(pod).Build()
	tests := []struct {
		name       string
		pod, node  string
		selected   bool
		wantLabels map[string]string
	}{
		{name: "selected pod on a swap node", pod: "p", node: "swap-node", selected: true,
			wantLabels: map[string]string{labels.Zone: "z1", labels.Hostname: "host-1", labels.SwapBehavior: "LimitedSwap", "example.com/rack": "r1"}},
		{name: "pod not selected", pod: "p", node: "swap-node"},
		{name: "node without the driver", pod: "p", node: "plain-node", selected: true},
		{name: "unreadable node lets the binding through", pod: "p", node: "broken", selected: true},
		{name: "unknown pod lets the binding through", pod: "gone", node: "swap-node", selected: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			h := &BindingLabeler{Pods: reader, Nodes: nodes, Selector: selectAll(tc.selected),
				Policy: labels.Policy{Selection: labels.SelectAll, Allowlist: []string{"example.com/rack"}}}
			resp := h.Handle(ctx, bindingRequest(t, tc.pod, tc.node))
			if !resp.Allowed {
				t.Fatalf("binding denied: %+v", resp.Result)
			}
			got := map[string]string{}
			for _, op := range resp.Patches {
				if op.Path == "/metadata/labels" {
					for k, v := range op.Value.(map[string]any) {
						got[k] = v.(string)
					}
				}
			}
			if len(got) != len(tc.wantLabels) {
				t.Fatalf("patched labels %v, want %v (patches %+v)", got, tc.wantLabels, resp.Patches)
			}
			for k, v := range tc.wantLabels {
				if got[k] != v {
					t.Errorf("label %s = %q, want %q", k, got[k], v)
				}
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
