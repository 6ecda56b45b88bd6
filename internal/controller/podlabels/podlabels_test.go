package podlabels

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

const gi = 1 << 30

// device is the swap device a plugin publishes that offers swap under
// every kubelet swap behavior (--unsafe-offer-swap-under all of them), so
// that the offer is the swap's whatever the behavior; defaultPolicyDevice
// is a default plugin's.
func device(t *testing.T, behavior string, totalBytes int64, nodeLabels map[string]string) *resourceapi.Device {
	t.Helper()
	return deviceWith(t, behavior, totalBytes, nodeLabels, swapdevice.Policy{OvercommitRatio: 1, UnsafeOfferUnder: swapdevice.UnsafeSwapBehaviors()})
}

func defaultPolicyDevice(t *testing.T, behavior string, totalBytes int64) *resourceapi.Device {
	t.Helper()
	return deviceWith(t, behavior, totalBytes, nil, swapdevice.Policy{OvercommitRatio: 1})
}

func deviceWith(t *testing.T, behavior string, totalBytes int64, nodeLabels map[string]string, p swapdevice.Policy) *resourceapi.Device {
	t.Helper()
	f := discovery.Facts{
		Devices:       []discovery.SwapDevice{{Path: "/swapfile", Type: "file", SizeBytes: totalBytes}},
		TotalBytes:    totalBytes,
		Medium:        discovery.MediumSSD,
		CgroupVersion: 2,
		SwapControl:   true,
		SwapBehavior:  behavior,
	}
	if totalBytes == 0 {
		f.Devices = nil
	}
	d, _ := swapdevice.Device(f, nodeLabels, p)
	return d
}

