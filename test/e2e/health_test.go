package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// TestDeviceHealth: the kubelet shows the swap device's health, as the
// plugin reports it (KEP-4680's DRAResourceHealth), in the status of a
// running pod that holds a claim on it: Healthy; Unhealthy with the reason
// when the node's swap is turned off; Unhealthy as overcommitted when less
// swap comes back than the claim holds; Healthy again once the node's own
// swap is back.
func TestDeviceHealth(t *testing.T) {
	c := loadCluster(t, needsNode("turns the node's swap areas off and on"))
	ns := c.namespace(t)
	const area, extra = "swapfile-1", "e2e-health"
	areaMiB := c.clusterSwapMiB(t, area)
	offer := c.offer(t)

	// The claim holds the node's whole offer, so that any swap taken away
	// overcommits it.
	c.swapTemplate(t, ns, "all", "", offer)
	p := c.WorkloadPod(ns, "holder", map[string]string{"swap": "all"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 1800})
	p.Spec.Containers[0].Resources.Claims[0].Request = "swap"
	p = c.createPod(t, p)
	p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
	if got := c.hostSwapLimit(t, p, "worker"); got != offer {
		t.Fatalf("host cgroup swap limit %d, want the claim's %d", got, offer)
	}
	// KEP-4680: the container's resource is named after its claim and request.
	const resource = "claim:swap/swap"
	c.waitHealth(t, p, resource, corev1.ResourceHealthStatusHealthy, "")

	// Swap off: the plugin's reason, or, if the host has swap of its own
	// beside the cluster's, the overcommit.
	c.script(t, "swap.sh", "remove", area)
	t.Cleanup(func() {
		if _, on := swapAreaKiB(t, filepath.Join(c.dir, "swap", area)); !on {
			c.script(t, "swap.sh", "add", area, fmt.Sprint(areaMiB))
		}
		c.script(t, "swap.sh", "remove", extra)
	})
	overcommitted := "swap overcommitted (held-"
	if areas, err := hostSwapAreas(); err != nil {
		t.Fatal(err)
	} else if len(areas) == 0 {
		c.waitHealth(t, p, resource, corev1.ResourceHealthStatusUnhealthy, "no active swap device in /proc/swaps (swap is off)")
	} else {
		t.Logf("the host has swap beside the cluster's (%v): the device is overcommitted, not off", areas)
		c.waitHealth(t, p, resource, corev1.ResourceHealthStatusUnhealthy, overcommitted)
	}

	// Less swap than the claim holds: overcommitted.
	c.script(t, "swap.sh", "add", extra, "256")
	c.waitHealth(t, p, resource, corev1.ResourceHealthStatusUnhealthy, overcommitted)

	// The node's swap back: healthy, and the offer as before for the next test.
	c.script(t, "swap.sh", "add", area, fmt.Sprint(areaMiB))
	c.waitHealth(t, p, resource, corev1.ResourceHealthStatusHealthy, "")
	c.script(t, "swap.sh", "remove", extra)
	c.waitOffer(t, "return to its size before the test", func(o int64) bool { return o == offer })
	c.waitHealth(t, p, resource, corev1.ResourceHealthStatusHealthy, "")
}

// clusterSwapMiB is the size of one of the cluster's swap files (up.sh's
// SWAP_SIZE_MIB for swapfile-1), which must be active.
func (c *env) clusterSwapMiB(t *testing.T, name string) int64 {
	t.Helper()
	path := filepath.Join(c.dir, "swap", name)
	if _, on := swapAreaKiB(t, path); !on {
		t.Fatalf("the cluster's swap file %s is not in /proc/swaps", path)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() <= 0 || st.Size()%mi != 0 {
		t.Fatalf("swap file %s has %d bytes, not a whole number of MiB (swap.sh add makes MiB)", path, st.Size())
	}
	return st.Size() / mi
}

// swapAreaKiB reports whether path is an active swap area in /proc/swaps,
// with its size.
func swapAreaKiB(t *testing.T, path string) (int64, bool) {
	t.Helper()
	areas, err := hostSwapAreas()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range areas {
		if a.path == path {
			return a.sizeKiB, true
		}
	}
	return 0, false
}

// waitHealth waits until the kubelet shows the pod's container "worker"'s
// resource (claim:<claim>/<request>) on exactly one device, the claim's
// dra.swap CDI device, with health want and a message starting with
// message ("": none).
func (c *env) waitHealth(t *testing.T, p *corev1.Pod, resource string, want corev1.ResourceHealthStatus, message string) {
	t.Helper()
	device := corev1.ResourceID(cdi.DeviceID(c.claimUID(t, p), 0))
	last := "no status"
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(90*time.Second), true, func(ctx context.Context) (bool, error) {
		p, err := c.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		health, ok := resourceHealth(p, "worker", corev1.ResourceName(resource))
		if !ok {
			last = fmt.Sprintf("no single device for %s in the container statuses %+v", resource, p.Status.ContainerStatuses)
			return false, nil
		}
		got := ""
		if health.Message != nil {
			got = *health.Message
		}
		last = fmt.Sprintf("%s %s %q", health.ResourceID, health.Health, got)
		return health.ResourceID == device && health.Health == want &&
			((message == "" && got == "") || (message != "" && strings.HasPrefix(got, message))), nil
	})
	if err != nil {
		t.Fatalf("pod %s: waiting for %s on %s %s with a message starting %q: %v; last seen: %s", p.Name, resource, device, want, message, err, last)
	}
	t.Logf("%s: %s", resource, last)
}

// resourceHealth is the health the kubelet shows for a container's
// resource, if it shows it for exactly one device.
func resourceHealth(p *corev1.Pod, container string, resource corev1.ResourceName) (corev1.ResourceHealth, bool) {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name != container {
			continue
		}
		for _, r := range s.AllocatedResourcesStatus {
			if r.Name == resource && len(r.Resources) == 1 {
				return r.Resources[0], true
			}
		}
	}
	return corev1.ResourceHealth{}, false
}
