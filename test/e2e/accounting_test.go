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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// podCgroupLimit reads the swap budget of the pod on the node: its pod
// cgroup's limit (v1 memsw − memory limit; v2 memory.swap.max, -1 for
// "max").
func (c *env) podCgroupLimit(t *testing.T, p *corev1.Pod) int64 {
	t.Helper()
	version, root, group := c.podCgroup(t, p)
	limit, err := cgroupswap.ReadLimit(version, root, group)
	if err != nil {
		t.Fatal(err)
	}
	return limit
}

// podCgroup finds the pod's memory cgroup by the pod's UID (cgroupfs:
// pod<uid>; systemd: …-pod<uid with underscores>.slice), not through one
// of its containers: a container may already be gone (OOM-killed, by
// design in TestPodSwapBudget) while the pod's cgroup stays.
func (c *env) podCgroup(t *testing.T, p *corev1.Pod) (version int, root, group string) {
	t.Helper()
	cgroupfs := "pod" + string(p.UID)
	systemd := "-pod" + strings.ReplaceAll(string(p.UID), "-", "_") + ".slice"
	return c.findCgroup(t, fmt.Sprintf("pod %s (%s)", p.Name, p.UID), func(name string) bool {
		return name == cgroupfs || strings.HasSuffix(name, systemd)
	})
}

// TestPodSwapBudget: two containers share one 200Mi claim, which the
// scheduler charged once. Each may swap up to the claim, and the pod's
// cgroup holds their shared budget of 200Mi: when both allocate 150MiB
// beyond their memory limits, together they cannot exceed it, so one of
// them is OOM-killed (by design) while the other completes.
func TestPodSwapBudget(t *testing.T) {
	c := loadCluster(t, checksOnNode("the pod cgroup's swap budget, and its swap use sampled while the containers allocate"))
	ns := c.namespace(t)
	c.needSwap(t, 200*mi)
	c.swapTemplate(t, ns, "swap-200", "", 200*mi)
	p := c.createPod(t, c.WorkloadPod(ns, "shared", map[string]string{"s": "swap-200"},
		ctr{Name: "a", Claims: []string{"s"}, AllocMiB: 64 + 150, MemLimit: "64Mi", Hold: 5},
		ctr{Name: "b", Claims: []string{"s"}, AllocMiB: 64 + 150, MemLimit: "64Mi", Hold: 5}))
	p = c.waitPod(t, ns, p.Name, "both containers started", podTimeout, func(p *corev1.Pod) bool {
		started := 0
		for _, s := range p.Status.ContainerStatuses {
			if s.ContainerID != "" {
				started++
			}
		}
		return started == 2
	})
	for _, name := range []string{"a", "b"} {
		assertSwapLimit(t, c.report(t, p, name, "START"), 200*mi)
	}
	// The pod's swap is watched from here on, while both containers
	// allocate and hold: the sum of what they swap is the pod cgroup's
	// own figure, not a sum over the containers that happened to
	// complete.
	var peak func() podSwapPeak
	if c.onNode(t) {
		if got := c.podCgroupLimit(t, p); got != 200*mi {
			t.Errorf("the pod's cgroup swap budget is %d, want %d", got, 200*mi)
		}
		peak = c.watchPodSwap(t, p)
	}
	c.waitEvent(t, p, corev1.EventTypeNormal, "SwapApplied", "the pod's containers share a swap budget of 200Mi")

	p = c.waitPod(t, ns, p.Name, "completion", podTimeout, finished)
	var podPeak podSwapPeak
	if peak != nil {
		podPeak = peak()
	}
	killed := 0
	for _, name := range []string{"a", "b"} {
		// oomKilled counts a kill in the pod's cgroup too (exit 137,
		// reason Error), as CRI-O reports the budget's.
		switch reason := terminatedReason(p, name); {
		case oomKilled(p, name):
			killed++
		case reason == "Completed":
			r := c.report(t, p, name, "RESULT")
			t.Logf("container %s completed, swap used %d", name, r.SwapUsageBytes)
		default:
			t.Errorf("container %s ended %q", name, reason)
		}
	}
	if killed == 0 {
		t.Errorf("both containers swapped 150MiB each from one 200Mi claim: the pod's budget did not hold")
	}
	switch {
	case peak == nil:
		t.Logf("shared 200Mi claim: %d of 2 containers OOM-killed at the pod's budget (the pod's cgroup is not read without access to the node)", killed)
		return
	case podPeak.samples == 0:
		t.Errorf("the pod's swap use could not be read while it ran (%s)", podPeak.what)
	case podPeak.swap > 200*mi+forcedChargeSlack:
		t.Errorf("the pod's containers swapped %d bytes together (%s), more than the claim's 200Mi", podPeak.swap, podPeak.what)
	case podPeak.swap > 200*mi:
		t.Logf("the pod's peak is %d bytes over the claim's 200Mi (%s): the kernel charged an OOM victim past the limit, within the %d bytes allowed for that", podPeak.swap-200*mi, podPeak.what, forcedChargeSlack)
	case podPeak.swap < 100*mi:
		// Each container allocates 150MiB beyond its memory limit: a
		// peak this low means the watcher saw nothing of it.
		t.Errorf("the pod swapped at most %d bytes (%s): the watcher missed the allocations", podPeak.swap, podPeak.what)
	}
	t.Logf("shared 200Mi claim: %d of 2 containers OOM-killed at the pod's budget; the pod's swap peaked at %d bytes (%s)", killed, podPeak.swap, podPeak.what)
}