func TestPodLabels(t *testing.T) {
	nodeLabels := map[string]string{
		Zone: "zone-a", Region: "region-1", Hostname: "host-a",
		"example.com/rack": "r7", "secret.example.com/tier": "gold",
	}
	tests := []struct {
		name      string
		node      func(t *testing.T) Node
		allowlist []string
		want      map[string]string
	}{
		{
			name: "no driver, no labels",
			node: func(*testing.T) Node { return Node{Labels: nodeLabels} },
			want: map[string]string{},
		},
		{
			name: "attributes of the device",
			node: func(t *testing.T) Node {
				return Node{Labels: nodeLabels, Device: device(t, v1alpha1.SwapBehaviorLimitedSwap, 4*gi, nodeLabels)}
			},
			want: map[string]string{Zone: "zone-a", Region: "region-1", Hostname: "host-a", v1alpha1.LabelSwapBehavior: "LimitedSwap"},
		},
		{
			name: "attributes win over Node labels that changed since the plugin published",
			node: func(t *testing.T) Node {
				return Node{Labels: map[string]string{Zone: "zone-new"}, Device: device(t, v1alpha1.SwapBehaviorNoSwap, 4*gi, nodeLabels)}
			},
			want: map[string]string{Zone: "zone-a", Region: "region-1", Hostname: "host-a", v1alpha1.LabelSwapBehavior: "NoSwap"},
		},
		{
			name: "Node labels fill missing attributes",
			node: func(t *testing.T) Node {
				return Node{Labels: nodeLabels, Device: device(t, v1alpha1.SwapBehaviorNoSwap, 4*gi, nil)}
			},
			want: map[string]string{Zone: "zone-a", Region: "region-1", Hostname: "host-a", v1alpha1.LabelSwapBehavior: "NoSwap"},
		},
		{
			name: "unknown behavior falls back to the Node label",
			node: func(t *testing.T) Node {
				return Node{Labels: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap"}, Device: device(t, v1alpha1.SwapBehaviorUnknown, 4*gi, nil)}
			},
			want: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap"},
		},
		{
			name: "node without usable swap still reports its behavior",
			node: func(t *testing.T) Node {
				return Node{Labels: nodeLabels, Device: device(t, v1alpha1.SwapBehaviorNoSwap, 0, nodeLabels)}
			},
			want: map[string]string{Zone: "zone-a", Region: "region-1", Hostname: "host-a", v1alpha1.LabelSwapBehavior: "NoSwap"},
		},
		{
			name: "allowlisted labels only",
			node: func(t *testing.T) Node {
				return Node{Labels: nodeLabels, Device: device(t, v1alpha1.SwapBehaviorNoSwap, 4*gi, nodeLabels)}
			},
			allowlist: []string{"example.com/rack", "example.com/absent"},
			want:      map[string]string{Zone: "zone-a", Region: "region-1", Hostname: "host-a", v1alpha1.LabelSwapBehavior: "NoSwap", "example.com/rack": "r7"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{Allowlist: tc.allowlist, Selection: SelectSwapClaims}
			if got := p.PodLabels(tc.node(t)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PodLabels = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPolicyValidateAndSelects(t *testing.T) {
	sel, err := labels.Parse("swap=enabled")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		policy       Policy
		wantErr      string
		hasClaim     bool
		nsLabels     map[string]string
		wantSelected bool
	}{
		{name: "default: claim", policy: Policy{Selection: SelectSwapClaims}, hasClaim: true, wantSelected: true},
		{name: "default: no claim", policy: Policy{Selection: SelectSwapClaims}, wantSelected: false},
		{name: "all", policy: Policy{Selection: SelectAll}, wantSelected: true},
		{name: "namespace match", policy: Policy{Selection: SelectNamespaces, NamespaceSelector: sel}, nsLabels: map[string]string{"swap": "enabled"}, wantSelected: true},
		{name: "namespace mismatch", policy: Policy{Selection: SelectNamespaces, NamespaceSelector: sel}, nsLabels: map[string]string{"swap": "no"}, wantSelected: false},
		{name: "namespace mismatch with claim", policy: Policy{Selection: SelectNamespaces, NamespaceSelector: sel}, hasClaim: true, wantSelected: true},
		{name: "namespaces without selector", policy: Policy{Selection: SelectNamespaces}, wantErr: "namespace selector"},
		{name: "unknown selection", policy: Policy{Selection: "some"}, wantErr: `"some"`},
		{name: "bad allowlist key", policy: Policy{Selection: SelectAll, Allowlist: []string{"not a key"}}, wantErr: `"not a key"`},
		{name: "own key", policy: Policy{Selection: SelectAll, Allowlist: []string{v1alpha1.LabelCapacity}}, wantErr: "driver's own"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.policy.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.policy.Selects(tc.hasClaim, tc.nsLabels); got != tc.wantSelected {
				t.Errorf("Selects = %v, want %v", got, tc.wantSelected)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	desired := map[string]string{Zone: "z1", v1alpha1.LabelSwapBehavior: "NoSwap"}
	tests := []struct {
		name        string
		labels      map[string]string
		managed     string
		desired     map[string]string
		wantSet     map[string]string
		wantRemove  []string
		wantManaged string
		wantEmpty   bool
	}{
		{name: "fresh pod", labels: map[string]string{"app": "x"}, desired: desired, wantSet: desired, wantManaged: v1alpha1.LabelSwapBehavior + "," + Zone},
		{name: "up to date", labels: map[string]string{Zone: "z1", v1alpha1.LabelSwapBehavior: "NoSwap"}, managed: "node.kubernetes.io/swap-behavior,topology.kubernetes.io/zone", desired: desired, wantSet: map[string]string{}, wantManaged: v1alpha1.LabelSwapBehavior + "," + Zone, wantEmpty: true},
		{name: "value changed", labels: map[string]string{Zone: "z0", v1alpha1.LabelSwapBehavior: "NoSwap"}, managed: v1alpha1.LabelSwapBehavior + "," + Zone, desired: desired, wantSet: map[string]string{Zone: "z1"}, wantManaged: v1alpha1.LabelSwapBehavior + "," + Zone},
		{name: "own label gone from node is removed", labels: map[string]string{Zone: "z1", v1alpha1.LabelSwapBehavior: "NoSwap", Region: "r"}, managed: v1alpha1.LabelSwapBehavior + "," + Region + "," + Zone, desired: desired, wantSet: map[string]string{}, wantRemove: []string{Region}, wantManaged: v1alpha1.LabelSwapBehavior + "," + Zone},
		{name: "user's label is never removed", labels: map[string]string{Region: "mine"}, desired: map[string]string{}, wantSet: map[string]string{}, wantEmpty: true},
		{name: "labels right but annotation missing", labels: map[string]string{Zone: "z1", v1alpha1.LabelSwapBehavior: "NoSwap"}, desired: desired, wantSet: map[string]string{}, wantManaged: v1alpha1.LabelSwapBehavior + "," + Zone},
		{name: "garbage annotation keys are ignored", labels: map[string]string{"a b": "x"}, managed: "a b,,", desired: map[string]string{}, wantSet: map[string]string{}},
		// The annotation is the pod's: whoever can edit the pod can list any
		// key in it. Only keys the controller owns are ever removed (found
		// in a review: "app,security.example.com/quarantine" were deleted).
		{name: "keys the controller does not own are never removed", labels: map[string]string{"app": "web", "security.example.com/quarantine": "true", Zone: "z1", v1alpha1.LabelSwapBehavior: "NoSwap"},
			managed: "app,security.example.com/quarantine," + v1alpha1.LabelSwapBehavior + "," + Zone, desired: desired, wantSet: map[string]string{}, wantManaged: v1alpha1.LabelSwapBehavior + "," + Zone},
		{name: "an allowlisted key it set is removed", labels: map[string]string{"example.com/rack": "r1", Zone: "z1", v1alpha1.LabelSwapBehavior: "NoSwap"},
			managed: "example.com/rack," + v1alpha1.LabelSwapBehavior + "," + Zone, desired: desired, wantSet: map[string]string{}, wantRemove: []string{"example.com/rack"}, wantManaged: v1alpha1.LabelSwapBehavior + "," + Zone},
	}
	policy := Policy{Allowlist: []string{"example.com/rack"}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}}
			if tc.managed != "" {
				pod.Annotations = map[string]string{v1alpha1.AnnotationManagedLabels: tc.managed}
			}
			c := Diff(pod, tc.desired, policy.Owns)
			if !maps.Equal(c.Set, tc.wantSet) || !reflect.DeepEqual(c.Remove, tc.wantRemove) || c.Managed != tc.wantManaged || c.Empty() != tc.wantEmpty {
				t.Fatalf("Diff = %+v (empty %v), want set %v remove %v managed %q empty %v", c, c.Empty(), tc.wantSet, tc.wantRemove, tc.wantManaged, tc.wantEmpty)
			}
			patch, err := c.MergePatch()
			if err != nil {
				t.Fatal(err)
			}
			var decoded struct {
				Metadata struct {
					Labels      map[string]*string `json:"labels"`
					Annotations map[string]*string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patch, &decoded); err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.wantRemove {
				if v, ok := decoded.Metadata.Labels[k]; !ok || v != nil {
					t.Errorf("patch %s does not remove %s", patch, k)
				}
			}
		})
	}
}

func TestNodeLabels(t *testing.T) {
	tests := []struct {
		name          string
		node          func(t *testing.T) Node
		removeWithout bool
		want          map[string]*string
	}{
		{
			name: "swap node gets behavior and capacity",
			node: func(t *testing.T) Node { return Node{Device: device(t, v1alpha1.SwapBehaviorLimitedSwap, 4*gi, nil)} },
			want: map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("LimitedSwap"), v1alpha1.LabelCapacity: ptr.To("4Gi")},
		},
		{
			name: "LimitedSwap node of a default plugin: behavior, no capacity (it offers none)",
			node: func(t *testing.T) Node {
				return Node{Labels: map[string]string{v1alpha1.LabelCapacity: "4Gi"}, Device: defaultPolicyDevice(t, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)}
			},
			want: map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("LimitedSwap"), v1alpha1.LabelCapacity: nil},
		},
		{
			name: "WorkloadControlledSwap node (KEP-5359) of a default plugin",
			node: func(t *testing.T) Node {
				return Node{Labels: map[string]string{v1alpha1.LabelSwapBehavior: "NoSwap"}, Device: defaultPolicyDevice(t, v1alpha1.SwapBehaviorWorkloadControlledSwap, 4*gi)}
			},
			want: map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("WorkloadControlledSwap")},
		},
		{
			name: "odd size in binary units",
			node: func(t *testing.T) Node { return Node{Device: device(t, v1alpha1.SwapBehaviorNoSwap, 3*gi/2, nil)} },
			want: map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("NoSwap"), v1alpha1.LabelCapacity: ptr.To("1536Mi")},
		},
		{
			name: "node without usable swap: behavior, no capacity",
			node: func(t *testing.T) Node {
				return Node{Labels: map[string]string{v1alpha1.LabelCapacity: "4Gi"}, Device: device(t, v1alpha1.SwapBehaviorNoSwap, 0, nil)}
			},
			want: map[string]*string{v1alpha1.LabelSwapBehavior: ptr.To("NoSwap"), v1alpha1.LabelCapacity: nil},
		},
		{
			name: "unknown behavior leaves the label alone",
			node: func(t *testing.T) Node {
				return Node{Labels: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "4Gi"}, Device: device(t, v1alpha1.SwapBehaviorUnknown, 4*gi, nil)}
			},
			want: map[string]*string{},
		},
		{
			name: "up to date",
			node: func(t *testing.T) Node {
				return Node{Labels: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "4Gi"}, Device: device(t, v1alpha1.SwapBehaviorLimitedSwap, 4*gi, nil)}
			},
			want: map[string]*string{},
		},
		{
			name: "plugin gone: labels stay by default",
			node: func(*testing.T) Node {
				return Node{Labels: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "4Gi"}}
			},
			want: map[string]*string{},
		},
		{
			name: "plugin gone: labels removed when the admin says so",
			node: func(*testing.T) Node {
				return Node{Labels: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "4Gi"}}
			},
			removeWithout: true,
			want:          map[string]*string{v1alpha1.LabelSwapBehavior: nil, v1alpha1.LabelCapacity: nil},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NodeLabels(tc.node(t), tc.removeWithout)
			if !reflect.DeepEqual(map[string]*string(got), tc.want) {
				t.Errorf("NodeLabels = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRemoveNodeLabels: the uninstall removes the labels the controller
// sets on Nodes, every one NodeLabels can set, and no other label.
func TestRemoveNodeLabels(t *testing.T) {
	set := NodeLabels(Node{Device: device(t, v1alpha1.SwapBehaviorLimitedSwap, 4*gi, map[string]string{Zone: "z1"})}, false)
	for k := range set {
		if !slices.Contains(NodeKeys(), k) {
			t.Errorf("NodeLabels sets %s, which NodeKeys %v leaves out (the uninstall would leave it behind)", k, NodeKeys())
		}
	}
	others := map[string]string{Zone: "z1", Hostname: "n1", "team": "a", v1alpha1.AnnotationManagedLabels: "x", "dra.swap/other": "y"}
	tests := []struct {
		name   string
		labels map[string]string
		want   map[string]*string
	}{
		{name: "both", labels: map[string]string{v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "4Gi"}, want: map[string]*string{v1alpha1.LabelSwapBehavior: nil, v1alpha1.LabelCapacity: nil}},
		{name: "both among others", labels: merged(others, map[string]string{v1alpha1.LabelSwapBehavior: "NoSwap", v1alpha1.LabelCapacity: "1Gi"}), want: map[string]*string{v1alpha1.LabelSwapBehavior: nil, v1alpha1.LabelCapacity: nil}},
		{name: "one", labels: merged(others, map[string]string{v1alpha1.LabelCapacity: ""}), want: map[string]*string{v1alpha1.LabelCapacity: nil}},
		{name: "only others", labels: others, want: map[string]*string{}},
		{name: "none", labels: nil, want: map[string]*string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := RemoveNodeLabels(tc.labels)
			if !reflect.DeepEqual(map[string]*string(got), tc.want) {
				t.Errorf("RemoveNodeLabels(%v) = %v, want %v", tc.labels, got, tc.want)
			}
		})
	}
}

func merged(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func TestClaims(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
			{Name: "direct", ResourceClaimName: ptr.To("shared")},
			{Name: "tmpl", ResourceClaimTemplateName: ptr.To("t")},
			{Name: "pending", ResourceClaimTemplateName: ptr.To("t")},
		}},
		Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "tmpl", ResourceClaimName: ptr.To("p-tmpl-x")}}},
	}
	if got := ClaimNames(pod); !reflect.DeepEqual(got, []string{"shared", "p-tmpl-x"}) {
		t.Errorf("ClaimNames = %v", got)
	}
	// The claim the scheduler made for the pod's extended resources.
	pod.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-extended-resources-y"}
	if got := ClaimNames(pod); !reflect.DeepEqual(got, []string{"shared", "p-tmpl-x", "p-extended-resources-y"}) {
		t.Errorf("ClaimNames with an extended-resource claim = %v", got)
	}
	alloc := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: "gpu.example.com"}, {Driver: v1alpha1.DriverName}}},
	}}}
	other := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: "gpu.example.com"}}},
	}}}
	for _, tc := range []struct {
		claim *resourceapi.ResourceClaim
		want  bool
	}{{nil, false}, {&resourceapi.ResourceClaim{}, false}, {other, false}, {alloc, true}} {
		if got := HasSwapDevice(tc.claim); got != tc.want {
			t.Errorf("HasSwapDevice(%v) = %v", tc.claim, got)
		}
	}
}

