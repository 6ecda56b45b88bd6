package e2e

import (
	"context"
	"os"
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

// pressureValues turns the pressure taints on for the test, with short
// dwell times and thresholds a test pod can reach; the cluster runs with
// them off otherwise, so that no other test's swapping taints the node.
var pressureValues = []string{
	"kubeletPlugin.pressure.interval=1s",
	"kubeletPlugin.pressure.setAfter=2s",
	"kubeletPlugin.pressure.clearAfter=2s",
	"kubeletPlugin.pressure.swapFullPercent=50",
	"kubeletPlugin.pressure.swapFullClearPercent=30",
	"kubeletPlugin.pressure.someThreshold=10",
	"kubeletPlugin.pressure.someClear=3",
	"kubeletPlugin.pressure.fullThreshold=30",
	"kubeletPlugin.pressure.fullClear=5",
}

// setPluginValues upgrades the release with values set (helm upgrade
// --reuse-values) and waits for the new plugin pod.
func (c *env) setPluginValues(t *testing.T, values ...string) {
	t.Helper()
	old := c.pluginPods(t)
	c.driverScript(t, append([]string{"set"}, values...)...)
	c.waitPluginReady(t, func(p *corev1.Pod) bool { return len(old) == 0 || p.UID != old[0].UID })
}

// deviceTaint returns the value of a taint of the node's swap device, and
// whether it is there.
func (c *env) deviceTaint(t *testing.T, key string) (string, bool) {
	t.Helper()
	if dev := c.swapDevice(t); dev != nil {
		for _, taint := range dev.Taints {
			if taint.Key == key {
				return taint.Value, true
			}
		}
	}
	return "", false
}

// waitTaint waits until the device has (or no longer has) the taint and
// returns how long that took.
func (c *env) waitTaint(t *testing.T, key string, present bool, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, cluster.Scaled(timeout), true, func(context.Context) (bool, error) {
		_, ok := c.deviceTaint(t, key)
		return ok == present, nil
	})
	if err != nil {
		dev := c.swapDevice(t)
		t.Fatalf("waiting for the swap device to have taint %s=%v: %v (taints %+v)", key, present, err, dev.Taints)
	}
	return time.Since(start)
}