// forcedChargeSlack is how far past a limit the kernel itself lets a
// cgroup's counter go, which the driver cannot prevent: when a charge
// fails for a task that is being OOM-killed (or for an allocation that
// must not fail), try_charge_memcg in mm/memcontrol.c force-charges it
// past memory.max and, on v1, past memory.memsw.limit_in_bytes. One such
// charge is at most a transparent huge page (2 MiB); CI saw one page
// (4096 bytes over 200Mi) when both containers hit the budget at once.
// The limit the driver wrote is checked exactly (podCgroupLimit); this
// slack applies only to the observed peak.
const forcedChargeSlack = 2 * mi

// podSwapPeak is the most swap a pod's cgroup was seen to hold.
type podSwapPeak struct {
	swap    int64
	samples int
	what    string
}

// watchPodSwap samples the pod cgroup's swap every 20 ms until the
// returned function is called, which returns the peak. v1: the kernel's
// own peak of memory+swap (memory.memsw.max_usage_in_bytes) less the
// pod's memory limit, an upper bound of the swap it held (one file, so
// no torn read of two counters); v2: the largest memory.swap.current
// read (kernel 6.1 has no memory.swap.peak). Reads after the pod's cgroup
// went away are ignored: the last good one stands.
func (c *env) watchPodSwap(t *testing.T, p *corev1.Pod) func() podSwapPeak {
	t.Helper()
	version, root, group := c.podCgroup(t, p)
	var memLimit int64
	if version == 1 {
		v, err := readCgroupInt(filepath.Join(root, "memory", group, "memory.limit_in_bytes"))
		if err != nil {
			t.Fatal(err)
		}
		memLimit = v
	}
	sample := func() (int64, error) {
		if version == 1 {
			peak, err := readCgroupInt(filepath.Join(root, "memory", group, "memory.memsw.max_usage_in_bytes"))
			return peak - memLimit, err
		}
		return readCgroupInt(filepath.Join(root, group, "memory.swap.current"))
	}
	what := fmt.Sprintf("v%d pod cgroup %s", version, group)
	if version == 1 {
		what += ": memsw peak − memory limit"
	}
	result := make(chan podSwapPeak, 1)
	stop := make(chan struct{})
	go func() {
		peak := podSwapPeak{swap: -1, what: what}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, err := sample(); err == nil {
				peak.samples++
				peak.swap = max(peak.swap, v)
			}
			select {
			case <-stop:
				result <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() podSwapPeak {
		close(stop)
		return <-result
	}
}

// readCgroupInt reads a cgroup file holding one integer.
func readCgroupInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// TestPerRequestReference: a container that references one request of a
// claim gets that request's swap, not the claim's.
func TestPerRequestReference(t *testing.T) {
	c := loadCluster(t)
	ns := c.namespace(t)
	c.needSwap(t, 96*mi)
	request := func(name string, bytes int64) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: c.DeviceClass,
			Capacity:        &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"swap": *resource.NewQuantity(bytes, resource.BinarySI)}},
		}}
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "two-requests"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{request("r1", 64*mi), request("r2", 32*mi)},
		}}},
	}
	if _, err := c.client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := c.WorkloadPod(ns, "per-request", map[string]string{"x": "two-requests"},
		ctr{Name: "only-r2", Claims: []string{"x"}, AllocMiB: 1, MemLimit: "64Mi"},
		ctr{Name: "whole", Claims: []string{"x"}, AllocMiB: 1, MemLimit: "64Mi"})
	pod.Spec.Containers[0].Resources.Claims[0].Request = "r2"
	p := c.createPod(t, pod)
	p = c.waitPod(t, ns, p.Name, "completion", podTimeout, finished)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s: %s", p.Status.Phase, c.podMessages(t, p))
	}
	// Its only device is r2's, so its variable is r2's too.
	assertSwapLimit(t, c.report(t, p, "only-r2", "START"), 32*mi)
	if r := c.report(t, p, "whole", "START"); r.SwapLimitBytes != 96*mi {
		t.Errorf("the container referencing the whole claim: swap limit %d, want %d", r.SwapLimitBytes, 96*mi)
	}
}

