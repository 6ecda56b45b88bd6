package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// Timeouts for a real but small node, scaled by E2E_TIMEOUT_SCALE (the
// cgroup v2 leg runs under software emulation).
var (
	podTimeout     = cluster.Scaled(3 * time.Minute)
	pendingTimeout = cluster.Scaled(30 * time.Second)
)

// TestSwapClaimPreventsOOM is KEP-5359's core story: with a 128Mi memory
// limit, a container that allocates 200MiB completes with a 300Mi swap
// claim and is OOM-killed without one.
func TestSwapClaimPreventsOOM(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	c.swapTemplate(t, ns, "swap-300", "", 300*mi)

	with := c.createPod(t, c.WorkloadPod(ns, "with-claim", map[string]string{"swap": "swap-300"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 200, MemLimit: "128Mi"}))
	without := c.createPod(t, c.WorkloadPod(ns, "without-claim", nil,
		ctr{Name: "worker", AllocMiB: 200, MemLimit: "128Mi"}))

	with = c.waitPod(t, ns, with.Name, "completion", podTimeout, finished)
	if with.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod with a swap claim: phase %s, reason %s", with.Status.Phase, terminatedReason(with, "worker"))
	}
	r := c.report(t, with, "worker", "RESULT")
	assertSwapLimit(t, r, 300*mi)
	if r.SwapUsageBytes <= 0 {
		t.Errorf("the container used no swap (usage %d) although 200MiB exceeded its 128Mi memory limit", r.SwapUsageBytes)
	}
	t.Logf("with claim: swap limit %d, swap used %d", r.SwapLimitBytes, r.SwapUsageBytes)
	c.waitEvent(t, with, corev1.EventTypeNormal, "SwapApplied", `Swap limit 300Mi applied to container "worker" on node "`+c.node+`"`)

	// A pod without a claim gets no swap from the kubelet (NoSwap; and
	// under LimitedSwap too, as its memory request equals its limit): v2
	// memory.swap.max is 0 (a kubelet misplaced in the root cgroup would
	// leave "max" and fail this), v1 memsw equals the memory limit.
	assertNoSwap(t, c.report(t, without, "worker", "START"))
	without = c.waitPod(t, ns, without.Name, "completion", podTimeout, finished)
	if !oomKilled(without, "worker") {
		t.Fatalf("pod without a claim: phase %s, reason %q; want Failed, OOMKilled", without.Status.Phase, terminatedReason(without, "worker"))
	}
}

// oomKilled: the container was killed by the kernel's OOM killer. The
// runtime says OOMKilled when the kill happened in the container's own
// cgroup; on cgroup v2 the pod's cgroup, whose memory.max is the same sum
// of limits, may reach it first, and the runtime then sees only SIGKILL
// (exit 137, reason Error).
func oomKilled(p *corev1.Pod, container string) bool {
	t := cluster.TerminatedState(p, container)
	return p.Status.Phase == corev1.PodFailed && t != nil && (t.Reason == "OOMKilled" || t.Reason == "Error" && t.ExitCode == 137)
}

// assertNoSwap checks that a container without a claim saw a zero swap
// limit in its own cgroup files, read as text so that a missing or
// unreadable file cannot pass as 0: v2 memory.swap.max is "0", v1
// memory.memsw.limit_in_bytes equals memory.limit_in_bytes.
func assertNoSwap(t *testing.T, r result) {
	t.Helper()
	switch r.CgroupVersion {
	case 2:
		if got := r.Files["memory.swap.max"]; got != "0" {
			t.Errorf("pod without a claim: memory.swap.max %q, want \"0\" (files %v)", got, r.Files)
		} else {
			t.Logf("without claim: memory.swap.max %s", got)
		}
	case 1:
		mem, memsw := r.Files["memory.limit_in_bytes"], r.Files["memory.memsw.limit_in_bytes"]
		if mem == "" || memsw != mem {
			t.Errorf("pod without a claim: memory.memsw.limit_in_bytes %q, memory.limit_in_bytes %q, want equal (files %v)", memsw, mem, r.Files)
		} else {
			t.Logf("without claim: memory.memsw.limit_in_bytes = memory.limit_in_bytes = %s", mem)
		}
	default:
		t.Errorf("pod without a claim: unknown cgroup version %d", r.CgroupVersion)
	}
}

