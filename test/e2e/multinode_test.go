package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// The TestTwoNodes tests run on the two-node cluster of
// hack/e2e-cluster.sh, from this host, after each node's own suite: this
// host's node (c.node) and the emulated guest's (the env file's
// PEER_NODE_NAME), which differ on purpose in cgroup version, swap size,
// zone and region (both kubelets run swapBehavior NoSwap: under another a
// node sells no swap). They run in file order; the last one powers the
// guest off for good.

// twoNodes is the two-node cluster as these tests use it.
type twoNodes struct {
	*env
	host, guest string
}

func loadTwoNodes(t *testing.T) *twoNodes {
	t.Helper()
	c := loadCluster(t, needsOurCluster("the two nodes of hack/e2e-cluster.sh, which differ on purpose"))
	guest := c.Env["PEER_NODE_NAME"]
	if guest == "" {
		t.Skip("needs the two-node cluster of hack/e2e-cluster.sh (make e2e-cluster); this cluster has one node")
	}
	n := &twoNodes{env: c, host: c.node, guest: guest}
	// A kubelet restarted by the node's suite deleted its slices, which the
	// plugin makes again within its slice controller's sync delay (30 s).
	for _, node := range []string{n.host, n.guest} {
		err := wait.PollUntilContextTimeout(context.Background(), time.Second, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
			return n.swapDeviceOn(t, node) != nil, nil
		})
		if err != nil {
			t.Fatalf("node %s publishes no swap device: the two-node tests need both", node)
		}
	}
	return n
}

// swapDeviceOn is the swap device node publishes, or nil.
func (c *env) swapDeviceOn(t *testing.T, node string) *resourceapi.Device {
	t.Helper()
	slices, err := c.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices.Items {
		if s.Spec.Driver == v1alpha1.DriverName && s.Spec.Pool.Name == node && len(s.Spec.Devices) > 0 {
			return &s.Spec.Devices[0]
		}
	}
	return nil
}

func (n *twoNodes) offerOn(t *testing.T, node string) int64 {
	t.Helper()
	q := n.swapDeviceOn(t, node).Capacity["swap"].Value
	return q.Value()
}

// unpinned is a workload pod the scheduler places on either node.
func (n *twoNodes) unpinned(ns, name string, templates map[string]string, containers ...ctr) *corev1.Pod {
	p := n.WorkloadPod(ns, name, templates, containers...)
	p.Spec.NodeSelector = nil
	return p
}

// pinned is a workload pod for node.
func (n *twoNodes) pinned(node, ns, name string, templates map[string]string, containers ...ctr) *corev1.Pod {
	p := n.WorkloadPod(ns, name, templates, containers...)
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	return p
}

// preferring is an unpinned pod whose node affinity prefers node: placed
// elsewhere only when node cannot take it.
func (n *twoNodes) preferring(node, ns, name string, templates map[string]string, containers ...ctr) *corev1.Pod {
	p := n.unpinned(ns, name, templates, containers...)
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
	return p
}

func scheduled(p *corev1.Pod) bool { return p.Spec.NodeName != "" }

// waitOn waits until the pod is bound and checks the node.
func (n *twoNodes) waitOn(t *testing.T, p *corev1.Pod, want string) *corev1.Pod {
	t.Helper()
	p = n.waitPod(t, p.Namespace, p.Name, "scheduled", podTimeout, scheduled)
	if p.Spec.NodeName != want {
		t.Errorf("pod %s was placed on %s, want %s", p.Name, p.Spec.NodeName, want)
	}
	return p
}

// reportVia reads a container's report line through the API server (the
// kubelet's log endpoint), for pods on either node.
func (n *twoNodes) reportVia(t *testing.T, p *corev1.Pod, container, kind string) result {
	t.Helper()
	var r result
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, cluster.Scaled(30*time.Second), true, func(ctx context.Context) (bool, error) {
		data, err := n.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, kind+" "); ok {
				return true, json.Unmarshal([]byte(rest), &r)
			}
		}
		last = fmt.Sprintf("no %s line in %d bytes of log", kind, len(data))
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s on %s container %s: %v (%s)", p.Name, p.Spec.NodeName, container, err, last)
	}
	return r
}

// nodeLabels are a node's labels now.
func (n *twoNodes) nodeLabels(t *testing.T, node string) map[string]string {
	t.Helper()
	obj, err := n.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj.Labels
}

func (n *twoNodes) cordon(t *testing.T, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	if _, err := n.client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("cordon %s=%v: %v", node, on, err)
	}
}