// TestClaimSharedByPods: a claim is charged once, when it is allocated,
// so its swap goes to one pod: the first pod that reserved it. The
// kubelet prepares a claim once per node and does not ask the driver
// again for the next pod; the CDI spec names the first pod and the hook
// refuses the containers of any other, with an event that says to use a
// ResourceClaimTemplate.
func TestClaimSharedByPods(t *testing.T) {
	c := loadCluster(t, checksOnNode("the first pod's cgroup read again after the second pod was refused"))
	ns := c.namespace(t)
	c.needSwap(t, 64*mi)
	ctx := context.Background()
	claim := cluster.SwapTemplate(ns, "shared", c.DeviceClass, 64*mi).Spec.Spec
	if _, err := c.client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}, Spec: claim,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podUsing := func(name string) *corev1.Pod {
		p := c.WorkloadPod(ns, name, nil, ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 1800})
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To("shared")}}
		return c.createPod(t, p)
	}
	first := podUsing("first")
	first = c.waitPod(t, ns, first.Name, "running", podTimeout, running)
	if got := c.report(t, first, "worker", "START").SwapLimitBytes; got != 64*mi {
		t.Fatalf("the first pod's swap limit %d, want %d", got, 64*mi)
	}
	second := podUsing("second")
	second = c.waitPod(t, ns, second.Name, "scheduled", podTimeout, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	c.waitEvent(t, second, corev1.EventTypeWarning, "SwapNotApplied", "a swap claim serves one pod (give each pod its own claim with a ResourceClaimTemplate)")
	second, err := c.client.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range second.Status.ContainerStatuses {
		if s.State.Running != nil {
			t.Errorf("the second pod's container runs: it shares the first pod's claim")
		}
	}
	msgs := c.podMessages(t, second)
	if !strings.Contains(msgs, "grants its swap to pod "+string(first.UID)+" only") {
		t.Errorf("the second pod's messages do not name the pod the claim is granted to:\n%s", msgs)
	}
	// The first pod keeps its swap, and the claim's status says so (the
	// second pod's refusal is not the claim's outcome).
	if c.onNode(t) {
		if got := c.hostSwapLimit(t, first, "worker"); got != 64*mi {
			t.Errorf("the first pod's swap limit became %d", got)
		}
	}
	c.waitClaimCondition(t, ns, "shared", metav1.ConditionTrue, `to container worker (64Mi)`)
}