// assertSwapLimit checks the limit the container saw in its own cgroup
// (v1: memsw − memory limit; v2: memory.swap.max) and its environment.
func assertSwapLimit(t *testing.T, r result, want int64) {
	t.Helper()
	if r.SwapLimitBytes != want {
		t.Errorf("cgroup swap limit %d (cgroup v%d), want %d", r.SwapLimitBytes, r.CgroupVersion, want)
	}
	if r.EnvSwapLimit != strconv.FormatInt(want, 10) {
		t.Errorf("DRA_SWAP_LIMIT_BYTES=%q, want %d", r.EnvSwapLimit, want)
	}
}

// TestQoSClasses gives swap to a Guaranteed pod, which the kubelet never
// swaps on its own, and checks what a container without a memory limit gets.
func TestQoSClasses(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	c.swapTemplate(t, ns, "swap-300", "", 300*mi)

	guaranteed := c.createPod(t, c.WorkloadPod(ns, "guaranteed", map[string]string{"swap": "swap-300"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 200, MemLimit: "128Mi", CPU: "100m"}))
	guaranteed = c.waitPod(t, ns, guaranteed.Name, "completion", podTimeout, finished)
	if guaranteed.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Fatalf("QoS class %s, want Guaranteed", guaranteed.Status.QOSClass)
	}
	if guaranteed.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("Guaranteed pod: phase %s, reason %s", guaranteed.Status.Phase, terminatedReason(guaranteed, "worker"))
	}
	assertSwapLimit(t, c.report(t, guaranteed, "worker", "RESULT"), 300*mi)

	// BestEffort: no memory limit at all.
	bestEffort := c.createPod(t, c.WorkloadPod(ns, "best-effort", map[string]string{"swap": "swap-300"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 16}))
	if c.cgroupVersion(t) == 2 {
		bestEffort = c.waitPod(t, ns, bestEffort.Name, "completion", podTimeout, finished)
		if bestEffort.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("BestEffort pod: phase %s", bestEffort.Status.Phase)
		}
		assertSwapLimit(t, c.report(t, bestEffort, "worker", "RESULT"), 300*mi)
		return
	}
	// cgroup v1 bounds memory and swap together: without a memory limit
	// the hook must refuse, visibly, naming the container.
	bestEffort = c.waitPod(t, ns, bestEffort.Name, "a start failure", podTimeout, func(p *corev1.Pod) bool {
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Terminated != nil || (s.State.Waiting != nil && s.State.Waiting.Reason != "ContainerCreating") {
				return true
			}
		}
		return false
	})
	msg := c.podMessages(t, bestEffort)
	if !strings.Contains(msg, "has no memory limit") || !strings.Contains(msg, "best-effort") {
		t.Errorf("BestEffort pod on cgroup v1: want a failure naming the container and the missing memory limit, got:\n%s", msg)
	}
	c.waitEvent(t, bestEffort, corev1.EventTypeWarning, "SwapNotApplied", "has no memory limit")
}

// waitEvent waits for the driver's event on the pod (events.k8s.io,
// which the core Events API also shows).
func (c *env) waitEvent(t *testing.T, p *corev1.Pod, eventType, reason, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, cluster.Scaled(30*time.Second), true, func(ctx context.Context) (bool, error) {
		list, err := c.client.EventsV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + p.Name})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
			if e.Type == eventType && e.Reason == reason && strings.Contains(e.Note, text) && e.Regarding.UID == p.UID {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("pod %s: no %s %s event containing %q; events: %q", p.Name, eventType, reason, text, seen)
	}
}

// podMessages collects the pod's container state messages and events.
func (c *env) podMessages(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	var b strings.Builder
	for _, s := range p.Status.ContainerStatuses {
		b.WriteString(containerState(s) + "\n")
	}
	events, err := c.client.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		b.WriteString(e.Reason + ": " + e.Message + "\n")
	}
	return b.String()
}

// cgroupVersion is the node's, as its swap device says; remembered, so
// that a test can still read cgroup files while the driver is uninstalled.
func (c *env) cgroupVersion(t *testing.T) int {
	t.Helper()
	if c.cgroupV != 0 {
		return c.cgroupV
	}
	dev := c.swapDevice(t)
	if dev == nil || dev.Attributes["cgroupVersion"].IntValue == nil {
		t.Fatal("the node publishes no swap device with a cgroupVersion")
	}
	c.cgroupV = int(*dev.Attributes["cgroupVersion"].IntValue)
	return c.cgroupV
}