// TestTwoNodesInstalledFromRelease: the cluster runs the release as users
// get it: helm installed the chart from the registry's private path
// (oci://, the version hack/release.sh pushed), and both nodes pulled the
// driver's image index from there with the chart's pull Secret and run it
// by its digest. The e2e release's index holds the nodes' architecture
// only (hack/e2e-build.sh); tools/images TestRelease checks the release's
// two (linux/amd64 and linux/arm64).
func TestTwoNodesInstalledFromRelease(t *testing.T) {
	n := loadTwoNodes(t)
	chart, registry, repo, version := n.Env["CHART"], n.Env["REGISTRY"], n.Env["DRIVER_REPOSITORY"], n.driverVersion()
	path, ok := strings.CutPrefix(repo, registry+"/")
	if want := "oci://" + repo + "/charts/dra-driver-swap"; !ok || chart != want {
		t.Fatalf("the cluster installs the chart %q, want the released %s in the registry %s (the two-node cluster's host installs the release: RELEASE_DIR in hack/cluster/lib.sh)", chart, want, registry)
	}
	auth := n.registryAuth(t)
	var tags struct{ Tags []string }
	getJSON(t, "http://"+registry+"/v2/"+path+"/charts/dra-driver-swap/tags/list", "", auth, &tags)
	if !slices.Contains(tags.Tags, version) {
		t.Errorf("the registry's chart tags %v lack %s", tags.Tags, version)
	}
	var index struct {
		MediaType string
		Manifests []struct {
			Digest   string
			Platform struct{ OS, Architecture string }
		}
	}
	digest := getJSON(t, "http://"+registry+"/v2/"+path+"/dra-driver-swap/manifests/"+version, "application/vnd.oci.image.index.v1+json", auth, &index)
	var platforms []string
	for _, m := range index.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	slices.Sort(platforms)
	if want := []string{"linux/" + runtime.GOARCH}; index.MediaType != "application/vnd.oci.image.index.v1+json" || !slices.Equal(platforms, want) {
		t.Fatalf("%s/dra-driver-swap:%s is %s for %v, want an OCI image index for %v (the e2e release's)", repo, version, index.MediaType, platforms, want)
	}
	t.Logf("dra-driver-swap:%s is the index %s; chart %s --version %s", version, digest, chart, version)
	ds, deploy := n.driverWorkloads(t)
	pods := n.podsOf(t, metav1.FormatLabelSelector(ds.Spec.Selector))
	pods = append(pods, n.podsOf(t, metav1.FormatLabelSelector(deploy.Spec.Selector))...)
	onNode := map[string]bool{}
	for _, p := range pods {
		for _, s := range p.Status.ContainerStatuses {
			if !strings.HasSuffix(s.ImageID, "@"+digest) {
				t.Errorf("pod %s on %s: container %s runs %s (%s), want the release's index %s", p.Name, p.Spec.NodeName, s.Name, s.Image, s.ImageID, digest)
			}
		}
		onNode[p.Spec.NodeName] = true
	}
	for _, node := range []string{n.host, n.guest} {
		if !onNode[node] {
			t.Errorf("no driver pod on %s", node)
		}
	}
}

// TestTwoNodesPlacementByCapacity: a claim that fits only the larger node
// lands there; with both nodes' swap used up the next one waits, told by
// one SwapUnavailable event why each node cannot take it; freeing swap on
// a node schedules it there.
func TestTwoNodesPlacementByCapacity(t *testing.T) {
	n := loadTwoNodes(t)
	ns := n.namespace(t)
	hostOffer, guestOffer := n.offerOn(t, n.host), n.offerOn(t, n.guest)
	// Between the two offers, and more than half the larger one: it fits
	// only the larger node, and only once.
	size := (guestOffer + (hostOffer-guestOffer)/2) &^ (mi - 1)
	if hostOffer <= guestOffer || size <= guestOffer || 2*size <= hostOffer {
		t.Fatalf("the nodes' offers (%s %d, %s %d) leave no size that fits only %s, once", n.host, hostOffer, n.guest, guestOffer, n.host)
	}
	t.Logf("offers: %s %d MiB, %s %d MiB; claims of %d MiB", n.host, hostOffer/mi, n.guest, guestOffer/mi, size/mi)
	n.swapTemplate(t, ns, "big", "", size)
	worker := ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 1800}
	first := n.waitOn(t, n.createPod(t, n.unpinned(ns, "first", map[string]string{"swap": "big"}, worker)), n.host)

	second := n.createPod(t, n.unpinned(ns, "second", map[string]string{"swap": "big"}, worker))
	n.waitEvent(t, second, corev1.EventTypeWarning, "SwapUnavailable", n.host)
	n.waitEvent(t, second, corev1.EventTypeWarning, "SwapUnavailable", n.guest)
	events, err := n.client.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "regarding.name=" + second.Name + ",reason=SwapUnavailable"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 {
		t.Errorf("%d SwapUnavailable events for %s, want one", len(events.Items), second.Name)
	}
	for _, e := range events.Items {
		t.Logf("SwapUnavailable: %s", e.Note)
	}
	if p, err := n.client.CoreV1().Pods(ns).Get(context.Background(), second.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("the second pod was placed (%v, %v) although neither node has %d MiB free", p.Spec.NodeName, err, size/mi)
	}

	if err := n.client.CoreV1().Pods(ns).Delete(context.Background(), first.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	n.waitOn(t, second, n.host)
}