// TestUsesClaim: a pod uses the claims ClaimNames names and, before its
// status names it, the claim the scheduler creates for its extended
// resources, found as the scheduler finds it (annotation and controller
// owner reference), and only when the pod requests an extended resource.
func TestUsesClaim(t *testing.T) {
	asks := corev1.ResourceList{"deviceclass.resource.kubernetes.io/dra.swap": resource.MustParse("1")}
	pod := func(requests corev1.ResourceList, status string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Limits: requests}}}}}
		if status != "" {
			p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: status}
		}
		return p
	}
	claim := func(annotated bool, owner metav1.OwnerReference) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-extended-resources-x", OwnerReferences: []metav1.OwnerReference{owner}}}
		if annotated {
			c.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
		}
		return c
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "uid-p", Controller: ptr.To(true)}
	with := func(f func(*metav1.OwnerReference)) metav1.OwnerReference {
		o := owner
		f(&o)
		return o
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		claim *resourceapi.ResourceClaim
		want  bool
	}{
		{"the scheduler's claim, before the pod's status names it", pod(asks, ""), claim(true, owner), true},
		{"the scheduler's claim, named in the pod's status", pod(asks, "p-extended-resources-x"), claim(true, owner), true},
		{"named in the pod's status, whatever its metadata", pod(nil, "p-extended-resources-x"), claim(false, metav1.OwnerReference{}), true},
		{"the status names another claim", pod(asks, "p-extended-resources-z"), claim(true, owner), false},
		{"not annotated", pod(asks, ""), claim(false, owner), false},
		{"the pod requests no extended resource", pod(nil, ""), claim(true, owner), false},
		{"the pod requests only native resources", pod(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}, ""), claim(true, owner), false},
		{"the extended resource's quantity is zero", pod(corev1.ResourceList{"example.com/swap": resource.MustParse("0")}, ""), claim(true, owner), false},
		{"owned by another pod of that name", pod(asks, ""), claim(true, with(func(o *metav1.OwnerReference) { o.UID = "uid-other" })), false},
		{"owned by another pod", pod(asks, ""), claim(true, with(func(o *metav1.OwnerReference) { o.Name = "q" })), false},
		{"owned, not controlled", pod(asks, ""), claim(true, with(func(o *metav1.OwnerReference) { o.Controller = nil })), false},
		{"controlled by another kind", pod(asks, ""), claim(true, with(func(o *metav1.OwnerReference) { o.Kind = "Job"; o.APIVersion = "batch/v1" })), false},
		{"another namespace", pod(asks, ""), func() *resourceapi.ResourceClaim { c := claim(true, owner); c.Namespace = "other"; return c }(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := UsesClaim(tc.pod, tc.claim); got != tc.want {
				t.Errorf("UsesClaim = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestExtendedResources(t *testing.T) {
	q := resource.MustParse
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"example.com/swap": q("3")}}}},
		Containers: []corev1.Container{
			{Name: "a", Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{"deviceclass.resource.kubernetes.io/dra.swap": q("1"), corev1.ResourceMemory: q("1Gi"), "hugepages-2Mi": q("2Mi")},
				Requests: corev1.ResourceList{"deviceclass.resource.kubernetes.io/dra.swap": q("1"), corev1.ResourceCPU: q("1")}}},
			{Name: "b", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"deviceclass.resource.kubernetes.io/dra.swap": q("2"), "example.com/zero": q("0"), "kubernetes.io/native": q("1")}}},
		},
	}}
	want := []ExtendedResource{{Name: "deviceclass.resource.kubernetes.io/dra.swap", Quantity: 2}, {Name: "example.com/swap", Quantity: 3}}
	if got := ExtendedResources(pod); !reflect.DeepEqual(got, want) {
		t.Errorf("ExtendedResources = %+v, want %+v", got, want)
	}
	for name, want := range map[corev1.ResourceName]bool{
		"deviceclass.resource.kubernetes.io/x": true, "example.com/gpu": true, "nvidia.com/gpu": true,
		"memory": false, "cpu": false, "hugepages-1Gi": false, "kubernetes.io/x": false, "node.kubernetes.io/x": false, "requests.example.com/x": false,
	} {
		if got := IsDRAExtendedResourceName(name); got != want {
			t.Errorf("IsDRAExtendedResourceName(%s) = %v, want %v", name, got, want)
		}
	}
}
