package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// The conformance suite's settings, environment variables all optional
// but E2E_CONFORMANCE (docs/conformance.md).
const (
	// EnvConformance=1 runs the suite as the conformance suite: against the
	// cluster of KUBECONFIG, without access to its nodes.
	EnvConformance = "E2E_CONFORMANCE"
	// EnvNode names the node under test; by default the node whose
	// dra.swap device has the most swap no claim holds.
	EnvNode = "E2E_NODE"
	// EnvWorkloadImage is the test workload's image (swap-workload,
	// test/e2e/images/workload); by default swap-workload:v1 beside the
	// driver's image, where `make push` puts it.
	EnvWorkloadImage = "E2E_WORKLOAD_IMAGE"
	// EnvDeviceClass is the DeviceClass the suite's claims name (default
	// the chart's, dra.swap).
	EnvDeviceClass = "E2E_DEVICE_CLASS"
	// EnvDriverNamespace is the namespace the driver is installed in; by
	// default the namespace of the chart's kubelet plugin DaemonSet.
	EnvDriverNamespace = "E2E_DRIVER_NAMESPACE"
)

// Portable reports whether the suite runs as the conformance suite
// (E2E_CONFORMANCE=1).
func Portable() bool { return os.Getenv(EnvConformance) == "1" }

// pluginSelector selects the chart's kubelet plugin DaemonSet (its labels,
// deployments/helm/dra-driver-swap/templates/_helpers.tpl).
const pluginSelector = "app.kubernetes.io/part-of=dra-driver-swap,app.kubernetes.io/component=kubelet-plugin"

// workloadImageName is the test workload's image name and tag, as
// `make images` builds it and `make push` pushes it beside the driver's.
const workloadImageName = "swap-workload:v1"

// LoadPortable connects to the cluster of KUBECONFIG (client-go's loading
// rules: $KUBECONFIG, else ~/.kube/config; its current context) and finds
// what the suite needs there, from the API only: the driver's namespace,
// image and pull Secrets (its kubelet plugin DaemonSet), the DeviceClass,
// the workload image and the node under test. Each can be set instead
// (EnvDriverNamespace, EnvDeviceClass, EnvWorkloadImage, EnvNode).
func LoadPortable(ctx context.Context) (*Cluster, error) {
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no kubeconfig of the cluster to test (KUBECONFIG, else ~/.kube/config): %w", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Client: client, Config: config, Env: map[string]string{}, Portable: true}
	if err := c.findDriver(ctx, os.Getenv(EnvDriverNamespace)); err != nil {
		return nil, err
	}
	if img := os.Getenv(EnvWorkloadImage); img != "" {
		c.image = img
	}
	c.DeviceClass = os.Getenv(EnvDeviceClass)
	if c.DeviceClass == "" {
		c.DeviceClass = v1alpha1.DriverName
	}
	if _, err := client.ResourceV1().DeviceClasses().Get(ctx, c.DeviceClass, metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("DeviceClass %s (%s): %w", c.DeviceClass, EnvDeviceClass, err)
	}
	nodes, err := SwapNodes(ctx, client)
	if err != nil {
		return nil, err
	}
	chosen, err := ChooseNode(nodes, os.Getenv(EnvNode))
	if err != nil {
		return nil, err
	}
	c.Node = chosen.Name
	c.Chosen = chosen
	return c, nil
}

// findDriver finds the chart's kubelet plugin DaemonSet (in namespace, or
// in any), and takes the driver's namespace, image and pull Secrets from
// it.
func (c *Cluster) findDriver(ctx context.Context, namespace string) error {
	list, err := c.Client.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{LabelSelector: pluginSelector})
	if err != nil {
		return fmt.Errorf("finding the driver's kubelet plugin DaemonSet: %w", err)
	}
	where := "in any namespace"
	if namespace != "" {
		where = "in namespace " + namespace
	}
	switch n := len(list.Items); {
	case n == 0:
		return fmt.Errorf("no DaemonSet labelled %s %s: is the driver installed (helm install)? Else name its namespace with %s", pluginSelector, where, EnvDriverNamespace)
	case n > 1:
		var names []string
		for _, ds := range list.Items {
			names = append(names, ds.Namespace+"/"+ds.Name)
		}
		return fmt.Errorf("%d DaemonSets labelled %s %s (%s): name the driver's namespace with %s", n, pluginSelector, where, strings.Join(names, ", "), EnvDriverNamespace)
	}
	ds := list.Items[0]
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		return fmt.Errorf("DaemonSet %s/%s has no container", ds.Namespace, ds.Name)
	}
	c.DriverNamespace = ds.Namespace
	c.DriverImage = ds.Spec.Template.Spec.Containers[0].Image
	c.image = WorkloadImageBeside(c.DriverImage)
	for _, s := range ds.Spec.Template.Spec.ImagePullSecrets {
		c.PullSecrets = append(c.PullSecrets, s.Name)
	}
	return nil
}