// TestTwoNodesPlacementByCEL: a DeviceClass selecting on the attribute in
// which the nodes differ (cgroupVersion) and on swapBehavior, medium and
// kernelVersion sends each pod to the only node that matches.
func TestTwoNodesPlacementByCEL(t *testing.T) {
	n := loadTwoNodes(t)
	ns := n.namespace(t)
	attrs := map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for _, node := range []string{n.host, n.guest} {
		attrs[node] = n.swapDeviceOn(t, node).Attributes
	}
	// Both kubelets run NoSwap (a node sells swap under no other
	// behavior): the cgroup version tells the nodes apart.
	if fmt.Sprint(attrs[n.host]["cgroupVersion"]) == fmt.Sprint(attrs[n.guest]["cgroupVersion"]) {
		t.Fatalf("both nodes publish cgroupVersion %v: the cluster's nodes must differ in it", attrs[n.host]["cgroupVersion"])
	}
	pods := map[string]*corev1.Pod{}
	for i, node := range []string{n.host, n.guest} {
		a := attrs[node]
		if a["cgroupVersion"].IntValue == nil || a["swapBehavior"].StringValue == nil || a["medium"].StringValue == nil || a["kernelVersion"].VersionValue == nil {
			t.Fatalf("node %s publishes incomplete attributes: %v", node, a)
		}
		attr := fmt.Sprintf("device.attributes[%q]", v1alpha1.DriverName)
		expr := fmt.Sprintf(`device.driver == %q && %s.cgroupVersion == %d && %s.swapBehavior == %q && %s.medium == %q && %s.kernelVersion.compareTo(semver(%q)) == 0`,
			v1alpha1.DriverName, attr, *a["cgroupVersion"].IntValue, attr, *a["swapBehavior"].StringValue, attr, *a["medium"].StringValue, attr, *a["kernelVersion"].VersionValue)
		class := n.deviceClass(t, fmt.Sprintf("e2e-only-node-%d-%s", i, ns), expr)
		tmpl := fmt.Sprintf("only-%d", i)
		n.swapTemplate(t, ns, tmpl, class, 32*mi)
		t.Logf("class %s: %s", class, expr)
		pods[node] = n.createPod(t, n.unpinned(ns, tmpl, map[string]string{"swap": tmpl},
			ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600}))
	}
	for node, p := range pods {
		n.waitOn(t, p, node)
	}
}

