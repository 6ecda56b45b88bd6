// Package e2e tests the driver on a real single-node cluster (kube-apiserver,
// kube-scheduler, kube-controller-manager, kubelet, containerd, runc and the
// kernel's cgroups) brought up by hack/cluster/up.sh. Run with `make e2e`.
//
// With E2E_CONFORMANCE=1 it is the conformance suite instead (`make
// e2e-conformance`, docs/conformance.md): against any cluster where the
// driver is installed, given KUBECONFIG, through the API and what its pods
// see of their own cgroups only. Each test says what more it needs when it
// loads the cluster (loadCluster's options); the conformance suite skips
// the tests that need the node or this repository's cluster.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/conformance"
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
	// nodeAccess: the suite reads the node's files (this repository's
	// cluster), which the conformance suite cannot.
	nodeAccess bool
	// nodeChecks is what the test declared with checksOnNode.
	nodeChecks []string
}

// requirement is what a test needs beyond the API and what its pods see
// of their own cgroups, an option of loadCluster; the conformance suite
// and its list (e2e.test -list-conformance, docs/conformance.md) read them.
// Their texts must be string literals: the list is read from the source.
type requirement = conformance.Requirement

// needsNode: the test reads or writes the node's files or runs programs
// there; the conformance suite skips it, saying why.
func needsNode(why string) requirement {
	return requirement{Kind: conformance.NodeAccess, Text: why}
}

// needsOurCluster: the test needs this repository's e2e cluster (its
// scripts, helm release, registry or second node) or changes the driver's
// installation; the conformance suite skips it, saying why.
func needsOurCluster(why string) requirement {
	return requirement{Kind: conformance.OurCluster, Text: why}
}

// checksOnNode: the test runs in the conformance suite, without the
// checks that read the node (what), which it makes under `if c.onNode(t)`.
func checksOnNode(what string) requirement {
	return requirement{Kind: conformance.NodeChecks, Text: what}
}

// guestTests are the tests that the emulated cgroup v2 node runs, each
// with what it tests there: what differs between the nodes, the cgroup
// version, the cgroup driver, the kernel or the container runtime (and its
// OCI runtime: runc, or crun under CRI-O). This host's node runs the whole
// suite; every other test takes the same path on both nodes, and would only
// add minutes of emulation to make test.
var guestTests = map[string]string{
	"TestSwapClaimPreventsOOM":        "a claim's memory.swap.max lets the container swap instead of being OOM-killed",
	"TestQoSClasses":                  "a claim under every QoS class, BestEffort without a memory limit (v2 only)",
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
	"TestKubeletSwapBehaviorChange":   "a kubelet turned to LimitedSwap and back (the kubelet refuses LimitedSwap on v1); helm test names it",
	"TestHelmTest":                    "helm test's probes read a v2 cgroup's swap limit (and it checks both nodes)",
	"TestOffload":                     "the offload loop: a v2 container's memory.pressure and memory.reclaim",
	"TestExamples":                    "the examples that need cgroup v2 (swap-config, offload, compressed-only); the others run on this host's node only",
}

// loadCluster connects a test to the cluster: this repository's (the
// env file of hack/cluster/up.sh), or in the conformance suite the one of
// KUBECONFIG, where a test with a requirement that needs more is skipped.
// A test without a requirement needs only the API and what its pods see of
// their own cgroups; with E2E_CONFORMANCE_RAN=1 (hack/e2e-cluster.sh, after
// the conformance suite ran on the same node) it is skipped here.
func loadCluster(t *testing.T, reqs ...requirement) *env {
	t.Helper()
	if top, _, _ := strings.Cut(t.Name(), "/"); cluster.Emulated() && guestTests[top] == "" {
		t.Skipf("runs on this host's node only: nothing it tests differs on the emulated v2 node (guestTests), where it would take minutes")
	}
	var checks []string
	for _, r := range reqs {
		if why := r.Skip(); why != "" && cluster.Portable() {
			t.Skip("conformance suite: " + why)
		}
		if r.Kind == conformance.NodeChecks {
			checks = append(checks, r.Text)
		}
	}
	wd, _ := os.Getwd()
	repoRoot := filepath.Join(wd, "..", "..")
	if cluster.Portable() {
		c, err := cluster.LoadPortable(context.Background())
		if err != nil {
			t.Fatalf("conformance suite: %v", err)
		}
		t.Logf("conformance suite: node %s, DeviceClass %s, the driver in namespace %s (image %s), workload image %s",
			c.Chosen, c.DeviceClass, c.DriverNamespace, c.DriverImage, c.WorkloadImage())
		return &env{Cluster: c, client: c.Client, node: c.Node, repoRoot: repoRoot, nodeChecks: checks}
	}
	if len(reqs) == 0 && os.Getenv("E2E_CONFORMANCE_RAN") == "1" {
		t.Skip("ran in the conformance suite's pass on this node (E2E_CONFORMANCE_RAN=1)")
	}
	c, err := cluster.Load("")
	if err != nil {
		t.Fatal(err)
	}
	return &env{Cluster: c, client: c.Client, dir: c.Dir, node: c.Node, repoRoot: repoRoot, nodeAccess: true, nodeChecks: checks}
}