// TestContainerLimits checks that each container gets exactly the claims
// it references: different claims, none, and two claims adding up.
func TestContainerLimits(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	c.swapTemplate(t, ns, "swap-100", "", 100*mi)
	c.swapTemplate(t, ns, "swap-200", "", 200*mi)

	p := c.createPod(t, c.WorkloadPod(ns, "three", map[string]string{"x": "swap-100", "y": "swap-200"},
		ctr{Name: "a", Claims: []string{"x"}, AllocMiB: 1, MemLimit: "64Mi"},
		ctr{Name: "b", Claims: []string{"y"}, AllocMiB: 1, MemLimit: "64Mi"},
		ctr{Name: "c", AllocMiB: 1, MemLimit: "64Mi"}))
	sum := c.createPod(t, c.WorkloadPod(ns, "sum", map[string]string{"x": "swap-100", "y": "swap-200"},
		ctr{Name: "both", Claims: []string{"x", "y"}, AllocMiB: 1, MemLimit: "64Mi"}))

	p = c.waitPod(t, ns, p.Name, "completion", podTimeout, finished)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s", p.Status.Phase)
	}
	assertSwapLimit(t, c.report(t, p, "a", "START"), 100*mi)
	assertSwapLimit(t, c.report(t, p, "b", "START"), 200*mi)
	noClaim := c.report(t, p, "c", "START")
	assertNoSwap(t, noClaim)
	if noClaim.EnvSwapLimit != "" {
		t.Errorf("container without a claim: DRA_SWAP_LIMIT_BYTES=%q, want it unset", noClaim.EnvSwapLimit)
	}

	sum = c.waitPod(t, ns, sum.Name, "completion", podTimeout, finished)
	if sum.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s", sum.Status.Phase)
	}
	assertSwapLimit(t, c.report(t, sum, "both", "START"), 300*mi)
}

