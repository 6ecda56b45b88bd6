// Package e2e tests the driver on a real single-node cluster (kube-apiserver,
// kube-scheduler, kube-controller-manager, kubelet, containerd, runc and the
// kernel's cgroups) brought up by hack/cluster/up.sh. Run with `make e2e`.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

const mi = int64(1) << 20

// env is the running local cluster as the tests use it.
type env struct {
	*cluster.Cluster
	client   kubernetes.Interface
	dir      string
	node     string
	repoRoot string
	cgroupV  int // see cgroupVersion
}

// guestTests are the tests that the emulated cgroup v2 node runs, each
// with what it tests there: what differs between the nodes, the cgroup
// version, the cgroup driver, the kernel or the container runtime (and its
// OCI runtime: runc, or crun under CRI-O). This host's node runs the whole
// suite; every other test takes the same path on both nodes, and would only
// add minutes of emulation to make test.
var guestTests = map[string]string{
	"TestSwapClaimPreventsOOM":        "a claim's memory.swap.max lets the container swap instead of being OOM-killed",
	"TestQoSClasses":                  "the kubelet's own swap limits (LimitedSwap here) under every QoS class",
	"TestContainerLimits":             "each container's own cgroup gets its claims' sum",
	"TestPodSwapBudget":               "the pod's budget on the pod's systemd slice (and past crun's scope)",
	"TestSwapConfigKnobs":             "the v2 knobs memory.swap.high and memory.zswap.max",
	"TestAttributesMatchHost":         "the v2 node's and its kernel's attributes (swapPeak, zswapWriteback)",
	"TestUnprepareCleansUp":           "the runtime runs the hook's poststop",
	"TestLimitsHoldAfterResize":       "the runtime's container update, through NRI, on v2",
	"TestPodLevelResize":              "systemd writes the pod slice's memory.swap.max when the kubelet updates the pod",
	"TestLimitRestoredAfterHandWrite": "the verifier reads and writes v2 files",
	"TestDaemonReload":                "the systemd cgroup driver's scopes and slices",
	"TestKubeletAndRuntimeRestart":    "the runtime's restart, as a systemd unit, and NRI's reconnection",
	"TestWithoutNRI":                  "the runtime without NRI",
	"TestPressureTaints":              "the kubepods cgroup's PSI (v2 only; its swap-full part runs on this host's node only)",
	"TestOffload":                     "the offload loop: a v2 container's memory.pressure and memory.reclaim",
	"TestExamples":                    "the examples that need cgroup v2 (swap-config, offload, compressed-only); the others run on this host's node only",
}

func loadCluster(t *testing.T) *env {
	t.Helper()
	if top, _, _ := strings.Cut(t.Name(), "/"); cluster.Emulated() && guestTests[top] == "" {
		t.Skipf("runs on this host's node only: nothing it tests differs on the emulated v2 node (guestTests), where it would take minutes")
	}
	c, err := cluster.Load("")
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	return &env{Cluster: c, client: c.Client, dir: c.Dir, node: c.Node, repoRoot: filepath.Join(wd, "..", "..")}
}

// runtime is the node's container runtime as the cluster scripts name it
// (its component for restart.sh, its log): containerd or crio.
func (c *env) runtime() string {
	if r := c.Env["CONTAINER_RUNTIME"]; r != "" {
		return r
	}
	return "containerd"
}

// namespace creates a namespace for one test and deletes it afterwards,
// dumping diagnostics first when the test failed.
func (c *env) namespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := "e2e-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-") + "-" + rand.String(4)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pods need the namespace's default ServiceAccount, made by the controller-manager.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, cluster.Scaled(time.Minute), true, func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no default ServiceAccount in %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.diagnose(t, name)
		}
		c.deleteNamespace(t, name)
	})
	return name
}

func (c *env) deleteNamespace(t *testing.T, ns string) {
	ctx := context.Background()
	_ = c.client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	if err := c.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Logf("delete namespace %s: %v", ns, err)
	}
}

// diagnose prints what a person needs to see why a test failed: pod
// phases and events, claim status, the driver's pods described with their
// logs, and the kubelet's, scheduler's and containerd's logs.
func (c *env) diagnose(t *testing.T, ns string) {
	ctx := context.Background()
	var b strings.Builder
	pods, _ := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: phase %s, conditions %v\n", p.Name, p.Status.Phase, conditions(p.Status.Conditions))
		for _, s := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  container %s: %s\n", s.Name, containerState(s))
		}
	}
	events, _ := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	for _, e := range events.Items {
		fmt.Fprintf(&b, "event %s/%s %s %s: %s\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
	}
	claims, _ := c.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	for _, cl := range claims.Items {
		status, _ := json.Marshal(cl.Status)
		fmt.Fprintf(&b, "claim %s: %s\n", cl.Name, status)
	}
	b.WriteString(c.driverDiagnostics())
	logs := filepath.Join(c.dir, "logs")
	// The scheduler runs with the control plane, which may be elsewhere
	// (the v2 leg's is on the host; the guest reads its logs over 9p).
	controlPlaneLogs := c.Env["CONTROL_PLANE_LOGS"]
	if controlPlaneLogs == "" {
		controlPlaneLogs = logs
	}
	for _, f := range []string{
		filepath.Join(logs, "kubelet.log"),
		filepath.Join(controlPlaneLogs, "kube-scheduler.log"),
		filepath.Join(logs, c.runtime()+".log"),
	} {
		fmt.Fprintf(&b, "--- last lines of %s\n%s\n", filepath.Base(f), tail(f, 40))
	}
	// A webhook the API server could not call (failurePolicy Ignore)
	// leaves no other trace.
	fmt.Fprintf(&b, "--- last failed webhook calls in kube-apiserver.log\n%s\n", grepTail(filepath.Join(controlPlaneLogs, "kube-apiserver.log"), "calling webhook", 10))
	t.Log("diagnostics:\n" + b.String())
}

