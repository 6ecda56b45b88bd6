package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// unsafeOfferSwapUnder renders the chart with args and returns what its
// DaemonSet tells the plugin to offer swap under besides NoSwap
// (--unsafe-offer-swap-under, comma-separated as pflag reads it).
func unsafeOfferSwapUnder(t *testing.T, args ...string) []string {
	t.Helper()
	const flag = "--unsafe-offer-swap-under="
	var found []string
	for _, a := range renderPluginDaemonSet(t, args...).Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, flag); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the chart renders %d %s arguments (%q), want one", len(found), flag, found)
	}
	if found[0] == "" {
		return nil
	}
	return strings.Split(found[0], ",")
}

func kubeletConfigWith(behavior string) string {
	return "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailSwapOn: false\nmemorySwap:\n  swapBehavior: " + behavior + "\n"
}

// offers is a slice check: the device offers bytes, untainted.
func offers(bytes int64) func(*resourceapi.Device) bool {
	return func(d *resourceapi.Device) bool {
		return capacityIs(bytes)(d) && len(d.Taints) == 0 && attr(d, "usable") == "true"
	}
}

// withheldUnder is a slice check: the device offers nothing under the
// kubelet's swap behavior, which its taint names.
func withheldUnder(behavior string) func(*resourceapi.Device) bool {
	return func(d *resourceapi.Device) bool {
		return capacityIs(0)(d) && d.Capacity["swap"].RequestPolicy == nil && attr(d, "usable") == "false" && attr(d, "swapBehavior") == behavior &&
			len(d.Taints) == 1 && d.Taints[0].Key == v1alpha1.TaintKubeletSwapBehavior && d.Taints[0].Value == behavior &&
			d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule
	}
}

// TestPluginSwapBehavior: the plugin configured as the chart renders it
// follows the kubelet's swap behavior at every rescan, without a restart.
// With the chart's defaults a node whose kubelet runs LimitedSwap, KEP-5359's
// WorkloadControlledSwap or an unreadable configuration (Unknown) offers no
// swap: its slice has capacity 0 and the taint kubelet-swap-behavior with
// the behavior, the Node gets a SwapBehaviorConflict event saying why and
// how to fix it, and dra_swap_node_swap_offered_bytes is 0; back under
// NoSwap the offer returns and the Node is told. With
// kubeletPlugin.unsafeOfferSwapUnder={LimitedSwap} the node offers its swap
// under LimitedSwap, with a SwapOfferedUnsafely event saying what that
// risks, and still none under the behaviors not named.
func TestPluginSwapBehavior(t *testing.T) {
	t.Parallel()
	t.Run("defaults", func(t *testing.T) {
		unsafe := unsafeOfferSwapUnder(t)
		if len(unsafe) != 0 {
			t.Fatalf("the chart's default offers swap under %q", unsafe)
		}
		metricsPort := freePort(t)
		ctx, client, h, _ := runPlugin(t, func(c *kubeletplugin.Config) {
			c.Policy.UnsafeOfferUnder = unsafe
			c.MetricsAddress = fmt.Sprintf("127.0.0.1:%d", metricsPort)
		})
		waitForSlice(t, ctx, client, "2Gi offered under NoSwap", offers(2*gi))
		waitForMetric(t, ctx, metricsPort, "dra_swap_node_swap_offered_bytes "+strconv.FormatFloat(float64(2*gi), 'g', -1, 64)+"\n")

		h.write("var/lib/kubelet/config.yaml", kubeletConfigWith("LimitedSwap"))
		waitForSlice(t, ctx, client, "nothing offered under LimitedSwap", withheldUnder("LimitedSwap"))
		waitForNodeEvent(t, ctx, client, publish.ReasonSwapBehaviorConflict,
			"the taint dra.swap/kubelet-swap-behavior=LimitedSwap:NoSchedule, because the kubelet's memorySwap.swapBehavior is LimitedSwap")
		waitForNodeEvent(t, ctx, client, publish.ReasonSwapBehaviorConflict,
			"set memorySwap.swapBehavior: NoSwap in the kubelet's configuration and restart the kubelet")
		waitForMetric(t, ctx, metricsPort, "dra_swap_node_swap_offered_bytes 0\n")

		h.write("var/lib/kubelet/config.yaml", kubeletConfigWith("WorkloadControlledSwap"))
		waitForSlice(t, ctx, client, "nothing offered under WorkloadControlledSwap", withheldUnder("WorkloadControlledSwap"))
		waitForNodeEvent(t, ctx, client, publish.ReasonSwapBehaviorConflict, "kubelet-swap-behavior=WorkloadControlledSwap:NoSchedule, because the kubelet's memorySwap.swapBehavior is WorkloadControlledSwap (KEP-5359)")

		h.write("var/lib/kubelet/config.yaml", "memorySwap: [")
		waitForSlice(t, ctx, client, "nothing offered while the configuration cannot be read", withheldUnder("Unknown"))
		waitForNodeEvent(t, ctx, client, publish.ReasonSwapBehaviorConflict, "kubelet-swap-behavior=Unknown:NoSchedule")

		h.write("var/lib/kubelet/config.yaml", kubeletConfigWith("NoSwap"))
		waitForSlice(t, ctx, client, "2Gi offered under NoSwap again", offers(2*gi))
		waitForNodeEvent(t, ctx, client, publish.ReasonSwapBehaviorConflictCleared, "is NoSwap (it was Unknown)")
		waitForMetric(t, ctx, metricsPort, "dra_swap_node_swap_offered_bytes "+strconv.FormatFloat(float64(2*gi), 'g', -1, 64)+"\n")
	})

	// A short name: the plugin's registration socket path has a bound.
	t.Run("unsafe", func(t *testing.T) {
		unsafe := unsafeOfferSwapUnder(t, "--set", "kubeletPlugin.unsafeOfferSwapUnder={LimitedSwap}")
		if strings.Join(unsafe, ",") != "LimitedSwap" {
			t.Fatalf("the chart renders --unsafe-offer-swap-under=%s, want LimitedSwap", strings.Join(unsafe, ","))
		}
		ctx, client, h, _ := runPlugin(t, func(c *kubeletplugin.Config) { c.Policy.UnsafeOfferUnder = unsafe })
		h.write("var/lib/kubelet/config.yaml", kubeletConfigWith("LimitedSwap"))
		waitForSlice(t, ctx, client, "2Gi offered under LimitedSwap, as configured", func(d *resourceapi.Device) bool {
			return offers(2*gi)(d) && attr(d, "swapBehavior") == "LimitedSwap"
		})
		waitForNodeEvent(t, ctx, client, publish.ReasonSwapOfferedUnsafely,
			"The node offers 2Gi of swap to claims although the kubelet's memorySwap.swapBehavior is LimitedSwap")
		waitForNodeEvent(t, ctx, client, publish.ReasonSwapOfferedUnsafely, "OOM-killed below its claim")

		h.write("var/lib/kubelet/config.yaml", kubeletConfigWith("WorkloadControlledSwap"))
		waitForSlice(t, ctx, client, "nothing offered under WorkloadControlledSwap, not named", withheldUnder("WorkloadControlledSwap"))
	})

	// The schema takes the three behaviors only.
	for _, bad := range []string{"{NoSwap}", "{limitedswap}", "{LimitedSwap,LimitedSwap}"} {
		if _, err := runHelm(t, "template", "dra-driver-swap", chartDir, "--set", "kubeletPlugin.unsafeOfferSwapUnder="+bad); err == nil {
			t.Errorf("kubeletPlugin.unsafeOfferSwapUnder=%s was accepted", bad)
		}
	}
}