// TestTwoNodesLabelsPerNode: each pod carries its own node's zone, region,
// hostname and swap behavior; changing one node's zone relabels its pods
// and only those.
func TestTwoNodesLabelsPerNode(t *testing.T) {
	n := loadTwoNodes(t)
	ns := n.namespace(t)
	n.swapTemplate(t, ns, "swap-32", "", 32*mi)
	hostLabels, guestLabels := n.nodeLabels(t, n.host), n.nodeLabels(t, n.guest)
	for _, k := range []string{podlabels.Zone, podlabels.Region} {
		if hostLabels[k] == "" || hostLabels[k] == guestLabels[k] {
			t.Errorf("node label %s: %s has %q, %s %q; want two different values", k, n.host, hostLabels[k], n.guest, guestLabels[k])
		}
	}
	// Both kubelets run NoSwap (a node sells swap under no other behavior).
	if hostLabels[v1alpha1.LabelSwapBehavior] == "" || guestLabels[v1alpha1.LabelSwapBehavior] == "" {
		t.Errorf("node label %s: %s has %q, %s %q; want it on both", v1alpha1.LabelSwapBehavior, n.host, hostLabels[v1alpha1.LabelSwapBehavior],
			n.guest, guestLabels[v1alpha1.LabelSwapBehavior])
	}
	pods := map[string]*corev1.Pod{}
	for _, node := range []string{n.host, n.guest} {
		pods[node] = n.waitOn(t, n.createPod(t, n.pinned(node, ns, "on-"+node, map[string]string{"swap": "swap-32"},
			ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600})), node)
	}
	// waitLabels waits until the pod's topology labels are its node's.
	waitLabels := func(p *corev1.Pod, node string) {
		t.Helper()
		var got map[string]string
		want := n.nodeLabels(t, node)
		err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(time.Minute), true, func(ctx context.Context) (bool, error) {
			cur, err := n.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got = cur.Labels
			for _, k := range podlabels.TopologyKeys {
				if got[k] != want[k] {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("pod %s on %s: labels %v, want %s's %v", p.Name, node, got, node, want)
		}
	}
	for node, p := range pods {
		waitLabels(p, node)
	}

	// The guest moves to another zone: its slice, then its pods follow;
	// the host's pod keeps zone-a.
	oldZone := guestLabels[podlabels.Zone]
	setZone := func(zone string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, podlabels.Zone, zone)
		if _, err := n.client.CoreV1().Nodes().Patch(context.Background(), n.guest, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setZone("zone-c")
	t.Cleanup(func() { setZone(oldZone) })
	waitLabels(pods[n.guest], n.guest)
	hostPod, err := n.client.CoreV1().Pods(ns).Get(context.Background(), pods[n.host].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := hostPod.Labels[podlabels.Zone]; got != hostLabels[podlabels.Zone] {
		t.Errorf("the host's pod was relabelled to zone %q when the guest's zone changed; want %q", got, hostLabels[podlabels.Zone])
	}
}

// TestTwoNodesUpgradeUnderLoad: `helm upgrade` (another image tag and the
// pressure taints on) rolls the kubelet plugin on both nodes while claim
// pods arrive on each node, from before the upgrade until after the
// rollout: every one of them runs with its limit and none meets a failed
// prepare.
//
// A node gets a new pod every 2 s while fewer than its share of them are
// unfinished (2 on each node; the emulated node starts a pod in some 10 s
// of its CPUs), at most 60 on this host's node and 40 on the emulated one:
// pods keep arriving at the pace each node takes them for as long as the
// rollout lasts. A pod a second on each node (the test's first form) kept
// the emulated node so busy that its new plugin pod took minutes to start,
// and the host's node rolled only after the last pod had been created; 150
// pods at 4 in flight on this host's node took the CPU the emulator needs,
// and a hook on the emulated node ran past the runtime's 10 s timeout.
//
// The probes' claims together take at most half of each node's offer. A
// finished pod's claim is deallocated as soon as the pod is terminal, but
// the kubelet unprepares it only after it tore the pod down, and not at
// all while the plugin is being replaced: the scheduler may then allocate
// swap the node still holds, and the driver refuses that prepare until
// the kubelet unprepares (its overcommit guard, by design; CI saw it on
// the emulated node with 48Mi probes). That is not what this test is
// about: here every failed prepare is the rollout's fault.
func TestTwoNodesUpgradeUnderLoad(t *testing.T) {
	n := loadTwoNodes(t)
	ns := n.namespace(t)
	// Each node's pods: at most inFlight unfinished, and most in all.
	type load struct {
		node           string
		inFlight, most int
	}
	loads := []load{{n.host, 2, 60}, {n.guest, 2, 40}}
	// offer/(2*most) each: half a node's offer in all (whole MiB, at most
	// the 48Mi this test used).
	probe := 48 * mi
	for _, l := range loads {
		probe = min(probe, n.offerOn(t, l.node)/int64(2*l.most)/mi*mi)
	}
	if probe < mi {
		t.Fatalf("the nodes offer too little swap for %v probes (%d bytes each)", loads, probe)
	}
	n.swapTemplate(t, ns, "swap-probe", "", probe)
	var (
		mu    sync.Mutex
		names []string
		errs  []error
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		created, k := map[string]int{}, 0
		nodeOf := map[string]string{} // the pods created, by name
		for {
			// Unfinished per node: every pod created but those that finished.
			unfinished := map[string]int{}
			for _, node := range nodeOf {
				unfinished[node]++
			}
			list, err := n.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("list the pods: %w", err))
				mu.Unlock()
				return
			}
			for i := range list.Items {
				if p := &list.Items[i]; finished(p) && nodeOf[p.Name] != "" {
					unfinished[nodeOf[p.Name]]--
				}
			}
			for _, l := range loads {
				if created[l.node] >= l.most || unfinished[l.node] >= l.inFlight {
					continue
				}
				name := fmt.Sprintf("load-%03d", k)
				k++
				created[l.node]++
				_, err := n.client.CoreV1().Pods(ns).Create(context.Background(), n.pinned(l.node, ns, name, map[string]string{"swap": "swap-probe"},
					ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}), metav1.CreateOptions{})
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("create %s: %w", name, err))
				} else {
					names = append(names, name)
					nodeOf[name] = l.node
				}
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	time.Sleep(3 * time.Second)
	begin := time.Now()
	values := append([]string{"image.tag=" + n.upgradeVersion()}, pressureValues...)
	n.driverScript(t, append([]string{"set"}, values...)...)
	t.Logf("helm upgrade to %s (pressure taints on) rolled both nodes in %v", n.upgradeVersion(), time.Since(begin).Round(time.Second))
	// helm's --wait returns once the new pods are ready; the old ones may
	// still be terminating.
	for _, node := range []string{n.host, n.guest} {
		var images []string
		err := wait.PollUntilContextTimeout(context.Background(), time.Second, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
			images = images[:0]
			for _, p := range n.pluginPodsOn(t, node) {
				images = append(images, p.Spec.Containers[0].Image)
			}
			return len(images) == 1 && strings.HasSuffix(images[0], ":"+n.upgradeVersion()), nil
		})
		if err != nil {
			t.Errorf("node %s: plugin pods after the upgrade run %v, want one running %s", node, images, n.upgradeVersion())
		}
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	perNode := map[string]int{}
	for _, name := range names {
		p := n.waitPod(t, ns, name, "completion", podTimeout, finished)
		perNode[p.Spec.NodeName]++
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s on %s: phase %s, reason %s", name, p.Spec.NodeName, p.Status.Phase, terminatedReason(p, "worker"))
			continue
		}
		if msg := n.podMessages(t, p); strings.Contains(msg, "FailedPrepareDynamicResources") {
			t.Errorf("%s on %s had a failed prepare:\n%s", name, p.Spec.NodeName, msg)
		}
		assertSwapLimit(t, n.reportVia(t, p, "worker", "START"), probe)
	}
	t.Logf("pods per node: %v, each with a %dMi claim", perNode, probe/mi)
	if perNode[n.host] == 0 || perNode[n.guest] == 0 {
		t.Errorf("pods per node %v: want some on each", perNode)
	}
}