// TestSchedulingByCapacity: the scheduler places swap by the node's offer.
func TestSchedulingByCapacity(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	offer := c.offer(t)

	// One pod asking more than the node offers stays Pending with the
	// scheduler's reason, until more swap appears on the node.
	c.swapTemplate(t, ns, "too-much", "", offer+256*mi)
	big := c.createPod(t, c.WorkloadPod(ns, "too-much", map[string]string{"swap": "too-much"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
	c.assertUnschedulable(t, big, "cannot allocate all claims")

	c.script(t, "swap.sh", "add", "e2e-extra", "512")
	t.Cleanup(func() {
		c.deleteNamespace(t, ns)
		c.waitNoPods(t, ns)
		c.script(t, "swap.sh", "remove", "e2e-extra")
	})
	c.waitOffer(t, "grow by 512Mi", func(o int64) bool { return o >= offer+512*mi })
	big = c.waitPod(t, ns, big.Name, "completion after swap was added", podTimeout, finished)
	if big.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s", big.Status.Phase)
	}
	assertSwapLimit(t, c.report(t, big, "worker", "START"), offer+256*mi)

	// Two pods whose claims together exceed the offer cannot both run.
	now := c.offer(t)
	share := (now * 6 / 10) / mi * mi
	c.swapTemplate(t, ns, "sixty-percent", "", share)
	first := c.createPod(t, c.WorkloadPod(ns, "first", map[string]string{"swap": "sixty-percent"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600}))
	c.waitPod(t, ns, first.Name, "running", podTimeout, running)
	second := c.createPod(t, c.WorkloadPod(ns, "second", map[string]string{"swap": "sixty-percent"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
	c.assertUnschedulable(t, second, "cannot allocate all claims")
}

// assertUnschedulable waits for the scheduler to give up on the pod with a
// reason containing want, and checks that it stays unbound.
func (c *env) assertUnschedulable(t *testing.T, p *corev1.Pod, want string) {
	t.Helper()
	p = c.waitPod(t, p.Namespace, p.Name, "the scheduler's verdict", pendingTimeout, func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && !strings.Contains(cond.Message, want) {
			t.Errorf("unschedulable for %q, want a reason containing %q", cond.Message, want)
		}
	}
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod %s is on node %q in phase %s, want it Pending and unbound", p.Name, p.Spec.NodeName, p.Status.Phase)
	}
}

func (c *env) waitNoPods(t *testing.T, ns string) {
	_ = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(time.Minute), true, func(ctx context.Context) (bool, error) {
		pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
}

// TestDeviceClassSelectors: CEL selectors over the published attributes.
func TestDeviceClassSelectors(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	dev := c.swapDevice(t)
	str := func(name resourceapi.QualifiedName) string {
		if a := dev.Attributes[name]; a.StringValue != nil {
			return *a.StringValue
		}
		t.Fatalf("attribute %s is not published", name)
		return ""
	}
	medium, behavior, zone := str("medium"), str("swapBehavior"), str("topology.kubernetes.io/zone")
	other := "hdd"
	if medium == "hdd" {
		other = "ssd"
	}
	wrong := c.deviceClass(t, ns+"-wrong", fmt.Sprintf(`device.driver == "dra.swap" && device.attributes["dra.swap"].medium == %q`, other))
	right := c.deviceClass(t, ns+"-right", fmt.Sprintf(`device.driver == "dra.swap" && device.attributes["dra.swap"].medium == %q && `+
		`device.attributes["dra.swap"].cgroupVersion == %d && device.attributes["dra.swap"].swapBehavior == %q && `+
		`device.attributes["topology.kubernetes.io"].zone == %q && device.attributes["dra.swap"].kernelVersion.isGreaterThan(semver("4.0.0"))`,
		medium, c.cgroupVersion(t), behavior, zone))

	c.swapTemplate(t, ns, "wrong", wrong, 64*mi)
	c.swapTemplate(t, ns, "right", right, 64*mi)
	nowhere := c.createPod(t, c.WorkloadPod(ns, "wrong-medium", map[string]string{"swap": "wrong"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
	c.assertUnschedulable(t, nowhere, "cannot allocate all claims")

	ok := c.createPod(t, c.WorkloadPod(ns, "right-attributes", map[string]string{"swap": "right"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
	ok = c.waitPod(t, ns, ok.Name, "completion", podTimeout, finished)
	if ok.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s", ok.Status.Phase)
	}
	assertSwapLimit(t, c.report(t, ok, "worker", "START"), 64*mi)
}

func (c *env) deviceClass(t *testing.T, name, expr string) string {
	t.Helper()
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
	}
	if _, err := c.client.ResourceV1().DeviceClasses().Create(context.Background(), class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// TestUnprepareCleansUp: deleting the pods unprepares their claims.
func TestUnprepareCleansUp(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	c.swapTemplate(t, ns, "swap-64", "", 64*mi)
	// The claim of a finished pod is deleted at once: look while it runs.
	p := c.createPod(t, c.WorkloadPod(ns, "short", map[string]string{"swap": "swap-64"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600}))
	p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
	uid := c.claimUID(t, p)
	if !c.specExists(uid) || !c.checkpointHas(t, uid) {
		t.Fatalf("claim %s: spec exists %v, checkpointed %v while its pod exists", uid, c.specExists(uid), c.checkpointHas(t, uid))
	}
	if err := c.client.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(2*time.Minute), true, func(context.Context) (bool, error) {
		return !c.specExists(uid) && !c.checkpointHas(t, uid), nil
	})
	if err != nil {
		t.Fatalf("claim %s after its pod was deleted: spec exists %v, checkpointed %v", uid, c.specExists(uid), c.checkpointHas(t, uid))
	}
}

func (c *env) claimUID(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		claim, err := c.client.ResourceV1().ResourceClaims(p.Namespace).Get(context.Background(), *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(claim.UID)
	}
	t.Fatalf("pod %s has no resource claim", p.Name)
	return ""
}

func (c *env) specExists(uid string) bool {
	_, err := os.Stat(filepath.Join(c.dir, "cdi", "dra.swap-swap_"+uid+".json"))
	return err == nil
}

func (c *env) checkpointHas(t *testing.T, uid string) bool {
	data, err := os.ReadFile(filepath.Join(c.dir, "kubelet", "plugins", "dra.swap", "checkpoint.json"))
	if err != nil {
		t.Fatalf("read checkpoint: %v", err)
	}
	return strings.Contains(string(data), `"`+uid+`"`)
}

// TestPluginRestart: restarting the kubelet plugin changes nothing for
// running pods, and new pods still get swap.
func TestPluginRestart(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	c.swapTemplate(t, ns, "swap-128", "", 128*mi)
	const before = 128 * mi
	long := c.runningClaimPod(t, ns, "long", "swap-128", before)

	t.Logf("%s restarting the plugin", time.Now().Format(time.TimeOnly))
	c.restartPlugin(t)
	t.Logf("%s restarted", time.Now().Format(time.TimeOnly))

	after := c.waitPod(t, ns, long.Name, "still running", podTimeout, running)
	if after.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("container restarted")
	}
	if got := c.hostSwapLimit(t, after, "worker"); got != before {
		t.Errorf("host cgroup swap limit changed from %d to %d across a plugin restart", before, got)
	}
	fresh := c.createPod(t, c.WorkloadPod(ns, "after-restart", map[string]string{"swap": "swap-128"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
	fresh = c.waitPod(t, ns, fresh.Name, "completion", podTimeout, finished)
	t.Logf("%s fresh pod finished", time.Now().Format(time.TimeOnly))
	if fresh.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s", fresh.Status.Phase)
	}
	assertSwapLimit(t, c.report(t, fresh, "worker", "START"), 128*mi)
}

// TestCheckpointLost: a corrupt checkpoint costs a running swap pod
// nothing. The restarted plugin sets the file aside and rebuilds its entry
// from the claim's CDI spec and the API server instead of removing the
// spec (which the kubelet, holding the claim as prepared, would never ask
// for again): a killed container comes back with its limit, and deleting
// the pod unprepares the claim as usual.
func TestCheckpointLost(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	c.swapTemplate(t, ns, "swap-96", "", 96*mi)
	const limit = 96 * mi
	p := c.WorkloadPod(ns, "survivor", map[string]string{"swap": "swap-96"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 1800})
	p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	p = c.waitPod(t, ns, c.createPod(t, p).Name, "running", podTimeout, running)
	uid := c.claimUID(t, p)
	if !c.specExists(uid) || !c.checkpointHas(t, uid) {
		t.Fatalf("claim %s: spec exists %v, checkpointed %v while its pod runs", uid, c.specExists(uid), c.checkpointHas(t, uid))
	}

	// Cut the checkpoint short, as a crash in the middle of a write by
	// hand or a disk error would; then restart the plugin.
	path := filepath.Join(c.dir, "kubelet", "plugins", "dra.swap", "checkpoint.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(path + ".unusable") })
	begin := time.Now()
	c.restartPlugin(t)
	t.Logf("plugin restarted on a corrupt checkpoint in %v", time.Since(begin).Round(time.Millisecond))
	c.waitNodeEvent(t, "CheckpointUnusable", "set aside as "+path+".unusable")
	if !c.specExists(uid) || !c.checkpointHas(t, uid) {
		// Go on: what the container then meets is the point.
		t.Errorf("claim %s after the restart: spec exists %v, checkpointed %v; want the spec kept and the entry rebuilt", uid, c.specExists(uid), c.checkpointHas(t, uid))
	}

	// Kill the container's process: the kubelet starts it again with the
	// claim's CDI devices, which must still resolve.
	version, root, group := c.hostCgroup(t, p, "worker")
	hierarchy := root
	if version == 1 {
		hierarchy = filepath.Join(root, "memory")
	}
	procs, err := os.ReadFile(filepath.Join(hierarchy, group, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(procs)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("cgroup.procs: %v", err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	killed := time.Now()
	var stuck string
	p = c.waitPod(t, ns, p.Name, "the container running again", podTimeout, func(p *corev1.Pod) bool {
		s := p.Status.ContainerStatuses
		if len(s) != 1 {
			return false
		}
		if w := s[0].State.Waiting; w != nil && (w.Reason == "CreateContainerError" || w.Reason == "RunContainerError") {
			stuck = containerState(s[0])
			return true
		}
		return s[0].RestartCount > 0 && s[0].State.Running != nil
	})
	if stuck != "" {
		t.Fatalf("the killed container cannot start again: %s\n%s", stuck, c.podMessages(t, p))
	}
	t.Logf("container running again %v after the kill", time.Since(killed).Round(time.Millisecond))
	if got := c.hostSwapLimit(t, p, "worker"); got != limit {
		t.Errorf("restarted container: host cgroup swap limit %d, want %d", got, limit)
	}
	assertSwapLimit(t, c.restartReport(t, p, "worker"), limit)

	if err := c.client.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	c.waitUnprepared(t, uid)
}

// restartReport waits for the START line of a container's latest run.
func (c *env) restartReport(t *testing.T, p *corev1.Pod, container string) result {
	t.Helper()
	var run int32
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			run = s.RestartCount
		}
	}
	var r result
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, cluster.Scaled(30*time.Second), true, func(context.Context) (bool, error) {
		var ok bool
		var err error
		r, ok, err = c.RunReport(p, container, "START", run)
		return ok, err
	})
	if err != nil {
		t.Fatalf("pod %s container %s: no START line in the log of run %d: %v", p.Name, container, run, err)
	}
	return r
}

// hostSwapLimit reads a running container's swap limit from the node's
// cgroup tree, as the hook wrote it.
func (c *env) hostSwapLimit(t *testing.T, p *corev1.Pod, container string) int64 {
	t.Helper()
	version, root, group := c.hostCgroup(t, p, container)
	limit, err := cgroupswap.ReadLimit(version, root, group)
	if err != nil {
		t.Fatal(err)
	}
	return limit
}

// hostCgroup finds a container's memory cgroup on the node: the cgroup
// version, the mount root and the group within the hierarchy. It looks for
// the container's directory by its ID: cgroupfs names it <id> under the
// pod's directory, the systemd driver cri-containerd-<id>.scope under the
// pod's slice.
func (c *env) hostCgroup(t *testing.T, p *corev1.Pod, container string) (version int, root, group string) {
	t.Helper()
	id := containerID(p, container)
	if id == "" {
		t.Fatalf("container %s has no ID", container)
	}
	return c.findCgroup(t, fmt.Sprintf("container %s (%s) of pod %s", container, id, p.Name), func(name string) bool {
		// runc under containerd (cgroupfs, systemd); crun under CRI-O
		// (cgroupfs, systemd: the scope, which holds the process's
		// "container" subgroup and bounds it).
		return name == id || name == "cri-containerd-"+id+".scope" || name == "crio-"+id || name == "crio-"+id+".scope"
	})
}

// findCgroup walks the node's kubepods memory cgroups for the one
// directory whose name matches; what names it in the failure.
func (c *env) findCgroup(t *testing.T, what string, match func(name string) bool) (version int, root, group string) {
	t.Helper()
	version = c.cgroupVersion(t)
	root = "/sys/fs/cgroup"
	hierarchy := root
	if version == 1 {
		hierarchy = filepath.Join(root, "memory")
	}
	var matches []string
	for _, top := range []string{"kubepods", "kubepods.slice"} {
		_ = filepath.WalkDir(filepath.Join(hierarchy, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if match(d.Name()) {
				matches = append(matches, path)
				return filepath.SkipDir
			}
			return nil
		})
	}
	if len(matches) != 1 {
		t.Fatalf("%s: %d cgroups found under %s: %v", what, len(matches), hierarchy, matches)
	}
	return version, root, strings.TrimPrefix(matches[0], hierarchy)
}

// TestTopologyLabelsThroughDownwardAPI: the controller's reservation
// webhook puts the node's hostname and swap behavior on the pod before
// the write that binds it, so Downward API environment variables see them
// when the container starts (KEP-4742 through the driver); in the default
// swap-claims selection, for a pod with a swap claim and for one that asks
// for swap as an extended resource (deviceclass.resource.kubernetes.io/dra.swap,
// whose claim the scheduler makes and reserves before the pod's status
// names it). A pod that asks for more swap devices than a node has waits,
// and the controller says why.
func TestTopologyLabelsThroughDownwardAPI(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	c.swapTemplate(t, ns, "swap-64", "", 64*mi)
	node, err := c.Client.CoreV1().Nodes().Get(context.Background(), c.Node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantBehavior := node.Labels["node.kubernetes.io/swap-behavior"]
	if wantBehavior == "" {
		t.Fatalf("node %s has no node.kubernetes.io/swap-behavior label: %v", c.Node, node.Labels)
	}
	const extended = "deviceclass.resource.kubernetes.io/dra.swap"
	fromLabel := func(name, label string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + label + "']"}}}
	}
	downward := func(pod *corev1.Pod) *corev1.Pod {
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env,
			fromLabel("DOWNWARD_HOSTNAME", "kubernetes.io/hostname"),
			fromLabel("DOWNWARD_SWAP_BEHAVIOR", "node.kubernetes.io/swap-behavior"),
			fromLabel("DOWNWARD_ZONE", "topology.kubernetes.io/zone"))
		return pod
	}
	withClaim := downward(c.WorkloadPod(ns, "downward", map[string]string{"swap": "swap-64"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
	withExtended := downward(c.WorkloadPod(ns, "downward-extended", nil, ctr{Name: "worker", AllocMiB: 1, MemLimit: "64Mi"}))
	withExtended.Spec.Containers[0].Resources.Limits[extended] = resource.MustParse("1")
	waits := c.WorkloadPod(ns, "two-devices", nil, ctr{Name: "worker", AllocMiB: 1, MemLimit: "64Mi"})
	waits.Spec.Containers[0].Resources.Limits[extended] = resource.MustParse("2")
	pods := []*corev1.Pod{c.createPod(t, withClaim), c.createPod(t, withExtended)}
	waits = c.createPod(t, waits)

	want := map[string]string{"DOWNWARD_HOSTNAME": node.Labels["kubernetes.io/hostname"], "DOWNWARD_SWAP_BEHAVIOR": wantBehavior, "DOWNWARD_ZONE": node.Labels[corev1.LabelTopologyZone]}
	for _, pod := range pods {
		pod = c.waitPod(t, ns, pod.Name, "completion", podTimeout, finished)
		if pod.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s: phase %s, reason %s", pod.Name, pod.Status.Phase, terminatedReason(pod, "worker"))
			continue
		}
		r := c.report(t, pod, "worker", "START")
		for k, v := range want {
			if r.Downward[k] != v {
				t.Errorf("pod %s: %s=%q at container start, want %q (all: %v)", pod.Name, k, r.Downward[k], v, r.Downward)
			}
		}
		t.Logf("pod %s at container start: %v", pod.Name, r.Downward)
	}
	c.waitEvent(t, waits, corev1.EventTypeWarning, "SwapUnavailable",
		"Swap extended resource "+extended+": 2 (each node has one swap device, so only 1 can be allocated)")
}

// TestSwapConfigKnobs applies each SwapConfig knob the node's cgroup
// version offers and reads the container's cgroup files: on v2
// memory.swap.high (a share of the limit) and memory.zswap.max (zswap on
// or off), on v1 memory.swappiness.
func TestSwapConfigKnobs(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	type knob struct {
		name   string
		config string
		files  map[string]string
	}
	var knobs []knob
	if c.cgroupVersion(t) == 2 {
		knobs = []knob{
			{name: "high-zswap-off", config: `"swapHighPercent":50,"zswap":"Disabled"`,
				files: map[string]string{"memory.swap.max": "209715200", "memory.swap.high": "104857600", "memory.zswap.max": "0"}},
			{name: "zswap-on", config: `"zswap":"Enabled"`,
				files: map[string]string{"memory.swap.max": "209715200", "memory.swap.high": "max", "memory.zswap.max": "max"}},
		}
	} else {
		knobs = []knob{{name: "swappiness", config: `"swappiness":10`, files: map[string]string{"memory.swappiness": "10"}}}
	}
	for _, k := range knobs {
		tmpl := cluster.SwapTemplate(ns, k.name, "", 200*mi)
		tmpl.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "dra.swap", Parameters: runtime.RawExtension{
				Raw: []byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig",` + k.config + `}`)}},
		}}}
		if _, err := c.client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		p := c.createPod(t, c.WorkloadPod(ns, k.name, map[string]string{"swap": k.name},
			ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
		r := c.report(t, p, "worker", "START")
		for f, want := range k.files {
			if got := r.Files[f]; got != want {
				t.Errorf("%s: %s = %q, want %q", k.name, f, got, want)
			}
		}
		t.Logf("%s: %v", k.name, r.Files)
	}
}
