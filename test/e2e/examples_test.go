package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

// exampleContainer is what one container of an example pod must get.
type exampleContainer struct {
	swap int64 // the swap limit in bytes; 0: no swap at all (assertNoSwap)
	// files are cgroup files the container must see with these values.
	files map[string]string
	// downward maps an environment variable to the node label whose value
	// it must hold (read through the pod's labels and the Downward API).
	downward map[string]string
}

// example is what applying one file of examples/ must give.
type example struct {
	cgroup int // the cgroup version the example needs; 0: any
	// selected: its claims select the nodes that can run it with CEL, so
	// on a node of another cgroup version it is applied and its pods must
	// stay unschedulable, rather than only dry-run.
	selected bool
	// pods maps each pod of the file to its containers' expectations.
	pods map[string]map[string]exampleContainer
}

// examples holds an expectation for every file in examples/: the docs
// reference these files, and this is what they say each pod gets.
var examples = map[string]example{
	"swap-claim.yaml": {pods: map[string]map[string]exampleContainer{
		"batch": {"worker": {swap: 256 * mi}, "sidecar": {}},
	}},
	"swap-config.yaml": {cgroup: 2, pods: map[string]map[string]exampleContainer{
		"throttled": {"worker": {swap: 200 * mi, files: map[string]string{"memory.swap.high": "167772160", "memory.zswap.max": "0"}}},
	}},
	"offload.yaml": {cgroup: 2, selected: true, pods: map[string]map[string]exampleContainer{
		"offloaded": {"worker": {swap: 512 * mi}},
	}},
	"compressed-only.yaml": {cgroup: 2, selected: true, pods: map[string]map[string]exampleContainer{
		"compressed": {"worker": {swap: 256 * mi, files: map[string]string{"memory.zswap.writeback": "0"}}},
	}},
	"swap-config-cgroup-v1.yaml": {cgroup: 1, pods: map[string]map[string]exampleContainer{
		"low-swappiness": {"worker": {swap: 200 * mi, files: map[string]string{"memory.swappiness": "10"}}},
	}},
	"cel-selector.yaml": {pods: map[string]map[string]exampleContainer{
		"picky": {"worker": {swap: 128 * mi}},
	}},
	"tolerate-pressure.yaml": {pods: map[string]map[string]exampleContainer{
		"pressure-tolerant": {"worker": {swap: 128 * mi}},
	}},
	"downward-labels.yaml": {pods: map[string]map[string]exampleContainer{
		"node-aware": {"worker": {swap: 128 * mi, downward: map[string]string{
			"DOWNWARD_SWAP_BEHAVIOR": "node.kubernetes.io/swap-behavior",
			"DOWNWARD_HOSTNAME":      corev1.LabelHostname,
			"DOWNWARD_ZONE":          corev1.LabelTopologyZone,
		}}},
	}},
}

// TestExamples applies every manifest in examples/ as it is, each file in a
// namespace of its own, and checks that each pod runs and that each
// container gets what the example says: its swap limit (cgroup and
// DRA_SWAP_LIMIT_BYTES) or none, the SwapConfig's cgroup files, the labels
// it reads through the Downward API. An example for the other cgroup
// version is created with a server-side dry run only (schema, CEL and the
// controller's SwapConfig validation), since its claim cannot be prepared
// on this node, or, when its claims select capable nodes, applied: its
// pods must stay unschedulable here. A file without an expectation here
// fails the test.
func TestExamples(t *testing.T) {
	c := loadCluster(t)
	if c.DeviceClass != "dra.swap" {
		t.Skipf("the examples name the chart's DeviceClass dra.swap; the suite's class is %s", c.DeviceClass)
	}
	c.needSwap(t, largestExample())
	dir := filepath.Join(c.repoRoot, "examples")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("examples: %v", err)
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".yaml" {
			t.Errorf("examples/%s: every file in examples/ is a manifest that this test applies (*.yaml)", e.Name())
			continue
		}
		if _, ok := examples[e.Name()]; !ok {
			t.Errorf("examples/%s has no expectation in TestExamples' examples", e.Name())
			continue
		}
		files = append(files, e.Name())
	}
	for name := range examples {
		if !slices.Contains(files, name) {
			t.Errorf("examples/%s is expected but not there", name)
		}
	}
	slices.Sort(files)

	resources, err := manifest.NewResources(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(file, ".yaml"), func(t *testing.T) {
			want := examples[file]
			if cluster.Emulated() && want.cgroup != 2 {
				t.Skip("runs on this host's node only: the emulated v2 node applies the examples that need cgroup v2")
			}
			elsewhere := want.cgroup != 0 && want.cgroup != c.cgroupVersion(t)
			dryRun := elsewhere && !want.selected
			ns := c.namespace(t)
			objs := readExample(t, filepath.Join(dir, file))
			for _, obj := range objs {
				c.applyExample(t, resources, ns, obj, dryRun)
			}
			if dryRun {
				t.Logf("examples/%s needs cgroup v%d, this node has v%d: validated by a server-side dry run only", file, want.cgroup, c.cgroupVersion(t))
				return
			}
			if elsewhere {
				for _, obj := range objs {
					if obj.GetKind() == "Pod" {
						p, err := c.client.CoreV1().Pods(ns).Get(context.Background(), obj.GetName(), metav1.GetOptions{})
						if err != nil {
							t.Fatal(err)
						}
						c.assertUnschedulable(t, p, "cannot allocate all claims")
					}
				}
				t.Logf("examples/%s needs cgroup v%d, this node has v%d: its claims select no device here", file, want.cgroup, c.cgroupVersion(t))
				return
			}
			var pods []string
			for _, obj := range objs {
				if obj.GetKind() == "Pod" {
					pods = append(pods, obj.GetName())
				}
			}
			slices.Sort(pods)
			if got := slices.Sorted(maps.Keys(want.pods)); !slices.Equal(pods, got) {
				t.Fatalf("examples/%s has pods %v, the test expects %v", file, pods, got)
			}
			for _, name := range pods {
				c.checkExamplePod(t, ns, name, want.pods[name])
			}
		})
	}
}