// TestTwoNodesPressureSteers: while one node's swap device is tainted
// (swap full), a new claim goes to the other node even when it prefers the
// tainted one; a claim that tolerates the taint may still land there.
func TestTwoNodesPressureSteers(t *testing.T) {
	n := loadTwoNodes(t)
	ns := n.namespace(t)
	// On already when TestTwoNodesUpgradeUnderLoad ran (then no rollout).
	n.driverScript(t, append([]string{"set"}, pressureValues...)...)
	t.Cleanup(func() { n.driverScript(t, "set", "kubeletPlugin.pressure.interval=0s") })
	hostOffer := n.offerOn(t, n.host)
	hogMiB := int(hostOffer/mi) * 6 / 10 // over swapFullPercent (50) of the host's swap
	n.swapTemplate(t, ns, "hog", "", int64(hogMiB+64)*mi)
	n.swapTemplate(t, ns, "swap-32", "", 32*mi)
	tolerating := cluster.SwapTemplate(ns, "swap-32-tolerating", "", 32*mi)
	tolerating.Spec.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{
		{Key: "dra.swap/swap-full", Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule},
		{Key: "dra.swap/memory-pressure", Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule},
	}
	if _, err := n.client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tolerating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hog := n.createPod(t, n.pinned(n.host, ns, "hog", map[string]string{"swap": "hog"},
		ctr{Name: "hog", Claims: []string{"swap"}, AllocMiB: 64 + hogMiB, MemLimit: "64Mi", Hold: 1800}))
	n.report(t, n.waitPod(t, ns, hog.Name, "running", podTimeout, running), "hog", "RESULT")
	n.waitTaint(t, "dra.swap/swap-full", true, time.Minute)

	steered := n.createPod(t, n.preferring(n.host, ns, "steered", map[string]string{"swap": "swap-32"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600}))
	n.waitOn(t, steered, n.guest)
	tolerant := n.createPod(t, n.preferring(n.host, ns, "tolerant", map[string]string{"swap": "swap-32-tolerating"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600}))
	n.waitOn(t, tolerant, n.host)

	if err := n.client.CoreV1().Pods(ns).Delete(context.Background(), hog.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	n.waitTaint(t, "dra.swap/swap-full", false, time.Minute)
}

// evictAll evicts every pod on node that a drain evicts (all but
// DaemonSet pods), as `kubectl drain --ignore-daemonsets` does, retrying
// while a PodDisruptionBudget says not yet, and waits until they are gone.
func (n *twoNodes) evictAll(t *testing.T, node string) []string {
	t.Helper()
	ctx := context.Background()
	list, err := n.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var evicted []string
	for _, p := range list.Items {
		if ref := metav1.GetControllerOf(&p); (ref != nil && ref.Kind == "DaemonSet") || p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		err := wait.PollUntilContextTimeout(ctx, time.Second, podTimeout, true, func(ctx context.Context) (bool, error) {
			err := n.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
			switch {
			case err == nil || apierrors.IsNotFound(err):
				return true, nil
			case apierrors.IsTooManyRequests(err):
				return false, nil // a disruption budget: later
			}
			return false, err
		})
		if err != nil {
			t.Fatalf("evict %s/%s from %s: %v", p.Namespace, p.Name, node, err)
		}
		evicted = append(evicted, p.Namespace+"/"+p.Name)
	}
	for _, name := range evicted {
		ns, pod, _ := strings.Cut(name, "/")
		err := wait.PollUntilContextTimeout(ctx, time.Second, podTimeout, true, func(ctx context.Context) (bool, error) {
			_, err := n.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("evicted pod %s is still there", name)
		}
	}
	return evicted
}

// TestTwoNodesDrainAndReturn: draining the host evicts its swap pods;
// their claims are unprepared there (no CDI spec, checkpoint entry or hook
// record left), their replacements get their limits on the other node, and
// the uncordoned node takes claims again.
func TestTwoNodesDrainAndReturn(t *testing.T) {
	n := loadTwoNodes(t)
	ns := n.namespace(t)
	n.swapTemplate(t, ns, "swap-80", "", 80*mi)
	tmpl := n.preferring(n.host, ns, "", map[string]string{"swap": "swap-80"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 3600})
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	tmpl.Labels = map[string]string{"app": "drain"}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "drain"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec},
		},
	}
	if _, err := n.client.AppsV1().ReplicaSets(ns).Create(context.Background(), rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// runningOn waits for two running replicas and returns them.
	runningOn := func(what string, ok func(*corev1.Pod) bool) []corev1.Pod {
		t.Helper()
		var pods []corev1.Pod
		err := wait.PollUntilContextTimeout(context.Background(), time.Second, podTimeout, true, func(ctx context.Context) (bool, error) {
			list, err := n.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=drain"})
			if err != nil {
				return false, err
			}
			pods = pods[:0]
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil && running(&p) && ok(&p) {
					pods = append(pods, p)
				}
			}
			return len(pods) == 2, nil
		})
		if err != nil {
			t.Fatalf("waiting for two running replicas %s: %v (%d)", what, err, len(pods))
		}
		return pods
	}
	before := runningOn("on "+n.host, func(p *corev1.Pod) bool { return p.Spec.NodeName == n.host })
	var claims []string
	for i := range before {
		uid := n.claimUID(t, &before[i])
		if !n.specExists(uid) || !n.checkpointHas(t, uid) {
			t.Fatalf("claim %s of %s: CDI spec %v, checkpoint entry %v on %s while its pod runs", uid, before[i].Name, n.specExists(uid), n.checkpointHas(t, uid), n.host)
		}
		claims = append(claims, uid)
	}

	n.cordon(t, n.host, true)
	t.Cleanup(func() { n.cordon(t, n.host, false) })
	evicted := n.evictAll(t, n.host)
	t.Logf("drained %s: evicted %v", n.host, evicted)
	for _, uid := range claims {
		n.waitUnprepared(t, uid)
	}
	for _, left := range n.leftovers(t) {
		t.Errorf("left on the drained node %s: %s", n.host, left)
	}
	after := runningOn("on "+n.guest, func(p *corev1.Pod) bool { return p.Spec.NodeName == n.guest })
	for i := range after {
		r := n.reportVia(t, &after[i], "worker", "START")
		assertSwapLimit(t, r, 80*mi)
		if r.CgroupVersion != 2 {
			t.Errorf("replacement %s on %s reports cgroup v%d, want the guest's v2", after[i].Name, n.guest, r.CgroupVersion)
		}
	}

	n.cordon(t, n.host, false)
	back := n.runningClaimPod(t, ns, "back", "swap-80", 80*mi)
	if back.Spec.NodeName != n.host {
		t.Errorf("pod %s ran on %s after the uncordon, want %s", back.Name, back.Spec.NodeName, n.host)
	}
}

