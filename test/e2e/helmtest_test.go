package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/installcheck"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// helmTestPod is the chart's test pod (templates/tests/helm-test.yaml).
const helmTestPod = driverRelease + "-test"

// helmTest runs `helm test --logs` on the release as an admin does after
// helm install and returns its output (with the test pod's log, a line
// per node) and whether it failed. It deletes a failed test pod
// afterwards (helm keeps it for kubectl logs until the next run), and
// checks that no probe is left either way.
func (c *env) helmTest(t *testing.T) (string, bool) {
	t.Helper()
	bin := filepath.Join(c.repoRoot, "_output", "bin", "helm")
	cmd := exec.Command(bin, "test", driverRelease, "--namespace", driverNamespace, "--logs", "--timeout", cluster.Scaled(5*time.Minute).String())
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Env["KUBECONFIG"])
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("helm test took %v (exit: %v):\n%s", time.Since(start).Round(100*time.Millisecond), err, out)
	if exit := (*exec.ExitError)(nil); err != nil && !errors.As(err, &exit) {
		t.Fatalf("helm test did not run: %v", err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		err := c.client.CoreV1().Pods(driverNamespace).Delete(ctx, helmTestPod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete the test pod: %v", err)
		}
	})
	probes, lerr := c.client.CoreV1().Pods(driverNamespace).List(ctx, metav1.ListOptions{LabelSelector: installcheck.LabelComponent + "=" + installcheck.ProbeComponent})
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, p := range probes.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("probe %s (node %s) is left after helm test", p.Name, p.Annotations[installcheck.AnnotationNode])
		}
	}
	return string(out), err != nil
}

// TestHelmTest: `helm test` after helm install passes on the node's
// configuration, and prints the node's PASS line with what its probes
// saw. In the guest phase it checks both nodes (the host's is quick).
func TestHelmTest(t *testing.T) {
	c := loadCluster(t, needsOurCluster("runs helm test on this repository's release of the chart"))
	out, failed := c.helmTest(t)
	if failed {
		t.Fatalf("helm test failed on a working cluster")
	}
	want := "\nPASS " + c.node + ": with a 1Mi claim: DRA_SWAP_LIMIT_BYTES=1048576 and cgroup v"
	if !strings.Contains(out, want) || !strings.Contains(out, "without a claim: no swap") {
		t.Errorf("helm test's output lacks %q and the probe without a claim", want)
	}
}

// TestHelmTestHookMissing: with the hook binary gone from the node's
// hookDir (a runtime whose hook directory is missing, or a plugin that
// never installed it), helm test fails and names the cause: the runtime
// could not run the hook, whose binary is missing, and how to reinstall
// it. The hook is put back afterwards (the plugin installs it only at
// start-up).
func TestHelmTestHookMissing(t *testing.T) {
	c := loadCluster(t, needsNode("removes the hook binary from the node's hookDir"))
	hook := filepath.Join(c.dir, "bin", "dra-swap-hook")
	moved := hook + ".moved-by-e2e"
	if err := os.Rename(hook, moved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Rename(moved, hook); err != nil {
			t.Errorf("put the hook back: %v", err)
		}
	})
	out, failed := c.helmTest(t)
	if !failed {
		t.Fatalf("helm test passed without the hook binary on the node")
	}
	for _, want := range []string{
		"\nFAIL " + c.node + ": hook not run: the runtime could not run the driver's OCI hook for the probe with a swap claim: the hook binary is missing on the node",
		"dra-swap-hook: no such file or directory",
		"restart its pod on the node (kubectl -n " + driverNamespace + " delete pod " + driverRelease + "-kubeletplugin-",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("helm test's output lacks %q", want)
		}
	}
}

// helmTestFailsUnderLimitedSwap: on a node whose kubelet was turned to
// LimitedSwap at since (TestKubeletSwapBehaviorChange), helm test fails
// and says why: the kubelet's swapBehavior, as the slice says and as the
// probe without a claim, which may swap, shows. It waits first for the
// slice the plugin makes after the restarted kubelet wiped the node's
// slices (some 30 s later), which a test run in between would not find.
func (c *env) helmTestFailsUnderLimitedSwap(t *testing.T, since time.Time) {
	t.Helper()
	start := time.Now()
	c.waitSwapDevice(t, "a slice made after the kubelet's start-up wipe", func(*resourceapi.Device) bool {
		s := c.swapSlice(t)
		return s != nil && s.CreationTimestamp.After(since.Truncate(time.Second))
	})
	out, failed := c.helmTest(t)
	if !failed {
		t.Fatalf("helm test passed on a node whose kubelet runs LimitedSwap")
	}
	for _, want := range []string{
		"\nFAIL " + c.node + ": kubelet swapBehavior not NoSwap: the kubelet runs swapBehavior LimitedSwap, not NoSwap (",
		"the probe without a claim may swap ",
		"set memorySwap.swapBehavior: NoSwap in the kubelet's configuration and restart the kubelet",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("helm test's output lacks %q", want)
		}
	}
	t.Logf("helm test under LimitedSwap took %v with the wait for the slice", time.Since(start).Round(100*time.Millisecond))
}