// largestExample is the most swap one example claims at once (the sum
// over its containers).
func largestExample() int64 {
	var most int64
	for _, ex := range examples {
		var sum int64
		for _, containers := range ex.pods {
			for _, k := range containers {
				sum += k.swap
			}
		}
		most = max(most, sum)
	}
	return most
}

// readExample decodes every YAML document of a file.
func readExample(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(string(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(objs) == 0 {
		t.Fatalf("%s holds no object", path)
	}
	return objs
}

// applyExample creates one object of an example: namespaced objects in ns,
// cluster-scoped ones (a DeviceClass) deleted when the test ends.
func (c *env) applyExample(t *testing.T, resources *manifest.Resources, ns string, obj *unstructured.Unstructured, dryRun bool) {
	t.Helper()
	kind := obj.GetKind()
	if kind == "Pod" {
		obj = c.examplePodForCluster(t, obj)
	}
	obj.SetNamespace("") // every namespaced object goes to the test's namespace
	res, err := resources.For(obj, ns)
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if res.Namespaced {
		obj.SetNamespace(ns)
	}
	if _, err := res.Client.Create(context.Background(), obj, opts); err != nil {
		t.Fatalf("create %s %s: %v", kind, obj.GetName(), err)
	}
	if !res.Namespaced && !dryRun {
		t.Cleanup(func() {
			if err := res.Client.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s %s: %v", kind, obj.GetName(), err)
			}
		})
	}
}

// examplePodForCluster rewrites what this cluster needs and nothing else:
// every container's image becomes the suite's workload image (the
// examples name a public image; this cluster pulls only from its loopback
// registry, and the workload image reports the container's cgroup limits,
// environment and Downward API variables), and a pod without a
// nodeSelector is pinned to this suite's node, as WorkloadPod pins the
// suite's pods; in the conformance suite it becomes a pod for any cluster
// as WorkloadPod's are (ForAnyCluster).
func (c *env) examplePodForCluster(t *testing.T, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, &pod, true); err != nil {
		t.Fatalf("pod %s: %v", obj.GetName(), err)
	}
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Image = c.WorkloadImage()
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Image = c.WorkloadImage()
	}
	if pod.Spec.NodeSelector == nil {
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: c.node}
	}
	c.ForAnyCluster(&pod)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pod)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

// checkExamplePod waits until the pod runs (or ran: the workload image
// exits after its report) and checks each container's report.
func (c *env) checkExamplePod(t *testing.T, ns, name string, want map[string]exampleContainer) {
	t.Helper()
	p := c.waitPod(t, ns, name, "running", podTimeout, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded
	})
	var containers []string
	for _, k := range p.Spec.Containers {
		containers = append(containers, k.Name)
	}
	if got := slices.Sorted(maps.Keys(want)); !slices.Equal(slices.Sorted(slices.Values(containers)), got) {
		t.Fatalf("pod %s has containers %v, the test expects %v", name, containers, got)
	}
	var node *corev1.Node
	for _, k := range containers {
		w := want[k]
		r := c.report(t, p, k, "START")
		if w.swap == 0 {
			assertNoSwap(t, r)
		} else {
			assertSwapLimit(t, r, w.swap)
			c.waitEvent(t, p, corev1.EventTypeNormal, "SwapApplied", fmt.Sprintf("applied to container %q", k))
		}
		for f, v := range w.files {
			if r.Files[f] != v {
				t.Errorf("pod %s container %s: %s %q, want %q", name, k, f, r.Files[f], v)
			}
		}
		if len(w.downward) > 0 && node == nil {
			var err error
			if node, err = c.client.CoreV1().Nodes().Get(context.Background(), p.Spec.NodeName, metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for env, label := range w.downward {
			if r.Downward[env] == "" || r.Downward[env] != node.Labels[label] {
				t.Errorf("pod %s container %s: %s=%q, want node %s's label %s %q", name, k, env, r.Downward[env], node.Name, label, node.Labels[label])
			}
		}
		t.Logf("pod %s container %s: swap limit %d (cgroup v%d), DRA_SWAP_LIMIT_BYTES=%q, downward %v", name, k, r.SwapLimitBytes, r.CgroupVersion, r.EnvSwapLimit, r.Downward)
	}
}
