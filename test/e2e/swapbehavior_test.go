package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// TestKubeletSwapBehaviorChange: an admin turns the node's kubelet to
// LimitedSwap, under which the kubelet gives every Burstable container
// without a claim swap of its own: the configuration edited as sed -i does
// (a new file renamed over the old one), then the kubelet restarted. The
// node stops selling swap (capacity 0, taint
// dra.swap/kubelet-swap-behavior=LimitedSwap, a SwapBehaviorConflict event
// on the Node saying how to fix it), and a new claim pod waits and is told
// why. Turned back to NoSwap (edited in place this time), the offer returns
// and the waiting pod runs with its limit. Nothing is reinstalled: the
// plugin's pod is the same, its container restarted once, to mount the
// renamed file, which its single-file mount cannot show otherwise.
// cgroup v2 only: on v1 the kubelet does not start with LimitedSwap.
func TestKubeletSwapBehaviorChange(t *testing.T) {
	c := loadCluster(t, needsNode("edits the kubelet's configuration on the node and restarts the kubelet"))
	if c.cgroupVersion(t) != 2 {
		t.Skip("the kubelet refuses LimitedSwap on cgroup v1 (it does not start): this runs on the cgroup v2 node")
	}
	start := time.Now()
	ns := c.namespace(t)
	const want = 64 * mi
	c.swapTemplate(t, ns, "swap-64", "", want)
	path := filepath.Join(c.dir, "kubelet", "config.yaml")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(orig, []byte("swapBehavior: NoSwap\n")) {
		t.Fatalf("the node's kubelet configuration %s does not say swapBehavior: NoSwap:\n%s", path, orig)
	}
	offer := c.offer(t)
	if offer <= 0 {
		t.Fatalf("the node offers %d bytes of swap under NoSwap", offer)
	}
	plugin := c.onePluginPod(t)
	restarts := pluginRestarts(plugin)

	restored := false
	t.Cleanup(func() {
		if !restored {
			if err := os.WriteFile(path, orig, 0o644); err != nil {
				t.Errorf("restore %s: %v", path, err)
			}
			c.script(t, "restart.sh", "kubelet")
		}
	})
	limited := bytes.Replace(orig, []byte("swapBehavior: NoSwap\n"), []byte("swapBehavior: LimitedSwap\n"), 1)
	if err := os.WriteFile(path+".new", limited, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	c.script(t, "restart.sh", "kubelet")
	flipped := time.Now()
	c.waitSwapDevice(t, "capacity 0 and the taint kubelet-swap-behavior=LimitedSwap", func(d *resourceapi.Device) bool {
		q := d.Capacity[v1alpha1.CapacitySwap].Value
		return q.IsZero() && taintValue(d, v1alpha1.TaintKubeletSwapBehavior) == v1alpha1.SwapBehaviorLimitedSwap &&
			ptr.Deref(d.Attributes[v1alpha1.AttrSwapBehavior].StringValue, "") == v1alpha1.SwapBehaviorLimitedSwap
	})
	t.Logf("the node stopped offering swap %v after the kubelet restarted with LimitedSwap", time.Since(flipped).Round(100*time.Millisecond))
	c.waitNodeEvent(t, "KubeletConfigUnreadable", "was replaced on the host")
	c.waitNodeEvent(t, "SwapBehaviorConflict", "taint "+v1alpha1.TaintKubeletSwapBehavior+"=LimitedSwap:NoSchedule")
	c.waitNodeEvent(t, "SwapBehaviorConflict", "set memorySwap.swapBehavior: NoSwap in the kubelet's configuration and restart the kubelet")

	waits := c.createPod(t, c.WorkloadPod(ns, "waits", map[string]string{"swap": "swap-64"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 1800}))
	c.waitEvent(t, waits, corev1.EventTypeWarning, "SwapUnavailable", v1alpha1.TaintKubeletSwapBehavior+"=LimitedSwap:NoSchedule")
	if p, err := c.client.CoreV1().Pods(ns).Get(context.Background(), waits.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("a claim pod was placed on the node that sells no swap: %v, %v", p.Spec.NodeName, err)
	}

	// helm test names the cause (helmtest_test.go).
	c.helmTestFailsUnderLimitedSwap(t, flipped)

	// The slice the restarted kubelet will find (see below).
	var before *resourceapi.ResourceSlice
	c.waitSwapDevice(t, "a slice", func(*resourceapi.Device) bool { before = c.swapSlice(t); return before != nil })
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	restored = true
	c.script(t, "restart.sh", "kubelet")
	flipped = time.Now()
	c.waitSwapDevice(t, "the offer back, untainted", func(d *resourceapi.Device) bool {
		q := d.Capacity[v1alpha1.CapacitySwap].Value
		return q.Value() == offer && len(d.Taints) == 0
	})
	t.Logf("the offer returned %v after the kubelet restarted with NoSwap", time.Since(flipped).Round(100*time.Millisecond))
	// A starting kubelet (1.37) deletes its node's ResourceSlices, in the
	// background, once it has read its Node; the plugin's slice controller
	// creates the slice again some 30 s later (its sync delay). The offer
	// is back for good once the slice the kubelet found is gone and a new
	// one offers it; tests after this one find it there.
	c.waitSwapDevice(t, "the offer in a slice made after the kubelet's start-up wipe", func(d *resourceapi.Device) bool {
		s := c.swapSlice(t)
		q := d.Capacity[v1alpha1.CapacitySwap].Value
		return s != nil && s.UID != before.UID && q.Value() == offer && len(d.Taints) == 0
	})
	t.Logf("the offer is in the slice made after the kubelet's start-up wipe %v after the kubelet restarted", time.Since(flipped).Round(100*time.Millisecond))
	c.waitNodeEvent(t, "SwapBehaviorConflictCleared", "is NoSwap (it was LimitedSwap)")
	p := c.waitPod(t, ns, waits.Name, "running once the node sells swap again", podTimeout, running)
	if got := c.hostSwapLimit(t, p, "worker"); got != want {
		t.Errorf("the waiting pod's swap limit %d, want %d", got, want)
	}

	after := c.onePluginPod(t)
	if after.UID != plugin.UID || pluginRestarts(after) != restarts+1 {
		t.Errorf("plugin pod %s restarted %d times, then %s %d times; want the same pod, its container restarted once (for the renamed file)",
			plugin.UID, restarts, after.UID, pluginRestarts(after))
	}
	t.Logf("took %v", time.Since(start).Round(time.Second))
}

// onePluginPod waits until the node's one plugin pod is ready and returns
// it.
func (c *env) onePluginPod(t *testing.T) *corev1.Pod {
	t.Helper()
	return c.waitPluginReady(t, func(*corev1.Pod) bool { return true })
}

// pluginRestarts is how often the plugin pod's container restarted.
func pluginRestarts(p *corev1.Pod) int32 {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "plugin" {
			return s.RestartCount
		}
	}
	return -1
}

// waitSwapDevice waits until the node's swap device satisfies cond.
func (c *env) waitSwapDevice(t *testing.T, what string, cond func(*resourceapi.Device) bool) {
	t.Helper()
	var last *resourceapi.Device
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		last = c.swapDevice(t)
		return last != nil && cond(last), nil
	})
	if err != nil {
		t.Fatalf("waiting for the node's swap device to have %s: %v; last %+v", what, err, last)
	}
}

// swapSlice is the ResourceSlice holding the node's swap device (nil
// when there is none).
func (c *env) swapSlice(t *testing.T) *resourceapi.ResourceSlice {
	t.Helper()
	slices, err := c.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + c.node})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range slices.Items {
		if s.Spec.Driver == v1alpha1.DriverName && len(s.Spec.Devices) > 0 {
			return &slices.Items[i]
		}
	}
	return nil
}

// taintValue is the value of the device's taint key, "" when it has none.
func taintValue(d *resourceapi.Device, key string) string {
	for _, t := range d.Taints {
		if t.Key == key {
			return t.Value
		}
	}
	return ""
}
