package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// offloadTemplate creates a template for bytes of swap with a SwapConfig
// (its fields after apiVersion and kind, keys in alphabetical order as
// kubectl sends them).
func (c *env) offloadTemplate(t *testing.T, ns, name string, bytes int64, fields string) {
	t.Helper()
	tmpl := cluster.SwapTemplate(ns, name, "", bytes)
	tmpl.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "dra.swap", Parameters: runtime.RawExtension{
			Raw: []byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig",` + fields + `}`)}},
	}}}
	if _, err := c.client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("template %s: %v", name, err)
	}
}

// TestOffloadRefusedOnCgroupV1: on a cgroup v1 node a claim that asks for
// offload or for compressed-only swap is refused at prepare, with the
// field and the reason in the kubelet's event on the pod, and the node's
// device says it does not offload.
func TestOffloadRefusedOnCgroupV1(t *testing.T) {
	c := loadCluster(t)
	if c.cgroupVersion(t) != 1 {
		t.Skip("the refusal of a cgroup v1 node; this node runs cgroup v2")
	}
	ns := c.namespace(t)
	if dev := c.swapDevice(t); dev == nil || attributeString(dev.Attributes["offload"]) != "false" {
		t.Errorf("the node's swap device: offload %+v, want false", dev)
	}
	for _, tc := range []struct{ name, fields, want string }{
		{"offload", `"offload":{"maxStallPercent":0.5}`,
			"spec.devices.config[0].opaque.parameters.offload: Forbidden: offload needs cgroup v2 (memory.reclaim and memory.pressure); this node uses cgroup v1"},
		{"compressed-only", `"zswap":"CompressedOnly"`,
			"spec.devices.config[0].opaque.parameters.zswap: Forbidden: CompressedOnly needs memory.zswap.writeback, which exists only on cgroup v2"},
	} {
		c.offloadTemplate(t, ns, tc.name, 64*mi, tc.fields)
		p := c.createPod(t, c.WorkloadPod(ns, tc.name, map[string]string{"swap": tc.name},
			ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
		c.waitPrepareFailure(t, p, tc.want)
		if p, err := c.client.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
			t.Errorf("pod %s: %v, want it Pending", tc.name, err)
		}
	}
}

// waitPrepareFailure waits for the kubelet's FailedPrepareDynamicResources
// event on the pod containing text.
func (c *env) waitPrepareFailure(t *testing.T, p *corev1.Pod, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(60*time.Second), true, func(ctx context.Context) (bool, error) {
		list, err := c.client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == "FailedPrepareDynamicResources" && strings.Contains(e.Message, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("pod %s: no FailedPrepareDynamicResources event containing %q; events: %q", p.Name, text, seen)
	}
}

// TestOffload, on a cgroup v2 node: the plugin moves the cold half of a
// hot/cold workload's heap into its claim's swap while the container's
// memory stall stays within the claim's budget; and it stops offloading a
// container whose stall is above its budget (one that thrashes at its own
// memory limit), which gets a SwapOffloadBackedOff event.
func TestOffload(t *testing.T) {
	c := loadCluster(t, needsNode("reads the containers' memory.swap.current and memory.pressure in their cgroups on the node"))
	if c.cgroupVersion(t) != 2 {
		t.Skip("offload needs cgroup v2 (TestOffloadRefusedOnCgroupV1 covers v1)")
	}
	ns := c.namespace(t)
	if dev := c.swapDevice(t); dev == nil || attributeString(dev.Attributes["offload"]) != "true" {
		t.Fatalf("the node's swap device does not offload: %+v", dev)
	}
	c.offloadTemplate(t, ns, "offload", 256*mi, `"offload":{"maxStallPercent":1}`)
	c.offloadTemplate(t, ns, "thrash", 256*mi, `"offload":{"maxStallPercent":0.5}`)
	hotCold := func(name, template string, hot, cold int, limit string) *corev1.Pod {
		p := c.WorkloadPod(ns, name, map[string]string{"swap": template}, ctr{Name: "worker", Claims: []string{"swap"}, MemLimit: limit})
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "HOT_MIB", Value: strconv.Itoa(hot)},
			corev1.EnvVar{Name: "COLD_MIB", Value: strconv.Itoa(cold)}, corev1.EnvVar{Name: "REPORT_SECONDS", Value: "5"})
		return c.waitPod(t, ns, c.createPod(t, p).Name, "running", podTimeout, running)
	}
	start := time.Now()
	// 32 MiB hot and 96 MiB cold, well within its 256Mi limit: nothing
	// but the plugin moves its pages to swap.
	offloaded := hotCold("hot-cold", "offload", 32, 96, "256Mi")
	// 96 MiB, all hot, under a 64Mi limit: it swaps at its own limit, its
	// stall far above 0.5 % from the start.
	thrashing := hotCold("thrashing", "thrash", 96, 0, "64Mi")
	_, root, group := c.hostCgroup(t, offloaded, "worker")
	cg := filepath.Join(root, group)
	stallAtStart := readStall(t, cg)
	began := time.Now()

	// A third of the cold pages, 32 MiB, reach swap.
	const target = 32 * mi
	var swapped int64
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, cluster.Scaled(90*time.Second), true, func(context.Context) (bool, error) {
		v, err := readCgroupInt(filepath.Join(cg, "memory.swap.current"))
		swapped = v
		return err == nil && v >= target, err
	}); err != nil {
		t.Fatalf("the offloaded container's memory.swap.current is %d bytes, want at least %d: %v", swapped, target, err)
	}
	elapsed := time.Since(began)
	stall := readStall(t, cg) - stallAtStart
	ratio := float64(stall) / float64(elapsed.Microseconds())
	t.Logf("offloaded %d MiB of a 128 MiB heap in %v (%v after the pods were created); its stall over that time: %d µs, %.3f%% (budget 1%%)",
		swapped>>20, elapsed.Round(time.Second), time.Since(start).Round(time.Second), stall, ratio*100)
	if ratio > 0.01 {
		t.Errorf("the offloaded container stalled %.3f%% of the time, above its claim's 1%% budget", ratio*100)
	}

	// The thrashing one: told, paused, and offloaded no more while it
	// stalls. The loop may take a step or two before its first stall shows
	// (on the emulated node the workload can still be filling its 64Mi
	// when the loop first measures it): no law can tell a container that
	// will thrash from one that does not before it stalls. Its metrics
	// say paused once a pass measured its stall above the budget (a pass
	// that measured no interval says Sampling until the next): poll for
	// the pause, then want nothing more reclaimed for ten scrapes.
	c.waitEvent(t, thrashing, corev1.EventTypeNormal, "SwapOffloadBackedOff", `Offload of container "worker"`)
	claim := c.podClaim(t, thrashing, "swap")
	var status map[string]string
	scrapes := 0
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, cluster.Scaled(30*time.Second), true, func(context.Context) (bool, error) {
		scrapes++
		status = c.claimOffloadMetrics(t, ns, claim)
		return status["paused"] == "1", nil
	})
	if err != nil {
		t.Fatalf("the thrashing container's claim %s after %d scrapes: %v (%v); want the offload paused", claim, scrapes, status, err)
	}
	atPause := status["reclaimed"]
	t.Logf("the thrashing container's claim: paused at scrape %d, %s bytes reclaimed before", scrapes, atPause)
	for range 10 {
		time.Sleep(time.Second)
		if status = c.claimOffloadMetrics(t, ns, claim); status["reclaimed"] != atPause {
			t.Fatalf("the thrashing container's claim %s: %v after its pause with %s bytes reclaimed; want nothing more reclaimed while it stalls", claim, status, atPause)
		}
	}
	if status := c.claimOffloadMetrics(t, ns, c.podClaim(t, offloaded, "swap")); status["reclaimed"] == "" || status["reclaimed"] == "0" {
		t.Errorf("the offloaded container's claim: %v; want reclaimed bytes", status)
	}
}