// TestPressureTaints: a node whose swap fills up (both legs) or that
// thrashes (memory pressure, PSI) takes no new swap claims: its device is
// tainted within the dwell time, a new claim pod stays Pending and is told
// why, a claim that tolerates the taint is placed, and when the hog goes
// the taint clears and the waiting pod runs.
func TestPressureTaints(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	c.setPluginValues(t, pressureValues...)
	t.Cleanup(func() { c.setPluginValues(t, "kubeletPlugin.pressure.interval=0s") })
	// The chart mounts no /proc/pressure: the plugin reads the node's PSI
	// in its own procfs, which shows the kernel's system-wide PSI.
	if _, err := os.Stat("/proc/pressure/memory"); err == nil {
		var psi float64
		err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, cluster.Scaled(30*time.Second), true, func(context.Context) (bool, error) {
			psi = c.pluginCounter(t, "dra_swap_psi_available", "")
			return psi == 1, nil
		})
		if err != nil {
			t.Errorf("the node has /proc/pressure/memory, but the plugin exports dra_swap_psi_available %v", psi)
		}
	}
	c.swapTemplate(t, ns, "swap-700", "", 700*mi)
	c.swapTemplate(t, ns, "swap-64", "", 64*mi)
	tolerating := cluster.SwapTemplate(ns, "swap-64-tolerating", "", 64*mi)
	// Filling swap is itself memory pressure: the claim that accepts a
	// pressured node tolerates both taints.
	tolerating.Spec.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{
		{Key: "dra.swap/swap-full", Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule},
		{Key: "dra.swap/memory-pressure", Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule},
	}
	if _, err := c.client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tolerating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("swap-full", func(t *testing.T) {
		if cluster.Emulated() {
			t.Skip("runs on this host's node only: the node's swap use (/proc/swaps) is the same on both, and filling 600MiB of swap takes minutes under emulation")
		}
		// 600MiB beyond its 64Mi memory limit: over half of the node's
		// 1GiB of swap.
		hog := c.createPod(t, c.WorkloadPod(ns, "hog", map[string]string{"swap": "swap-700"},
			ctr{Name: "hog", Claims: []string{"swap"}, AllocMiB: 64 + 600, MemLimit: "64Mi", Hold: 1800}))
		c.report(t, c.waitPod(t, ns, hog.Name, "running", podTimeout, running), "hog", "RESULT")
		took := c.waitTaint(t, "dra.swap/swap-full", true, time.Minute)
		value, _ := c.deviceTaint(t, "dra.swap/swap-full")
		t.Logf("swap-full taint %s set %v after the hog filled swap (dwell time 2s, 1s samples)", value, took.Round(100*time.Millisecond))
		c.waitNodeEvent(t, "SwapPressureTainted", "dra.swap/swap-full="+value)

		waits := c.createPod(t, c.WorkloadPod(ns, "waits", map[string]string{"swap": "swap-64"},
			ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 1800}))
		c.waitEvent(t, waits, corev1.EventTypeWarning, "SwapUnavailable", "dra.swap/swap-full="+value+":NoSchedule")
		if p, err := c.client.CoreV1().Pods(ns).Get(context.Background(), waits.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("the pod without a toleration was placed on the tainted node: %v, %v", p.Spec.NodeName, err)
		}
		c.runningClaimPod(t, ns, "tolerates", "swap-64-tolerating", 64*mi)

		if err := c.client.CoreV1().Pods(ns).Delete(context.Background(), hog.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		took = c.waitTaint(t, "dra.swap/swap-full", false, time.Minute)
		t.Logf("swap-full taint cleared %v after the hog was deleted", took.Round(100*time.Millisecond))
		c.waitNodeEvent(t, "SwapPressureCleared", "dra.swap/swap-full removed")
		// The hog's swapping may have set the memory-pressure taint too;
		// it clears as the pressure's 10 s average decays.
		c.waitTaint(t, "dra.swap/memory-pressure", false, 2*time.Minute)
		c.waitPod(t, ns, waits.Name, "running once the taints cleared", podTimeout, running)
	})

	t.Run("memory-pressure", func(t *testing.T) {
		if c.cgroupVersion(t) != 2 {
			t.Skip("memory pressure is tested on the cgroup v2 leg (the kubepods cgroup's PSI)")
		}
		// Sixteen times its memory limit, touched again and again, with
		// memory.swap.high at a tenth of its claim: the kernel throttles
		// it whenever it swaps out beyond that, and it swaps all the time.
		// 400Mi: beside the swap-full leg's pods, on the guest's 768 MiB.
		throttled := cluster.SwapTemplate(ns, "swap-400-high", "", 400*mi)
		throttled.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "dra.swap", Parameters: runtime.RawExtension{
				Raw: []byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":10}`)}},
		}}}
		if _, err := c.client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), throttled, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		thrash := c.createPod(t, c.WorkloadPod(ns, "thrash", map[string]string{"swap": "swap-400-high"},
			ctr{Name: "thrash", Claims: []string{"swap"}, AllocMiB: 256, MemLimit: "16Mi", Thrash: 1800}))
		c.waitPod(t, ns, thrash.Name, "running", podTimeout, running)
		took := c.waitTaint(t, "dra.swap/memory-pressure", true, 2*time.Minute)
		value, _ := c.deviceTaint(t, "dra.swap/memory-pressure")
		t.Logf("memory-pressure taint %s set %v after the thrashing pod started", value, took.Round(100*time.Millisecond))
		// The swap-full leg's hog may have set this taint already: the
		// events API then counts this one in that event's series, whose
		// note keeps the first value.
		c.waitNodeEvent(t, "SwapPressureTainted", "dra.swap/memory-pressure=")
		if err := c.client.CoreV1().Pods(ns).Delete(context.Background(), thrash.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		// avg10 decays over some 20 seconds below the clear threshold.
		took = c.waitTaint(t, "dra.swap/memory-pressure", false, 2*time.Minute)
		t.Logf("memory-pressure taint cleared %v after the thrashing pod was deleted", took.Round(100*time.Millisecond))
	})
}

// waitNodeEvent waits for the plugin's event on the node.
func (c *env) waitNodeEvent(t *testing.T, reason, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, cluster.Scaled(30*time.Second), true, func(ctx context.Context) (bool, error) {
		list, err := c.client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.kind=Node,regarding.name=" + c.node})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, e.Reason+": "+e.Note)
			if e.Reason == reason && strings.Contains(e.Note, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("node %s: no %s event saying %q; events: %q", c.node, reason, text, seen)
	}
}