// onNode reports whether the test may make the checks it declared with
// checksOnNode: not in the conformance suite, which leaves them out.
func (c *env) onNode(t *testing.T) bool {
	t.Helper()
	if len(c.nodeChecks) == 0 {
		t.Fatal("onNode in a test that declares no checksOnNode(what) when it loads the cluster: the conformance list would not say what it leaves out")
	}
	return c.nodeAccess
}

// requireNode fails a test that reads the node (what) where the suite
// cannot: in the conformance suite, a test must declare it (needsNode, or
// checksOnNode and `if c.onNode(t)`).
func (c *env) requireNode(t *testing.T, what string) {
	t.Helper()
	if !c.nodeAccess {
		t.Fatalf("%s reads %s on the node, which the conformance suite cannot: load the cluster with needsNode(why), "+
			"or declare checksOnNode(what) and read it under `if c.onNode(t)`", t.Name(), what)
	}
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
	if c.Portable {
		if err := c.CopyPullSecrets(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
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
	if !c.nodeAccess {
		t.Log("diagnostics:\n" + b.String())
		return
	}
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
// from class (the suite's DeviceClass, dra.swap, when empty).
func (c *env) swapTemplate(t *testing.T, ns, name, class string, bytes int64) {
	t.Helper()
	if class == "" {
		class = c.DeviceClass
	}
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
	var pull string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		if pull = imagePullFailure(p); pull != "" && c.Portable {
			return true, nil
		}
		return cond(p), nil
	})
	if err == nil && pull != "" && c.Portable {
		t.Fatalf("pod %s/%s cannot pull its image: %s. The conformance suite's workload image is %s (%s); "+
			"push it there with `make images push REGISTRY=...` or name another", ns, name, pull, c.WorkloadImage(), cluster.EnvWorkloadImage)
	}
	if err != nil {
		phase := "<none>"
		if last != nil {
			phase = string(last.Status.Phase)
		}
		t.Fatalf("pod %s/%s: waiting for %s: %v (phase %s)", ns, name, what, err, phase)
	}
	return last
}

// imagePullFailure says why a container of the pod cannot pull its image
// ("" while none fails to).
func imagePullFailure(p *corev1.Pod) string {
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := s.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff" || w.Reason == "InvalidImageName") {
			return fmt.Sprintf("container %s: %s: %s", s.Name, w.Reason, w.Message)
		}
	}
	return ""
}

var finished = cluster.Finished

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

var terminatedReason = cluster.TerminatedReason

type result = cluster.Result

// report waits for a container's START or RESULT line.
func (c *env) report(t *testing.T, p *corev1.Pod, container, kind string) result {
	t.Helper()
	var r result
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, cluster.Scaled(30*time.Second), true, func(ctx context.Context) (bool, error) {
		var ok bool
		var err error
		if c.Portable {
			r, ok, err = c.LogReport(ctx, p, container, kind)
		} else {
			r, ok, err = c.Report(p, container, kind)
		}
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
	c.requireNode(t, "hack/cluster/"+name)
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

// needSwap: the test is about to claim bytes of swap on the node at once.
// In the conformance suite, on a cluster whose sizes it does not know, it
// waits (a minute at most) until the node's device has that much that no
// claim holds (an earlier test's claims go with its namespace), else skips
// the test, saying so. On this repository's cluster the sizes are known.
func (c *env) needSwap(t *testing.T, bytes int64) {
	t.Helper()
	if !c.Portable {
		return
	}
	var free int64
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, cluster.Scaled(time.Minute), true, func(ctx context.Context) (bool, error) {
		var err error
		free, err = cluster.Unallocated(ctx, c.client, c.node)
		return err == nil && free >= bytes, err
	})
	if err != nil {
		t.Skipf("conformance suite: the test claims %s of swap at once; node %s has %s that no claim holds (%v)",
			resource.NewQuantity(bytes, resource.BinarySI), c.node, resource.NewQuantity(free, resource.BinarySI), err)
	}
}

// defaultRequest is the swap a claim gets from the node's device when its
// request names none (an extended-resource request): the device's
// request policy, as the plugin publishes it (its --default-request,
// capped at the offer).
func (c *env) defaultRequest(t *testing.T) int64 {
	t.Helper()
	dev := c.swapDevice(t)
	if dev == nil {
		t.Fatal("the node publishes no swap device")
	}
	policy := dev.Capacity["swap"].RequestPolicy
	if policy == nil || policy.Default == nil {
		t.Fatalf("the node's swap device has no default request: %+v", dev.Capacity["swap"])
	}
	return policy.Default.Value()
}