// controllerLeader is the controller pod that holds the leader lease.
func (n *twoNodes) controllerLeader(t *testing.T) (lease string, pod *corev1.Pod) {
	t.Helper()
	_, dep := n.driverWorkloads(t)
	pods := n.podsOf(t, metav1.FormatLabelSelector(dep.Spec.Selector))
	leases, err := n.client.CoordinationV1().Leases(driverNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		for i := range pods {
			if holder != "" && strings.HasPrefix(holder, pods[i].Name+"_") {
				return l.Name, &pods[i]
			}
		}
	}
	return "", nil
}

// labelledAtStart creates a claim pod for node that reads its topology
// labels through the Downward API when its container starts, and checks
// them against the node's.
func (n *twoNodes) labelledAtStart(t *testing.T, ns, name, node string) {
	t.Helper()
	p := n.pinned(node, ns, name, map[string]string{"swap": "swap-32"}, ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"})
	for env, label := range map[string]string{"DOWNWARD_HOSTNAME": podlabels.Hostname, "DOWNWARD_SWAP_BEHAVIOR": v1alpha1.LabelSwapBehavior, "DOWNWARD_ZONE": podlabels.Zone} {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + label + "']"}}})
	}
	p = n.waitPod(t, ns, n.createPod(t, p).Name, "completion", podTimeout, finished)
	want := n.nodeLabels(t, node)
	r := n.reportVia(t, p, "worker", "START")
	for env, label := range map[string]string{"DOWNWARD_HOSTNAME": podlabels.Hostname, "DOWNWARD_SWAP_BEHAVIOR": v1alpha1.LabelSwapBehavior, "DOWNWARD_ZONE": podlabels.Zone} {
		if r.Downward[env] != want[label] {
			t.Errorf("pod %s on %s: %s=%q at container start, want the node's %s %q", name, node, env, r.Downward[env], label, want[label])
		}
	}
}

