package cluster

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

const mi = int64(1) << 20

func TestWorkloadImageBeside(t *testing.T) {
	for _, tc := range []struct{ driver, want string }{
		{"registry.example/team/dra-driver-swap:0.2.0", "registry.example/team/swap-workload:v1"},
		{"10.200.0.1:25000/private/dra-swap/dra-driver-swap:0.1.0", "10.200.0.1:25000/private/dra-swap/swap-workload:v1"},
		{"registry.example:5000/dra-driver-swap@sha256:0123", "registry.example:5000/swap-workload:v1"},
		{"registry.example/team/dra-driver-swap:0.2.0@sha256:0123", "registry.example/team/swap-workload:v1"},
		{"dra-driver-swap:0.1.0", "swap-workload:v1"},
	} {
		if got := WorkloadImageBeside(tc.driver); got != tc.want {
			t.Errorf("WorkloadImageBeside(%q) = %q, want %q", tc.driver, got, tc.want)
		}
	}
}

func swapSlice(node string, offer int64, taints ...resourceapi.DeviceTaint) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-dra.swap"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: "dra.swap", NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{
				Name:     "swap",
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"swap": {Value: *resource.NewQuantity(offer, resource.BinarySI)}},
				Taints:   taints,
			}},
		},
	}
}

func node(name string, change func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if change != nil {
		change(n)
	}
	return n
}

func allocated(name, driver, pool string, bytes int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "swap", Driver: driver, Pool: pool, Device: "swap",
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": *resource.NewQuantity(bytes, resource.BinarySI)},
			}},
		}}},
	}
}

// TestSwapNodes: every node with the driver's device, its offer, what no
// claim holds of it (other drivers' and other pools' claims aside), and
// why one cannot be tested on.
func TestSwapNodes(t *testing.T) {
	other := swapSlice("gpu-node", 0)
	other.Spec.Driver = "gpu.example.com"
	client := fake.NewClientset(
		swapSlice("big", 1024*mi), swapSlice("small", 512*mi), swapSlice("empty", 0),
		swapSlice("full", 1024*mi, resourceapi.DeviceTaint{Key: "dra.swap/swap-full", Value: "95", Effect: resourceapi.DeviceTaintEffectNoSchedule}),
		swapSlice("soft", 256*mi, resourceapi.DeviceTaint{Key: "note", Effect: "None"}),
		swapSlice("cordoned", 2048*mi), swapSlice("notready", 2048*mi), swapSlice("tainted", 2048*mi), swapSlice("gone", 2048*mi),
		other,
		node("big", nil), node("small", nil), node("empty", nil), node("full", nil), node("soft", nil),
		node("cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node("notready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }),
		node("tainted", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
		}),
		allocated("a", "dra.swap", "big", 300*mi), allocated("b", "dra.swap", "big", 100*mi),
		allocated("c", "gpu.example.com", "big", 500*mi), allocated("d", "dra.swap", "small", 600*mi),
		&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending"}},
	)
	nodes, err := SwapNodes(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	want := []SwapNode{
		{Name: "big", Offer: 1024 * mi, Unallocated: 624 * mi},
		{Name: "cordoned", Offer: 2048 * mi, Unallocated: 2048 * mi, Unusable: "cordoned"},
		{Name: "empty", Offer: 0, Unallocated: 0, Unusable: "offers no swap"},
		{Name: "full", Offer: 1024 * mi, Unallocated: 1024 * mi, Unusable: "its swap device is tainted dra.swap/swap-full=95:NoSchedule"},
		{Name: "gone", Offer: 2048 * mi, Unallocated: 2048 * mi, Unusable: "no such Node"},
		{Name: "notready", Offer: 2048 * mi, Unallocated: 2048 * mi, Unusable: "not Ready"},
		{Name: "small", Offer: 512 * mi, Unallocated: 0},
		{Name: "soft", Offer: 256 * mi, Unallocated: 256 * mi},
		{Name: "tainted", Offer: 2048 * mi, Unallocated: 2048 * mi, Unusable: "tainted node-role.kubernetes.io/control-plane=:NoSchedule"},
	}
	if !reflect.DeepEqual(nodes, want) {
		t.Errorf("SwapNodes:\n got %+v\nwant %+v", nodes, want)
	}
	if free, err := Unallocated(context.Background(), client, "big"); err != nil || free != 624*mi {
		t.Errorf("Unallocated(big) = %d, %v; want %d", free, err, 624*mi)
	}
	if _, err := Unallocated(context.Background(), client, "gpu-node"); err == nil {
		t.Error("Unallocated of a node without the driver's device: no error")
	}
	if _, err := SwapNodes(context.Background(), fake.NewClientset(other)); err == nil || !strings.Contains(err.Error(), "no node publishes the driver's swap device") {
		t.Errorf("SwapNodes without the driver's slices: %v", err)
	}
}