// WorkloadImageBeside is the workload image in the driver's image's
// repository path: registry.example/team/dra-driver-swap:0.2.0 (or
// @sha256:…) gives registry.example/team/swap-workload:v1.
func WorkloadImageBeside(driverImage string) string {
	ref, _, _ := strings.Cut(driverImage, "@")
	if slash := strings.LastIndex(ref, "/"); slash >= 0 {
		return ref[:slash+1] + workloadImageName
	}
	return workloadImageName
}

// SwapNode is a node with the driver's swap device, as the suite sees it.
type SwapNode struct {
	Name string
	// Offer is the device's swap capacity; Unallocated what of it no
	// claim holds.
	Offer, Unallocated int64
	// Unusable says why the suite cannot test on the node ("" if it can).
	Unusable string
}

func (n SwapNode) String() string {
	s := fmt.Sprintf("%s (offer %s, %s not held by claims)", n.Name, quantity(n.Offer), quantity(n.Unallocated))
	if n.Unusable != "" {
		s += ": " + n.Unusable
	}
	return s
}

func quantity(b int64) string { return resource.NewQuantity(b, resource.BinarySI).String() }

// SwapNodes lists the nodes that publish the driver's swap device, by
// name, with their offer, the swap no claim holds, and why the suite
// cannot use one: no swap offered, a device taint that keeps claims away,
// a node that is not Ready, cordoned or tainted against pods.
func SwapNodes(ctx context.Context, client kubernetes.Interface) ([]SwapNode, error) {
	sliceList, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	devices := map[string]*resourceapi.Device{}
	for i := range sliceList.Items {
		s := &sliceList.Items[i]
		if s.Spec.Driver != v1alpha1.DriverName || s.Spec.NodeName == nil {
			continue
		}
		for j := range s.Spec.Devices {
			if s.Spec.Devices[j].Name == v1alpha1.DeviceName {
				devices[*s.Spec.NodeName] = &s.Spec.Devices[j]
			}
		}
	}
	if len(devices) == 0 {
		return nil, errors.New("no node publishes the driver's swap device (no ResourceSlice of driver " + v1alpha1.DriverName + "): is the kubelet plugin running on the nodes?")
	}
	held, err := heldSwap(ctx, client)
	if err != nil {
		return nil, err
	}
	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	nodeObjs := map[string]*corev1.Node{}
	for i := range nodeList.Items {
		nodeObjs[nodeList.Items[i].Name] = &nodeList.Items[i]
	}
	var nodes []SwapNode
	for _, name := range slices.Sorted(maps.Keys(devices)) {
		dev := devices[name]
		q := dev.Capacity[v1alpha1.CapacitySwap].Value
		n := SwapNode{Name: name, Offer: q.Value()}
		n.Unallocated = max(n.Offer-held[name], 0)
		n.Unusable = unusable(nodeObjs[name], dev)
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// unusable says why the suite cannot test on node ("" if it can).
func unusable(node *corev1.Node, dev *resourceapi.Device) string {
	q := dev.Capacity[v1alpha1.CapacitySwap].Value
	if q.Value() <= 0 {
		return "offers no swap"
	}
	for _, taint := range dev.Taints {
		if taint.Effect == resourceapi.DeviceTaintEffectNoSchedule || taint.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return fmt.Sprintf("its swap device is tainted %s=%s:%s", taint.Key, taint.Value, taint.Effect)
		}
	}
	switch {
	case node == nil:
		return "no such Node"
	case node.Spec.Unschedulable:
		return "cordoned"
	}
	ready := false
	for _, cond := range node.Status.Conditions {
		ready = ready || cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
	}
	if !ready {
		return "not Ready"
	}
	for _, taint := range node.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
			return fmt.Sprintf("tainted %s=%s:%s", taint.Key, taint.Value, taint.Effect)
		}
	}
	return ""
}

// heldSwap sums, per node, the swap that allocated claims hold on its
// device (their results' consumed capacity; the pool is named after the
// node).
func heldSwap(ctx context.Context, client kubernetes.Interface) (map[string]int64, error) {
	claims, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	held := map[string]int64{}
	for _, claim := range claims.Items {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != v1alpha1.DriverName || r.Device != v1alpha1.DeviceName {
				continue
			}
			q := r.ConsumedCapacity[v1alpha1.CapacitySwap]
			held[r.Pool] += q.Value()
		}
	}
	return held, nil
}