// TestTwoNodesControllerFailover: with the leader's node cordoned and the
// leader pod deleted, the other replica takes the lease, and pods still
// get their labels before they start.
func TestTwoNodesControllerFailover(t *testing.T) {
	n := loadTwoNodes(t)
	ns := n.namespace(t)
	n.swapTemplate(t, ns, "swap-32", "", 32*mi)
	var lease string
	var leader *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, podTimeout, true, func(context.Context) (bool, error) {
		lease, leader = n.controllerLeader(t)
		return leader != nil, nil
	})
	if err != nil {
		t.Fatalf("no controller pod holds a lease in %s: %v", driverNamespace, err)
	}
	t.Logf("leader %s on %s (lease %s)", leader.Name, leader.Spec.NodeName, lease)
	n.cordon(t, leader.Spec.NodeName, true)
	t.Cleanup(func() { n.cordon(t, leader.Spec.NodeName, false) })
	if err := n.client.CoreV1().Pods(driverNamespace).Delete(context.Background(), leader.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next *corev1.Pod
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		_, next = n.controllerLeader(t)
		return next != nil && next.UID != leader.UID, nil
	})
	if err != nil {
		t.Fatalf("no other replica took the lease after %s was deleted: %v", leader.Name, err)
	}
	t.Logf("new leader %s on %s", next.Name, next.Spec.NodeName)
	other := n.host
	if leader.Spec.NodeName == n.host {
		other = n.guest
	}
	n.labelledAtStart(t, ns, "after-failover", other)
}

// controllerMetric reads a sample of a controller pod's metrics (through
// the API server's pod proxy), summed over the series that have more labels
// after the given ones (a priority queue's depth has one per priority), and
// whether the pod has any.
func (n *twoNodes) controllerMetric(t *testing.T, p *corev1.Pod, sample string) (float64, bool) {
	t.Helper()
	// The port by number: kube-apiserver v1.37.1 panics on a named port
	// in a pod proxy path (proxy.normalizeLocation).
	port := int32(0)
	for _, cp := range p.Spec.Containers[0].Ports {
		if cp.Name == "metrics" {
			port = cp.ContainerPort
		}
	}
	if port == 0 {
		t.Fatalf("controller pod %s has no metrics port", p.Name)
	}
	raw, err := n.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", p.Namespace, "pods", fmt.Sprintf("%s:%d", p.Name, port), "proxy", "metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("scrape controller pod %s: %v", p.Name, err)
	}
	var sum float64
	found := false
	more := strings.TrimSuffix(sample, "}") + ","
	for _, line := range strings.Split(string(raw), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if key := line[:i]; key != sample && !strings.HasPrefix(key, more) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err != nil {
			t.Fatalf("controller pod %s: sample %q: %v", p.Name, line, err)
		}
		sum, found = sum+v, true
	}
	return sum, found
}