func TestChooseNode(t *testing.T) {
	nodes := []SwapNode{
		{Name: "a", Offer: 1024 * mi, Unallocated: 512 * mi},
		{Name: "b", Offer: 1024 * mi, Unallocated: 900 * mi},
		{Name: "c", Offer: 1024 * mi, Unallocated: 900 * mi},
		{Name: "d", Offer: 4096 * mi, Unallocated: 4096 * mi, Unusable: "cordoned"},
	}
	for _, tc := range []struct {
		name, named, want, err string
		nodes                  []SwapNode
	}{
		{name: "most unallocated, first by name", nodes: nodes, want: "b"},
		{name: "named", nodes: nodes, named: "a", want: "a"},
		{name: "named unusable", nodes: nodes, named: "d", err: "node d (E2E_NODE) cannot be tested: cordoned"},
		{name: "named without a device", nodes: nodes, named: "z", err: "node z (E2E_NODE) publishes no swap device of the driver; nodes that do: a (offer 1Gi, 512Mi not held by claims); b"},
		{name: "none usable", nodes: nodes[3:], err: "no node can be tested: d (offer 4Gi, 4Gi not held by claims): cordoned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChooseNode(tc.nodes, tc.named)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("got %v, %v; want an error containing %q", got, err, tc.err)
				}
			case err != nil || got.Name != tc.want:
				t.Errorf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
	// At most ten nodes are described, then how many more.
	var many []SwapNode
	for i := range 25 {
		many = append(many, SwapNode{Name: "n" + string(rune('a'+i)), Unusable: "cordoned"})
	}
	if _, err := ChooseNode(many, ""); err == nil || !strings.HasSuffix(err.Error(), "; and 15 more") {
		t.Errorf("25 unusable nodes: %v", err)
	}
}

// TestFindDriver: the driver's namespace, image and pull Secrets come
// from the chart's kubelet plugin DaemonSet, found by its labels in any
// namespace or the one named; none or several is an error that says what
// to set.
func TestFindDriver(t *testing.T) {
	ds := func(ns string) runtime.Object {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dra-driver-swap-kubelet-plugin", Labels: map[string]string{
			"app.kubernetes.io/part-of": "dra-driver-swap", "app.kubernetes.io/component": "kubelet-plugin",
		}}, Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers:       []corev1.Container{{Name: "plugin", Image: "registry.example/team/dra-driver-swap:0.2.0"}},
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}},
		}}}}
	}
	c := &Cluster{Client: fake.NewClientset(ds("swap-system"))}
	if err := c.findDriver(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if c.DriverNamespace != "swap-system" || c.DriverImage != "registry.example/team/dra-driver-swap:0.2.0" ||
		c.WorkloadImage() != "registry.example/team/swap-workload:v1" || !reflect.DeepEqual(c.PullSecrets, []string{"pull"}) {
		t.Errorf("found %+v", c)
	}
	for _, tc := range []struct {
		name, namespace, want string
		objs                  []runtime.Object
	}{
		{"none", "", "no DaemonSet labelled app.kubernetes.io/part-of=dra-driver-swap,app.kubernetes.io/component=kubelet-plugin in any namespace: is the driver installed", nil},
		{"not in the named namespace", "elsewhere", "in namespace elsewhere", []runtime.Object{ds("swap-system")}},
		{"two", "", "2 DaemonSets labelled", []runtime.Object{ds("a"), ds("b")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Cluster{Client: fake.NewClientset(tc.objs...)}
			if err := c.findDriver(context.Background(), tc.namespace); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestForAnyCluster: in the conformance suite a workload pod is one the
// restricted Pod Security Standard admits, on the pod network, with the
// driver's pull Secrets (copied into its namespace); on this repository's
// cluster it stays as it was.
func TestForAnyCluster(t *testing.T) {
	local := &Cluster{Node: "n", Env: map[string]string{}}
	p := local.WorkloadPod("ns", "p", nil, Container{Name: "w", MemLimit: "64Mi"})
	if !p.Spec.HostNetwork || p.Spec.SecurityContext != nil || p.Spec.ImagePullSecrets != nil || p.Spec.Containers[0].Image != DefaultRegistry+"/swap-workload:v1" {
		t.Errorf("this repository's cluster: the pod changed: %+v", p.Spec)
	}
	client := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "swap-system", Name: "pull"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}})
	portable := &Cluster{Node: "n", Portable: true, Client: client, DriverNamespace: "swap-system", PullSecrets: []string{"pull"}, image: "registry.example/team/swap-workload:v1"}
	p = portable.WorkloadPod("ns", "p", nil, Container{Name: "w", MemLimit: "64Mi"})
	sc := p.Spec.SecurityContext
	k := p.Spec.Containers[0]
	switch {
	case p.Spec.HostNetwork:
		t.Error("hostNetwork")
	case sc == nil || !ptr.Deref(sc.RunAsNonRoot, false) || ptr.Deref(sc.RunAsUser, 0) == 0 || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("pod security context %+v", sc)
	case k.SecurityContext == nil || ptr.Deref(k.SecurityContext.AllowPrivilegeEscalation, true) || k.SecurityContext.Capabilities == nil ||
		!reflect.DeepEqual(k.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("container security context %+v", k.SecurityContext)
	case !reflect.DeepEqual(p.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "pull"}}):
		t.Errorf("image pull Secrets %v", p.Spec.ImagePullSecrets)
	case k.Image != "registry.example/team/swap-workload:v1" || p.Spec.NodeSelector[corev1.LabelHostname] != "n":
		t.Errorf("image %s, node selector %v", k.Image, p.Spec.NodeSelector)
	}
	if err := portable.CopyPullSecrets(context.Background(), "ns"); err != nil {
		t.Fatal(err)
	}
	s, err := client.CoreV1().Secrets("ns").Get(context.Background(), "pull", metav1.GetOptions{})
	if err != nil || s.Type != corev1.SecretTypeDockerConfigJson || string(s.Data[corev1.DockerConfigJsonKey]) != `{"auths":{}}` {
		t.Errorf("the copied Secret: %+v, %v", s, err)
	}
	portable.PullSecrets = []string{"missing"}
	if err := portable.CopyPullSecrets(context.Background(), "ns2"); err == nil || !strings.Contains(err.Error(), "swap-system/missing") {
		t.Errorf("a pull Secret that is not there: %v", err)
	}
}