func conditions(cs []corev1.PodCondition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, ", ")
}

func containerState(s corev1.ContainerStatus) string {
	switch {
	case s.State.Terminated != nil:
		return fmt.Sprintf("terminated %s exit %d: %s", s.State.Terminated.Reason, s.State.Terminated.ExitCode, s.State.Terminated.Message)
	case s.State.Waiting != nil:
		return fmt.Sprintf("waiting %s: %s", s.State.Waiting.Reason, s.State.Waiting.Message)
	case s.State.Running != nil:
		return "running"
	}
	return "unknown"
}

// tail returns the last n lines of path.
func tail(path string, n int) string { return grepTail(path, "", n) }

// grepTail returns the last n lines of path that contain s (all lines
// when s is empty).
func grepTail(path, s string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if strings.Contains(l, s) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// swapTemplate creates a ResourceClaimTemplate asking for bytes of swap
// from class (dra.swap when empty).
func (c *env) swapTemplate(t *testing.T, ns, name, class string, bytes int64) {
	t.Helper()
	if _, err := c.client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), cluster.SwapTemplate(ns, name, class, bytes), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

type ctr = cluster.Container

// runningClaimPod starts a pod whose container "worker" holds the claim of
// template for half an hour, waits until it runs and checks that the
// container's cgroup on the node carries want bytes of swap.
func (c *env) runningClaimPod(t *testing.T, ns, name, template string, want int64) *corev1.Pod {
	t.Helper()
	p := c.createPod(t, c.WorkloadPod(ns, name, map[string]string{"swap": template},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 1800}))
	p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
	if got := c.hostSwapLimit(t, p, "worker"); got != want {
		t.Fatalf("pod %s: host cgroup swap limit %d, want %d", name, got, want)
	}
	return p
}

func (c *env) createPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// waitPod waits until cond holds for the pod and returns it.
func (c *env) waitPod(t *testing.T, ns, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		phase := "<none>"
		if last != nil {
			phase = string(last.Status.Phase)
		}
		t.Fatalf("pod %s/%s: waiting for %s: %v (phase %s)", ns, name, what, err, phase)
	}
	return last
}

var finished = cluster.Finished

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

var terminatedReason = cluster.TerminatedReason

type result = cluster.Result

// report waits for a container's START or RESULT line.
func (c *env) report(t *testing.T, p *corev1.Pod, container, kind string) result {
	t.Helper()
	var r result
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, cluster.Scaled(30*time.Second), true, func(context.Context) (bool, error) {
		var ok bool
		var err error
		r, ok, err = c.Report(p, container, kind)
		return ok, err
	})
	if err != nil {
		t.Fatalf("pod %s container %s: no %s line in its log: %v", p.Name, container, kind, err)
	}
	return r
}

// script runs one of the cluster scripts (hack/cluster/NAME args...).
func (c *env) script(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.repoRoot, "hack", "cluster", name), args...)
	cmd.Env = append(os.Environ(), "CLUSTER_DIR="+c.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/cluster/%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// offer returns the swap capacity the node currently publishes.
func (c *env) offer(t *testing.T) int64 {
	t.Helper()
	dev := c.swapDevice(t)
	if dev == nil {
		t.Fatal("the node publishes no swap device")
	}
	q := dev.Capacity["swap"].Value
	return q.Value()
}

// swapDevice is the swap device this suite's node publishes, or nil.
func (c *env) swapDevice(t *testing.T) *resourceapi.Device {
	t.Helper()
	return c.swapDeviceOn(t, c.node)
}

// waitOffer waits until the published offer satisfies cond.
func (c *env) waitOffer(t *testing.T, what string, cond func(int64) bool) int64 {
	t.Helper()
	var got int64
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(60*time.Second), true, func(context.Context) (bool, error) {
		if dev := c.swapDevice(t); dev != nil {
			q := dev.Capacity["swap"].Value
			got = q.Value()
			return cond(got), nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for the offer to %s: %v (last %d)", what, err, got)
	}
	return got
}