// TestTwoNodesNodeGone runs last: the guest is powered off for good and
// its Node deleted. Its slice goes, no claim is allocated to it, and the
// webhooks keep serving from the replica on this host.
func TestTwoNodesNodeGone(t *testing.T) {
	n := loadTwoNodes(t)
	share := os.Getenv("E2E_GUEST_SHARE")
	if share == "" {
		t.Fatal("E2E_GUEST_SHARE is not set: hack/e2e-cluster.sh names the guest's share, through which the test powers it off")
	}
	ns := n.namespace(t)
	n.swapTemplate(t, ns, "swap-32", "", 32*mi)
	if err := os.WriteFile(filepath.Join(share, "poweroff"), []byte("TestTwoNodesNodeGone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The guest writes its result and powers off; then its node stops
	// reporting and the node lifecycle controller marks it (and its pods)
	// not ready.
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, cluster.Scaled(3*time.Minute), true, func(ctx context.Context) (bool, error) {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.guest, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status != corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the guest node %s stayed Ready after its power-off: %v", n.guest, err)
	}
	if err := n.client.CoreV1().Nodes().Delete(ctx, n.guest, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its slice is garbage (owned by the Node); its pods are deleted by
	// the pod garbage collector.
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, cluster.Scaled(2*time.Minute), true, func(ctx context.Context) (bool, error) {
		slices, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + n.guest})
		if err != nil {
			return false, err
		}
		pods, err := n.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.guest})
		if err != nil {
			return false, err
		}
		return len(slices.Items) == 0 && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("after %s was deleted its slices or pods remain: %v", n.guest, err)
	}
	// The controller stops working for the gone node: the leader's (on
	// this host now) node-labels controller neither fails nor retries any
	// more (its error counter stands still, its queue is empty).
	var leader *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, time.Second, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		_, leader = n.controllerLeader(t)
		return leader != nil && leader.Spec.NodeName == n.host && podReady(leader), nil
	})
	if err != nil {
		t.Fatalf("no ready controller replica on %s holds the lease: %v", n.host, err)
	}
	// The leader's controllers start after it took the lease: their
	// series appear then.
	const errorsSample, depthSample = `controller_runtime_reconcile_errors_total{controller="node-labels"}`, `workqueue_depth{controller="node-labels",name="node-labels"}`
	nodeLabels := func() (errs, depth float64, ok bool) {
		errs, okErrs := n.controllerMetric(t, leader, errorsSample)
		depth, okDepth := n.controllerMetric(t, leader, depthSample)
		return errs, depth, okErrs && okDepth
	}
	var errsBefore float64
	err = wait.PollUntilContextTimeout(ctx, time.Second, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		var ok bool
		errsBefore, _, ok = nodeLabels()
		return ok, nil
	})
	if err != nil {
		t.Fatalf("the leader %s exports no %s and %s: %v", leader.Name, errorsSample, depthSample, err)
	}
	time.Sleep(20 * time.Second)
	if errs, depth, _ := nodeLabels(); errs != errsBefore || depth != 0 {
		t.Errorf("the leader's node-labels controller in the 20 s after %s was deleted: errors %v -> %v, queue depth %v; want no new errors and an empty queue", n.guest, errsBefore, errs, depth)
	}
	// The webhooks serve from this host's replica: a pod is labelled
	// before it starts; and every new claim is allocated here.
	n.labelledAtStart(t, ns, "after-node-gone", n.host)
	var pods []*corev1.Pod
	for i := range 3 {
		pods = append(pods, n.createPod(t, n.unpinned(ns, fmt.Sprintf("anywhere-%d", i), map[string]string{"swap": "swap-32"},
			ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600})))
	}
	for _, p := range pods {
		n.waitOn(t, p, n.host)
		claims, err := n.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims.Items {
			if c.Status.Allocation == nil {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.Pool == n.guest {
					t.Errorf("claim %s allocated from the gone node's pool %s", c.Name, r.Pool)
				}
			}
		}
	}
	if _, err := n.client.CoreV1().Nodes().Get(ctx, n.guest, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted node %s is back: %v", n.guest, err)
	}
}