func TestEmbeddedKubeconfig(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"ca.crt": "the CA", "admin.crt": "the certificate", "admin.key": "the key"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// As hack/cluster writes it: quoted absolute paths.
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: "`+dir+`/ca.crt"}
users:
- name: admin
  user: {client-certificate: "`+dir+`/admin.crt", client-key: "`+dir+`/admin.key"}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := EmbeddedKubeconfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), dir) {
		t.Errorf("the embedded kubeconfig still names %s:\n%s", dir, out)
	}
	// Read where the files are not.
	for name := range files {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	config, err := clientcmd.RESTConfigFromKubeConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(config.CAData) != files["ca.crt"] || string(config.CertData) != files["admin.crt"] || string(config.KeyData) != files["admin.key"] || config.Host != "https://127.0.0.1:6443" {
		t.Errorf("the embedded kubeconfig gives CA %q, certificate %q, key %q, server %q", config.CAData, config.CertData, config.KeyData, config.Host)
	}
	if _, err := EmbeddedKubeconfig(filepath.Join(dir, "none")); err == nil {
		t.Error("a missing kubeconfig: no error")
	}
	if _, err := EmbeddedKubeconfig(kubeconfig); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("a kubeconfig naming a missing file: %v, want an error naming it", err)
	}
}