// ChooseNode picks the node under test: the one named (which must be
// usable), else the usable node with the most swap no claim holds (by name
// among equals). The error lists every node and why it cannot be used.
func ChooseNode(nodes []SwapNode, name string) (SwapNode, error) {
	var best *SwapNode
	for i := range nodes {
		n := &nodes[i]
		if name != "" {
			if n.Name != name {
				continue
			}
			if n.Unusable != "" {
				return SwapNode{}, fmt.Errorf("node %s (%s) cannot be tested: %s", name, EnvNode, n.Unusable)
			}
			return *n, nil
		}
		if n.Unusable == "" && (best == nil || n.Unallocated > best.Unallocated) {
			best = n
		}
	}
	if name != "" {
		return SwapNode{}, fmt.Errorf("node %s (%s) publishes no swap device of the driver; nodes that do: %s", name, EnvNode, describe(nodes))
	}
	if best == nil {
		return SwapNode{}, fmt.Errorf("no node can be tested: %s", describe(nodes))
	}
	return *best, nil
}

// describe lists at most 10 nodes, then how many more.
func describe(nodes []SwapNode) string {
	const most = 10
	var s []string
	for i, n := range nodes {
		if i == most {
			s = append(s, fmt.Sprintf("and %d more", len(nodes)-most))
			break
		}
		s = append(s, n.String())
	}
	return strings.Join(s, "; ")
}

// Unallocated is the swap of node's device that no claim holds now.
func Unallocated(ctx context.Context, client kubernetes.Interface, node string) (int64, error) {
	nodes, err := SwapNodes(ctx, client)
	if err != nil {
		return 0, err
	}
	for _, n := range nodes {
		if n.Name == node {
			return n.Unallocated, nil
		}
	}
	return 0, fmt.Errorf("node %s publishes no swap device", node)
}

// CopyPullSecrets copies the driver's image pull Secrets into namespace
// ns, where the suite's pods name them (WorkloadPod): the workload image
// is pulled from where the driver's is.
func (c *Cluster) CopyPullSecrets(ctx context.Context, ns string) error {
	for _, name := range c.PullSecrets {
		s, err := c.Client.CoreV1().Secrets(c.DriverNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the driver's image pull Secret %s/%s: %w", c.DriverNamespace, name, err)
		}
		cp := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: s.Type, Data: s.Data}
		if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, cp, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("copying the image pull Secret %s to %s: %w", name, ns, err)
		}
	}
	return nil
}

// forAnyCluster makes a workload pod run where the conformance suite
// runs: on the pod network, as the restricted Pod Security Standard wants
// (a user, no privilege escalation, no capabilities, the runtime's
// seccomp profile), with the driver's image pull Secrets.
func (c *Cluster) forAnyCluster(p *corev1.Pod) {
	p.Spec.HostNetwork = false
	p.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](65534),
		RunAsGroup:     ptr.To[int64](65534),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			list[i].SecurityContext = &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}
		}
	}
	p.Spec.ImagePullSecrets = nil
	for _, name := range c.PullSecrets {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
}

// ForAnyCluster is forAnyCluster in the conformance suite, and leaves the
// pod as it is on this repository's cluster.
func (c *Cluster) ForAnyCluster(p *corev1.Pod) {
	if c.Portable {
		c.forAnyCluster(p)
	}
}

// LogReport reads a container's report line ("START" or "RESULT")
// through the API server (the kubelet's log endpoint). ok is false while
// the line is not there yet.
func (c *Cluster) LogReport(ctx context.Context, p *corev1.Pod, container, kind string) (r Result, ok bool, err error) {
	data, err := c.Client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		// Not yet (the container has not started), or the kubelet is
		// slow to answer: the caller polls.
		return r, false, nil
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, found := strings.CutPrefix(line, kind+" "); found {
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				return r, true, fmt.Errorf("pod %s container %s: %s line %q: %w", p.Name, container, kind, line, err)
			}
			return r, true, nil
		}
	}
	return r, false, nil
}

// EmbeddedKubeconfig is the kubeconfig at path with the files it names
// (certificate authority, client certificate and key) put in as data, as
// `kubectl config view --flatten --raw` writes it: a kubeconfig that works
// where those files are not, such as for the conformance suite run as
// nobody with this cluster's state directory hidden.
func EmbeddedKubeconfig(path string) ([]byte, error) {
	config, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig %s: %w", path, err)
	}
	if err := clientcmdapi.FlattenConfig(config); err != nil {
		return nil, fmt.Errorf("embedding the files the kubeconfig %s names: %w", path, err)
	}
	return clientcmd.Write(*config)
}
