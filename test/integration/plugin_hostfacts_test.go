package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
)

// TestPluginWithoutKubeletConfig: a plugin pointed at a kubelet
// configuration that is not there starts, publishes swapBehavior Unknown,
// stores a KubeletConfigUnreadable event on the Node and exports
// dra_swap_kubelet_config_readable 0; once the file appears, the behavior
// is published, the Node is told, the metric is 1.
func TestPluginWithoutKubeletConfig(t *testing.T) {
	t.Parallel()
	const configPath = "/etc/kubernetes/kubelet.yaml"
	metricsPort := freePort(t)
	ctx, client, h, _ := runPlugin(t, func(c *kubeletplugin.Config) {
		c.Discovery.KubeletConfigPath = configPath
		c.MetricsAddress = fmt.Sprintf("127.0.0.1:%d", metricsPort)
	})
	behavior := func(want string) func(*resourceapi.Device) bool {
		return func(d *resourceapi.Device) bool {
			if d == nil {
				return false
			}
			a := d.Attributes[v1alpha1.AttrSwapBehavior]
			return a.StringValue != nil && *a.StringValue == want
		}
	}
	waitForSlice(t, ctx, client, "swapBehavior is Unknown", behavior(v1alpha1.SwapBehaviorUnknown))
	waitForNodeEvent(t, ctx, client, publish.ReasonKubeletConfigUnreadable, configPath)
	waitForMetric(t, ctx, metricsPort, "dra_swap_kubelet_config_readable 0\n")

	h.write(configPath, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemorySwap:\n  swapBehavior: LimitedSwap\n")
	waitForSlice(t, ctx, client, "swapBehavior is LimitedSwap", behavior(v1alpha1.SwapBehaviorLimitedSwap))
	waitForNodeEvent(t, ctx, client, publish.ReasonKubeletConfigRead, "swapBehavior LimitedSwap")
	waitForMetric(t, ctx, metricsPort, "dra_swap_kubelet_config_readable 1\n")
}

// TestPluginWithoutPSI: on a kernel with PSI off at boot (no
// /proc/pressure, as where CONFIG_PSI_DEFAULT_DISABLED=y kernels boot
// without psi=1) the plugin starts with its pressure taints on, publishes
// the node's swap, stores a PSIUnavailable event on the Node saying how to
// turn PSI on, and exports dra_swap_psi_available 0.
func TestPluginWithoutPSI(t *testing.T) {
	t.Parallel()
	metricsPort := freePort(t)
	ctx, client, h, _ := runPlugin(t, func(c *kubeletplugin.Config) {
		c.MetricsAddress = fmt.Sprintf("127.0.0.1:%d", metricsPort)
		c.Pressure, c.PressureInterval = pressure.DefaultConfig(), 100*time.Millisecond
		// Where the chart points it: the plugin's own procfs, here a
		// directory without PSI.
		c.NodePressureFile = filepath.Join(t.TempDir(), "proc", "pressure", "memory")
	})
	h.write("proc/meminfo", "MemTotal: 4000000 kB\nSwapTotal: 2097152 kB\nSwapFree: 2097152 kB\n")
	waitForSlice(t, ctx, client, "the node's 2Gi of swap offered", func(d *resourceapi.Device) bool {
		if d == nil {
			return false
		}
		q, ok := d.Capacity[v1alpha1.CapacitySwap]
		return ok && q.Value.Value() == 2*gi
	})
	waitForNodeEvent(t, ctx, client, kubeletplugin.ReasonPSIUnavailable, "psi=1")
	waitForMetric(t, ctx, metricsPort, "dra_swap_psi_available 0\n")
}

// TestPluginSwapFileMedium: a swap file the plugin cannot see (as in its
// pod) gets the medium of the device of the host mount that holds it,
// found in the host's mount table.
func TestPluginSwapFileMedium(t *testing.T) {
	t.Parallel()
	ctx, client, h, _ := runPlugin(t)
	h.write("proc/1/mountinfo", "20 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"+
		"30 20 0:25 / /run rw,nosuid,nodev shared:5 - tmpfs tmpfs rw\n")
	h.write("sys/dev/block/254:0/queue/rotational", "1\n")
	h.write("proc/swaps", swaps("/var/lib/swap\\040dir/swapfile-1 file\t2097152\t\t0\t\t-2\n"))
	waitForSlice(t, ctx, client, "medium is hdd", func(d *resourceapi.Device) bool {
		if d == nil {
			return false
		}
		a := d.Attributes[v1alpha1.AttrMedium]
		return a.StringValue != nil && *a.StringValue == string(discovery.MediumHDD)
	})
}

// waitForMetric waits until the plugin's metrics page holds line.
func waitForMetric(t *testing.T, ctx context.Context, port int, line string) {
	t.Helper()
	var page string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		page = scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		return strings.Contains(page, line), nil
	})
	if err != nil {
		t.Errorf("metrics never held %q: %v; last page:\n%s", line, err, page)
	}
}

// TestPluginHookOnANoexecMount: the hook directory is on a noexec mount,
// where the runtime could not run the hook for any container. The plugin
// installs the hook, finds that it does not run there, and, without
// stopping, publishes the device with capacity 0 and the no-usable-swap
// taint, stores a HookNotRunnable event on the Node naming the mount and
// exports dra_swap_hook_runs 0; once the mount allows execution, the
// swap is offered again and the Node told (root: it mounts a tmpfs).
func TestPluginHookOnANoexecMount(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("mounts a noexec tmpfs: needs root")
	}
	const hookPath = "/opt/dra-swap/bin/dra-swap-hook"
	src := filepath.Join(t.TempDir(), "dra-swap-hook")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho 'dra-swap-hook test'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	metricsPort := freePort(t)
	var hookDir string
	ctx, client, _, _ := runPlugin(t, func(c *kubeletplugin.Config) {
		c.HookPath, c.InstallHookFrom = hookPath, src
		c.MetricsAddress = fmt.Sprintf("127.0.0.1:%d", metricsPort)
		hookDir = filepath.Join(c.Discovery.Root, filepath.Dir(hookPath))
		if err := os.MkdirAll(hookDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", hookDir, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, "size=16m"); err != nil {
			t.Skipf("cannot mount a noexec tmpfs here: %v", err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(hookDir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", hookDir, err)
			}
		})
	})
	unusable := func(d *resourceapi.Device) bool {
		return capacityIs(0)(d) && attr(d, v1alpha1.AttrUsable) == "false" && len(d.Taints) == 1 && d.Taints[0].Key == v1alpha1.TaintNoUsableSwap
	}
	waitForSlice(t, ctx, client, "no swap offered, tainted "+v1alpha1.TaintNoUsableSwap, unusable)
	waitForNodeEvent(t, ctx, client, publish.ReasonHookNotRunnable, "noexec mount")
	waitForMetric(t, ctx, metricsPort, "dra_swap_hook_runs 0\n")

	if err := unix.Mount("", hookDir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		t.Fatalf("remount %s with exec: %v", hookDir, err)
	}
	waitForSlice(t, ctx, client, "2Gi offered", capacityIs(2*gi))
	waitForNodeEvent(t, ctx, client, publish.ReasonHookRuns, "offers swap again")
	waitForMetric(t, ctx, metricsPort, "dra_swap_hook_runs 1\n")
}