// TestPluginKubeletConfigReplaced: a kubelet configuration file replaced
// on the host after the plugin's container mounted it leaves the mount on
// the old, deleted file (link count 0). The plugin publishes the behavior
// as Unknown (no swap), tells the Node that the file was replaced and that
// it exits, and exits with discovery.ErrKubeletConfigReplaced, its Node
// events written first. A symbolic link to /proc/self/fd/N of an open,
// deleted file stands in for the mount (the plugin runs in the test's
// process).
func TestPluginKubeletConfigReplaced(t *testing.T) {
	t.Parallel()
	api := framework.StartAPIServer(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	createNode(t, ctx, api.Client)
	h := newHost(t)
	_, done := startPlugin(t, ctx, api.Client, h)
	waitForSlice(t, ctx, api.Client, "2Gi offered under NoSwap", offers(2*gi))

	old := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(old, []byte(kubeletConfigWith("NoSwap")), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(old)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(h.root, "var/lib/kubelet/config.yaml")
	if err := os.Remove(config); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), config); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-done:
		if !errors.Is(err, discovery.ErrKubeletConfigReplaced) {
			t.Fatalf("the plugin exited with %v, want ErrKubeletConfigReplaced", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the plugin did not exit on a replaced kubelet configuration")
	}
	// Written before the plugin exited: listed at once, no waiting.
	list, err := api.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.kind=Node,regarding.name=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	var replaced, conflict bool
	for _, e := range list.Items {
		seen = append(seen, e.Reason+": "+e.Note)
		replaced = replaced || e.Reason == publish.ReasonKubeletConfigUnreadable && strings.Contains(e.Note, "was replaced on the host") &&
			strings.Contains(e.Note, "The plugin exits, and its restarted container reads the new file")
		conflict = conflict || e.Reason == publish.ReasonSwapBehaviorConflict && strings.Contains(e.Note, "kubelet-swap-behavior=Unknown")
	}
	if !replaced || !conflict {
		t.Errorf("Node events when the plugin exited: %q; want a KubeletConfigUnreadable saying the file was replaced and a SwapBehaviorConflict for Unknown", seen)
	}
	waitForSlice(t, ctx, api.Client, "nothing offered under Unknown", withheldUnder("Unknown"))
}