// podClaim is the name of the claim the claim controller made for the
// pod's claim name.
func (c *env) podClaim(t *testing.T, p *corev1.Pod, name string) string {
	t.Helper()
	p, err := c.client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == name && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	t.Fatalf("pod %s has no claim for %q: %+v", p.Name, name, p.Status.ResourceClaimStatuses)
	return ""
}

// readStall is a cgroup's memory.pressure "some" total, in microseconds.
func readStall(t *testing.T, cg string) int64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cg, "memory.pressure"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "some "); ok {
			for _, f := range strings.Fields(rest) {
				if v, ok := strings.CutPrefix(f, "total="); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					return n
				}
			}
		}
	}
	t.Fatalf("%s/memory.pressure: no some total in %q", cg, data)
	return 0
}

// claimOffloadMetrics scrapes this node's plugin for a claim's offload
// series: reclaimed (bytes), paused (0 or 1), swap (bytes in use).
func (c *env) claimOffloadMetrics(t *testing.T, ns, claim string) map[string]string {
	t.Helper()
	pods := c.pluginPodsOn(t, c.node)
	if len(pods) == 0 {
		t.Fatalf("no plugin pod on node %s", c.node)
	}
	page, err := scrapeMetrics(context.Background(), &pods[len(pods)-1])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	labels := fmt.Sprintf(`{claim=%q,claim_namespace=%q}`, claim, ns)
	for name, metric := range map[string]string{"reclaimed": "dra_swap_offload_reclaimed_bytes_total", "paused": "dra_swap_offload_paused", "swap": "dra_swap_offload_swap_used_bytes"} {
		for line := range strings.Lines(page) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), metric+labels+" "); ok {
				out[name] = v
			}
		}
	}
	return out
}