// waitClaimCondition waits until the claim's dra.swap device status has
// the SwapApplied condition with status and a message containing text.
func (c *env) waitClaimCondition(t *testing.T, ns, name string, status metav1.ConditionStatus, text string) {
	t.Helper()
	var last []resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, cluster.Scaled(30*time.Second), true, func(ctx context.Context) (bool, error) {
		claim, err := c.client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = claim.Status.Devices
		for _, d := range claim.Status.Devices {
			for _, cond := range d.Conditions {
				if d.Driver == "dra.swap" && cond.Type == "SwapApplied" && cond.Status == status && strings.Contains(cond.Message, text) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("claim %s/%s: no SwapApplied=%s condition saying %q in status.devices %+v", ns, name, status, text, last)
	}
}

// TestExtendedResourceRequest: a container that asks for swap as an
// extended resource (limits: deviceclass.resource.kubernetes.io/dra.swap:
// 1, DRAExtendedResource) gets one device of the node's default request
// (the device's request policy; this repository's plugin runs with
// --default-request=200Mi) from the claim the scheduler makes for the pod,
// and that claim counts in the pod's budget beside the pod's own claims:
// container a 200Mi, containers b and c sharing a 100Mi claim 100Mi each,
// the pod's cgroup 300Mi.
func TestExtendedResourceRequest(t *testing.T) {
	c := loadCluster(t, checksOnNode("the pod cgroup's swap budget"))
	ns := c.namespace(t)
	def := c.defaultRequest(t)
	if !c.Portable && def != 200*mi {
		t.Errorf("the node's device publishes a default request of %d, want the %d of this cluster's --default-request=200Mi", def, 200*mi)
	}
	c.needSwap(t, def+100*mi)
	c.swapTemplate(t, ns, "swap-100", "", 100*mi)
	pod := c.WorkloadPod(ns, "extended", map[string]string{"s": "swap-100"},
		ctr{Name: "a", AllocMiB: 1, MemLimit: "64Mi", Hold: 600},
		ctr{Name: "b", Claims: []string{"s"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600},
		ctr{Name: "c", Claims: []string{"s"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600})
	pod.Spec.Containers[0].Resources.Limits[corev1.ResourceName("deviceclass.resource.kubernetes.io/"+c.DeviceClass)] = resource.MustParse("1")
	p := c.createPod(t, pod)
	p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)

	status := p.Status.ExtendedResourceClaimStatus
	if status == nil || status.ResourceClaimName == "" {
		t.Fatalf("the pod has no extended-resource claim: %+v", p.Status)
	}
	mapped := false
	for _, m := range status.RequestMappings {
		mapped = mapped || m.ContainerName == "a"
	}
	if !mapped {
		t.Errorf("the extended-resource claim's request mappings do not name container a: %+v", status.RequestMappings)
	}
	claim, err := c.client.ResourceV1().ResourceClaims(ns).Get(context.Background(), status.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("extended-resource claim %s: allocation %+v, want one result", claim.Name, claim.Status.Allocation)
	}
	if got := claim.Status.Allocation.Devices.Results[0].ConsumedCapacity["swap"]; got.Value() != def {
		t.Errorf("extended-resource claim %s consumed %s of swap, want the default request %s", claim.Name, got.String(), resource.NewQuantity(def, resource.BinarySI))
	}

	for name, want := range map[string]int64{"a": def, "b": 100 * mi, "c": 100 * mi} {
		assertSwapLimit(t, c.report(t, p, name, "START"), want)
	}
	budget := def + 100*mi
	if c.onNode(t) {
		if got := c.podCgroupLimit(t, p); got != budget {
			t.Errorf("the pod's cgroup swap budget is %d, want %d (the extended-resource claim's %d and the shared claim's 100Mi)", got, budget, def)
		}
	}
	c.waitEvent(t, p, corev1.EventTypeNormal, "SwapApplied", "the pod's containers share a swap budget of "+resource.NewQuantity(budget, resource.BinarySI).String())
}
