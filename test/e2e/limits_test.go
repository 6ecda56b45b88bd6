package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// TestLimitsHoldAfterResize: in-place resizes of a container with a swap
// claim (memory up, memory down, CPU only). The kubelet's
// UpdateContainerResources carries its own swap value; afterwards the
// container's limit is the claim's again (v1: memsw = the new memory limit
// + the claim), and the window in which it was not is measured by reading
// the cgroup every millisecond. With NRI, v2 updates are corrected before
// runc applies them (no window); on v1, where containerd drops a swap value
// in an update, the plugin restores it right after the update
// (PostUpdateContainer), counted with trigger "update" (or "pod-update"
// when its pod-update check came first) and reported in a
// SwapLimitRestored event.
func TestLimitsHoldAfterResize(t *testing.T) {
	c := loadCluster(t, needsNode("reads the container's cgroup on the node every millisecond while it is resized"))
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	const want = 100 * mi
	c.swapTemplate(t, ns, "swap-100", "", want)
	p := c.createPod(t, c.WorkloadPod(ns, "resized", map[string]string{"swap": "swap-100"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "128Mi", CPU: "100m", Hold: 1800}))
	p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
	version, root, group := c.hostCgroup(t, p, "worker")
	read := func() (int64, error) { return cgroupswap.ReadLimit(version, root, group) }
	if got, err := read(); err != nil || got != want {
		t.Fatalf("before any resize: host swap limit %d (%v), want %d", got, err, want)
	}
	c.waitNRIConnected(t)
	// Restored after an update: by the NRI plugin's PostUpdateContainer
	// ("update") or, when the pod's resize reached the plugin first, by its
	// pod-update check ("pod-update"); either is the update's own path,
	// not the interval pass.
	restoredAfterUpdate := func() float64 {
		return c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="update"`) +
			c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="pod-update"`)
	}
	updatesBefore := restoredAfterUpdate()
	failuresBefore := c.pluginCounter(t, "dra_swap_limit_restore_failures_total", "")

	steps := []struct{ name, mem, cpu string }{
		{"memory up", "192Mi", "100m"},
		{"memory down", "128Mi", "100m"},
		{"cpu only", "128Mi", "200m"},
	}
	drifted := 0
	for _, s := range steps {
		st := c.resizeAndWatch(t, p, s.mem, s.cpu, read, want)
		if st.wrongReads > 0 {
			drifted++
		}
		t.Logf("%s to memory %s, cpu %s: %s", s.name, s.mem, s.cpu, st)
	}
	updates := restoredAfterUpdate() - updatesBefore
	failures := c.pluginCounter(t, "dra_swap_limit_restore_failures_total", "") - failuresBefore
	t.Logf("cgroup v%d: %d of %d resizes left a window; restored after an update (NRI): %v; restore failures: %v", version, drifted, len(steps), updates, failures)
	if failures != 0 {
		t.Errorf("%v restore failures during the resizes", failures)
	}
	if version == 1 && c.Env["NRI_DISABLE"] != "1" {
		// containerd drops the swap value of an update on v1: every
		// resize rewrites memsw, and the NRI plugin restores it.
		if updates < float64(len(steps)) {
			t.Errorf("restored after an update %v times, want at least %d (one per resize): neither the NRI update nor the pod-update check restored the limits", updates, len(steps))
		}
		c.waitEvent(t, p, corev1.EventTypeWarning, "SwapLimitRestored", "wrote 100Mi back")
	}
}

// resizeAndWatch resizes the pod's container "worker" in place to mem and
// cpu (requests = limits), waits until the kubelet applied it and the
// swap limit reads want again, and returns what a watcher reading the
// limit every millisecond saw from the resize on.
func (c *env) resizeAndWatch(t *testing.T, p *corev1.Pod, mem, cpu string, read func() (int64, error), want int64) limitStats {
	t.Helper()
	ctx := context.Background()
	w := watchLimit(read, want)
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"worker","resources":{"requests":{"memory":%q,"cpu":%q},"limits":{"memory":%q,"cpu":%q}}}]}}`,
		mem, cpu, mem, cpu)
	if _, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		w.stop()
		t.Fatalf("resize to memory %s, cpu %s: %v", mem, cpu, err)
	}
	c.waitPod(t, p.Namespace, p.Name, "the resize applied by the kubelet", podTimeout, resized(mem, cpu))
	// The kubelet reports the resize once runc applied it; the limit is
	// right again within the verifier's interval at most.
	var got int64
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, cluster.Scaled(30*time.Second), true, func(context.Context) (bool, error) {
		var err error
		got, err = read()
		return err == nil && got == want, nil
	})
	st := w.stop()
	if err != nil {
		t.Errorf("resize to memory %s, cpu %s: host swap limit %d afterwards, want %d (%s)", mem, cpu, got, want, st)
	}
	return st
}

// resized holds once the kubelet reports the container's resources as
// mem and cpu and no resize is pending or in progress.
func resized(mem, cpu string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if (cond.Type == corev1.PodResizePending || cond.Type == corev1.PodResizeInProgress) && cond.Status == corev1.ConditionTrue {
				return false
			}
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name != "worker" || s.Resources == nil {
				continue
			}
			m, c := s.Resources.Limits[corev1.ResourceMemory], s.Resources.Limits[corev1.ResourceCPU]
			return m.Cmp(resource.MustParse(mem)) == 0 && c.Cmp(resource.MustParse(cpu)) == 0
		}
		return false
	}
}

// TestLimitRestoredAfterHandWrite: someone writes a container's swap file
// on the node; the verifier finds it on its next pass, writes the claim's
// value back, counts it and says so on the pod.
func TestLimitRestoredAfterHandWrite(t *testing.T) {
	c := loadCluster(t, needsNode("writes the container's swap limit by hand on the node"))
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	const want = 80 * mi
	c.swapTemplate(t, ns, "swap-80", "", want)
	p := c.runningClaimPod(t, ns, "hand-written", "swap-80", want)
	version, root, group := c.hostCgroup(t, p, "worker")
	before := c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="interval"`)

	file, value := root+group+"/memory.swap.max", "0"
	if version == 1 {
		// memsw = the memory limit: no swap at all.
		file = root + "/memory" + group + "/memory.memsw.limit_in_bytes"
		data, err := os.ReadFile(root + "/memory" + group + "/memory.limit_in_bytes")
		if err != nil {
			t.Fatal(err)
		}
		value = strings.TrimSpace(string(data))
	}
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		t.Fatalf("write %s: %v", file, err)
	}
	written := time.Now()
	if got, _ := cgroupswap.ReadLimit(version, root, group); got != 0 {
		t.Fatalf("after writing %s to %s the swap limit reads %d, want 0", value, file, got)
	}
	var got int64
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		var err error
		got, err = cgroupswap.ReadLimit(version, root, group)
		return err == nil && got == want, nil
	})
	if err != nil {
		t.Fatalf("swap limit %d a minute after it was overwritten, want %d restored", got, want)
	}
	t.Logf("restored %v after the write", time.Since(written).Round(10*time.Millisecond))
	c.waitEvent(t, p, corev1.EventTypeWarning, "SwapLimitRestored", "was 0 instead of 80Mi")
	if n := c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="interval"`) - before; n < 1 {
		t.Errorf("dra_swap_limit_restored_total{trigger=\"interval\"} rose by %v, want at least 1", n)
	}
}

// limitStats is what a limitWatcher saw.
type limitStats struct {
	reads, wrongReads int
	wrong, longest    time.Duration
	values            []int64
}

func (s limitStats) String() string {
	return fmt.Sprintf("limit wrong for %v in all (%d of %d reads; longest stretch %v; wrong values %v)",
		s.wrong.Round(time.Microsecond), s.wrongReads, s.reads, s.longest.Round(time.Microsecond), s.values)
}

type limitWatcher struct {
	done chan struct{}
	wg   sync.WaitGroup
	st   limitStats
}

// watchLimit reads the limit every millisecond until stop and measures
// how long it differed from want.
func watchLimit(read func() (int64, error), want int64) *limitWatcher {
	w := &limitWatcher{done: make(chan struct{})}
	w.wg.Go(func() {
		var since time.Time // start of the current wrong stretch
		seen := map[int64]bool{}
		for {
			select {
			case <-w.done:
				if !since.IsZero() {
					d := time.Since(since)
					w.st.wrong += d
					w.st.longest = max(w.st.longest, d)
				}
				return
			case <-time.After(time.Millisecond):
			}
			v, err := read()
			if err != nil {
				continue
			}
			w.st.reads++
			now := time.Now()
			if v != want {
				w.st.wrongReads++
				if !seen[v] {
					seen[v] = true
					w.st.values = append(w.st.values, v)
				}
				if since.IsZero() {
					since = now
				}
			} else if !since.IsZero() {
				d := now.Sub(since)
				w.st.wrong += d
				w.st.longest = max(w.st.longest, d)
				since = time.Time{}
			}
		}
	})
	return w
}

func (w *limitWatcher) stop() limitStats {
	close(w.done)
	w.wg.Wait()
	return w.st
}

// pluginCounter sums the samples of a metric of the kubelet plugin whose
// labels contain match, read from its metrics port over the pod network.
func (c *env) pluginCounter(t *testing.T, name, match string) float64 {
	t.Helper()
	lines, url, err := c.scrapePlugin(t)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range lines {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if match != "" && !strings.Contains(line, match) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", url, line, err)
		}
		sum += v
	}
	return sum
}

// scrapePlugin reads the kubelet plugin's metrics (the sample lines) from
// its metrics port over the pod network.
func (c *env) scrapePlugin(t *testing.T) (lines []string, url string, err error) {
	t.Helper()
	pod := c.waitPluginReady(t, func(*corev1.Pod) bool { return true })
	port := int32(0)
	for _, p := range pod.Spec.Containers[0].Ports {
		if p.Name == "metrics" {
			port = p.ContainerPort
		}
	}
	url = fmt.Sprintf("http://%s:%d/metrics", pod.Status.PodIP, port)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return nil, url, fmt.Errorf("scrape the kubelet plugin: %w", err)
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		if line := s.Text(); line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	return lines, url, s.Err()
}

// logLimitCounters logs the plugin's restore counters and its NRI state as
// they stand after a scenario (a plugin restart starts them from zero).
func (c *env) logLimitCounters(t *testing.T) {
	t.Helper()
	lines, _, err := c.scrapePlugin(t)
	if err != nil {
		t.Logf("plugin counters: %v", err)
		return
	}
	var got []string
	for _, line := range lines {
		if strings.HasPrefix(line, "dra_swap_limit_restore") || strings.HasPrefix(line, "dra_swap_nri_connected") {
			got = append(got, line)
		}
	}
	t.Logf("plugin counters after %s: %s", t.Name(), strings.Join(got, "; "))
}

// TestDaemonReload (systemd cgroup driver, the v2 leg): runc records a
// container's resources as properties of its systemd scope, and `systemctl
// daemon-reload` writes them back to the cgroup. The NRI plugin put the
// claim's limit into the container's spec, so the scope's MemorySwapMax is
// the claim's and the reload keeps it; were it the kubelet's, the verifier
// would restore it (with an event). crun (CRI-O) takes MemorySwapMax from
// the spec's linux.resources.memory.swap, which is memory + swap, before
// its unified memory.swap.max (crun 1.21, get_memory_swap_max), so there
// the property is the container's memory limit plus the kubelet's swap
// whatever NRI put in: the cgroup file holds the claim (crun, the hook and
// the verifier write it), and a reload that writes the property back is
// the verifier's to restore.
func TestDaemonReload(t *testing.T) {
	c := loadCluster(t, needsNode("runs systemctl daemon-reload on the node"))
	if c.Env["CGROUP_DRIVER"] != "systemd" {
		t.Skip("the systemd cgroup driver runs on the v2 leg; this node uses " + c.Env["CGROUP_DRIVER"])
	}
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	const want = 72 * mi
	c.swapTemplate(t, ns, "swap-72", "", want)
	p := c.runningClaimPod(t, ns, "reloaded", "swap-72", want)
	version, root, group := c.hostCgroup(t, p, "worker")
	read := func() (int64, error) { return cgroupswap.ReadLimit(version, root, group) }
	scope := filepath.Base(group)
	prop := func() string {
		out, err := exec.Command("systemctl", "show", "-p", "MemorySwapMax", "--value", scope).CombinedOutput()
		if err != nil {
			t.Fatalf("systemctl show %s: %v\n%s", scope, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	t.Logf("scope %s: MemorySwapMax=%s before the reload", scope, prop())
	before := c.pluginCounter(t, "dra_swap_limit_restored_total", "")
	w := watchLimit(read, want)
	if out, err := exec.Command("systemctl", "daemon-reload").CombinedOutput(); err != nil {
		w.stop()
		t.Fatalf("systemctl daemon-reload: %v\n%s", err, out)
	}
	// A reload re-applies every unit's cgroup properties at once; give
	// the verifier a pass to see (and restore) anything it changed.
	time.Sleep(cluster.Scaled(3 * time.Second))
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, cluster.Scaled(30*time.Second), true, func(context.Context) (bool, error) {
		v, err := read()
		return err == nil && v == want, nil
	})
	st := w.stop()
	if err != nil {
		t.Fatalf("memory.swap.max after daemon-reload is not %d (%s)", want, st)
	}
	restored := c.pluginCounter(t, "dra_swap_limit_restored_total", "") - before
	t.Logf("after daemon-reload: MemorySwapMax=%s; %s; restored %v times", prop(), st, restored)
	if c.runtime() == "crio" {
		t.Logf("crun's MemorySwapMax is the spec's memory + swap, not the claim's (see above); the file held the claim")
	} else if c.Env["NRI_DISABLE"] != "1" && (st.wrongReads > 0 || prop() != strconv.FormatInt(want, 10)) {
		t.Errorf("with NRI, systemd should hold the claim's limit (MemorySwapMax=%d) and the reload change nothing; MemorySwapMax=%s, %s", want, prop(), st)
	}
}

// podResetBound is the longest the pod's budget may read anything but the
// claims' sum after the kubelet's pod-level update: about one pod-watch
// interval (100 ms) and a check, with room for the emulated node. Without
// the pod watch the reset lasts until the verifier's next interval pass,
// anywhere in 0..--verify-interval (10 s).
const podResetBound = time.Second

// TestPodLevelResize (the systemd cgroup driver): two containers share a
// claim, so their pod's slice holds the pod's budget. A memory decrease
// of one container lowers the pod's memory limit too, which the kubelet
// 1.37 sets on the pod's slice after the containers' updates, over D-Bus;
// systemd then writes every memory property of the slice again,
// memory.swap.max=max (the budget gone) among them. The NRI plugin watches
// the pod after its container update (and after UpdatePodSandbox, which
// CRI-O sends before the pod's update): a watcher reading the slice's
// memory.swap.max every millisecond sees the budget gone for less than
// podResetBound, at each of two decreases (without the watch, each lasts
// until the verifier's next pass: up to 10 s, under the bound by chance
// one time in ten).
func TestPodLevelResize(t *testing.T) {
	c := loadCluster(t, needsNode("reads the pod's slice on the node every millisecond while the pod is resized"))
	if c.Env["CGROUP_DRIVER"] != "systemd" {
		t.Skip("the systemd cgroup driver runs on the v2 node; this node uses " + c.Env["CGROUP_DRIVER"])
	}
	if c.Env["NRI_DISABLE"] == "1" {
		t.Skip("the pod watch is the NRI plugin's; NRI is off")
	}
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	const budget = 64 * mi
	c.swapTemplate(t, ns, "swap-64", "", budget)
	p := c.createPod(t, c.WorkloadPod(ns, "pod-resized", map[string]string{"s": "swap-64"},
		ctr{Name: "a", Claims: []string{"s"}, AllocMiB: 1, MemLimit: "128Mi", Hold: 1800},
		ctr{Name: "b", Claims: []string{"s"}, AllocMiB: 1, MemLimit: "128Mi", Hold: 1800}))
	p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
	uid := string(p.UID)
	version, root, podGroup := c.findCgroup(t, "the cgroup of pod "+p.Name, func(name string) bool {
		return strings.HasSuffix(name, "-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
	})
	read := func() (int64, error) { return cgroupswap.ReadLimit(version, root, podGroup) }
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, cluster.Scaled(10*time.Second), true, func(context.Context) (bool, error) {
		v, err := read()
		return err == nil && v == budget, nil
	}); err != nil {
		v, rerr := read()
		t.Fatalf("before the resize: the pod's memory.swap.max %d (%v), want the budget %d", v, rerr, budget)
	}
	before := c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="pod-update"`)
	for i, mem := range []string{"112Mi", "96Mi"} {
		w := watchLimit(read, budget)
		patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"a","resources":{"requests":{"memory":%q},"limits":{"memory":%q}}}]}}`, mem, mem)
		if _, err := c.client.CoreV1().Pods(ns).Patch(context.Background(), p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
			w.stop()
			t.Fatalf("resize container a to %s: %v", mem, err)
		}
		c.waitPod(t, ns, p.Name, "the resize to "+mem+" applied by the kubelet", podTimeout, memoryResized("a", mem))
		// The kubelet reports the resize after the pod's update; the
		// watch is still on, and a reset would be gone within the bound.
		time.Sleep(2 * podResetBound)
		st := w.stop()
		t.Logf("decrease %d, container a to %s: the pod's budget %s", i+1, mem, st)
		if v, err := read(); err != nil || v != budget {
			t.Errorf("after the decrease to %s: the pod's memory.swap.max %d (%v), want %d", mem, v, err, budget)
		}
		if st.longest > podResetBound {
			t.Errorf("after the decrease to %s the pod's budget was gone for %v, longer than %v (%s)", mem, st.longest, podResetBound, st)
		}
	}
	restored := c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="pod-update"`) - before
	t.Logf("restored after a pod update: %v times", restored)
	if restored < 1 {
		t.Errorf("the pod watch restored nothing: did the kubelet's pod update not reset the slice's memory.swap.max? (restored %v)", restored)
	}
}

// memoryResized holds once the kubelet reports the container's memory
// limit as mem and no resize is pending or in progress.
func memoryResized(container, mem string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if (cond.Type == corev1.PodResizePending || cond.Type == corev1.PodResizeInProgress) && cond.Status == corev1.ConditionTrue {
				return false
			}
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == container && s.Resources != nil {
				m := s.Resources.Limits[corev1.ResourceMemory]
				return m.Cmp(resource.MustParse(mem)) == 0
			}
		}
		return false
	}
}

// TestResizeWhileTheHookStateIsLocked: the hook state's lock is held by
// another process (this test, on the node, as a hook stuck on a thrashing
// node would) for longer than NRI's 2 s request timeout while a claimed
// container is resized in place. The runtime's NRI calls do not wait for
// it: the resize completes, the plugin stays registered with the runtime
// (dra_swap_nri_connected reads 1 throughout, sampled every 200 ms: a
// plugin the runtime dropped reconnects only after 5 s), and once the lock
// is free the container's limit is the claim's.
func TestResizeWhileTheHookStateIsLocked(t *testing.T) {
	c := loadCluster(t, needsNode("holds the hook state's lock on the node"))
	if c.Env["NRI_DISABLE"] == "1" {
		t.Skip("NRI is off on this node")
	}
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	const want = 100 * mi
	c.swapTemplate(t, ns, "swap-100", "", want)
	p := c.createPod(t, c.WorkloadPod(ns, "locked", map[string]string{"swap": "swap-100"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "128Mi", CPU: "100m", Hold: 1800}))
	p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
	version, root, group := c.hostCgroup(t, p, "worker")
	read := func() (int64, error) { return cgroupswap.ReadLimit(version, root, group) }
	if got, err := read(); err != nil || got != want {
		t.Fatalf("before the resize: host swap limit %d (%v), want %d", got, err, want)
	}
	c.waitNRIConnected(t)
	_, url, err := c.scrapePlugin(t)
	if err != nil {
		t.Fatal(err)
	}
	sampler := sampleGauge(url, "dra_swap_nri_connected", 200*time.Millisecond)

	stateDir := filepath.Join(c.Dir, "run", "hook") // the chart's hookStateDir in this cluster
	unlock, err := hookstate.Lock(stateDir, 10*time.Second)
	if err != nil {
		sampler.stop()
		t.Fatal(err)
	}
	locked := time.Now()
	patch := `{"spec":{"containers":[{"name":"worker","resources":{"requests":{"memory":"192Mi","cpu":"100m"},"limits":{"memory":"192Mi","cpu":"100m"}}}]}}`
	if _, err := c.client.CoreV1().Pods(ns).Patch(context.Background(), p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		unlock()
		sampler.stop()
		t.Fatal(err)
	}
	c.waitPod(t, ns, p.Name, "the resize applied by the kubelet", podTimeout, resized("192Mi", "100m"))
	resizedAfter := time.Since(locked)
	// Past NRI's timeout after the update's last call.
	time.Sleep(3 * time.Second)
	unlock()
	released := time.Now()
	var got int64
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, cluster.Scaled(30*time.Second), true, func(context.Context) (bool, error) {
		got, err = read()
		return err == nil && got == want, nil
	})
	heldAgain := time.Since(released)
	// 5 s more of samples: a drop near the end shows too.
	time.Sleep(5 * time.Second)
	samples := sampler.stop()
	t.Logf("lock held %v; the resize was applied %v after the lock was taken; limit %s %v after it was released; dra_swap_nri_connected samples %s",
		released.Sub(locked).Round(time.Millisecond), resizedAfter.Round(time.Millisecond), describeLimit(got), heldAgain.Round(time.Millisecond), samples)
	if err != nil {
		t.Errorf("host swap limit %d 30 s after the lock was released, want %d", got, want)
	}
	if samples.other > 0 || samples.errors > 0 || samples.ones == 0 {
		t.Errorf("dra_swap_nri_connected was not 1 throughout: %s (the runtime dropped the plugin)", samples)
	}
}

func describeLimit(b int64) string { return fmt.Sprintf("%dMi", b>>20) }

// waitNRIConnected waits until the plugin is registered with the runtime
// over NRI, when the node's runtime serves it: a plugin pod that just
// replaced another (a rollout) registers once the old one let go of the
// registration, a few seconds later, and a resize before that is only
// corrected by the NRI synchronization or the verifier's interval.
func (c *env) waitNRIConnected(t *testing.T) {
	t.Helper()
	if c.Env["NRI_DISABLE"] == "1" {
		return
	}
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		return c.pluginCounter(t, "dra_swap_nri_connected", "") == 1, nil
	})
	if err != nil {
		t.Fatalf("the plugin is not registered with the runtime over NRI (dra_swap_nri_connected != 1)")
	}
}

// gaugeSamples counts what a gaugeSampler read.
type gaugeSamples struct{ ones, other, errors int }

func (s gaugeSamples) String() string {
	return fmt.Sprintf("%d at 1, %d otherwise, %d failed reads", s.ones, s.other, s.errors)
}

type gaugeSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	got  gaugeSamples
}

// sampleGauge reads the gauge name (a series without labels) from the
// metrics page at url every interval until stop.
func sampleGauge(url, name string, interval time.Duration) *gaugeSampler {
	s := &gaugeSampler{done: make(chan struct{})}
	client := &http.Client{Timeout: interval * 5}
	s.wg.Go(func() {
		for {
			select {
			case <-s.done:
				return
			case <-time.After(interval):
			}
			v, err := readGauge(client, url, name)
			switch {
			case err != nil:
				s.got.errors++
			case v == 1:
				s.got.ones++
			default:
				s.got.other++
			}
		}
	})
	return s
}

func (s *gaugeSampler) stop() gaugeSamples {
	close(s.done)
	s.wg.Wait()
	return s.got
}

func readGauge(client *http.Client, url, name string) (float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}

// TestOverGrantAfterMemoryDecrease (cgroup v1): a container with a 64Mi claim and a 256Mi memory limit (memsw
// 320Mi) holds 240Mi, which memory pressure has pushed to swap (the test
// lowers its memory limit on the node for a moment, under the hook
// state's lock so that the verifier does not see it), and is then
// resized to a 128Mi memory limit. runc lowers memory.limit_in_bytes, but
// the kernel refuses to lower memsw below the 240Mi+ the container uses
// (EBUSY), so the container may swap 192Mi instead of 64Mi, and so does
// the verifier's write of 128Mi + 64Mi. The plugin says so once
// (SwapLimitNotRestored), shows it in dra_swap_over_granted_bytes and the
// claim's SwapApplied condition (False, LimitNotHeld), and, once the
// container frees its memory, writes the claim's limit back and clears
// both.
func TestOverGrantAfterMemoryDecrease(t *testing.T) {
	c := loadCluster(t, needsNode("lowers the container's memory limit on the node and reads its cgroup"))
	if c.cgroupVersion(t) != 1 {
		t.Skip("cgroup v1 only: v2's memory.swap.max takes any value, and bounds swap alone")
	}
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	const claim = 64 * mi
	c.swapTemplate(t, ns, "swap-64", "", claim)
	pod := c.WorkloadPod(ns, "decreased", map[string]string{"swap": "swap-64"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 240, MemLimit: "256Mi", CPU: "100m", Hold: 1800})
	pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: "MMAP", Value: "1"})
	p := c.createPod(t, pod)
	p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
	start := time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		_, ok, err := c.Report(p, "worker", "MAPPED")
		return ok, err
	}); err != nil {
		t.Fatalf("the container did not map its memory: %v", err)
	}
	version, root, group := c.hostCgroup(t, p, "worker")
	read := func() int64 {
		got, err := cgroupswap.ReadLimit(version, root, group)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := read(); got != claim {
		t.Fatalf("before the resize: host swap limit %s, want %s", describeLimit(got), describeLimit(claim))
	}
	memDir := filepath.Join(root, "memory", group)
	file := func(name string) int64 {
		data, err := os.ReadFile(filepath.Join(memDir, name))
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	setLimit := func(v int64) error {
		return os.WriteFile(filepath.Join(memDir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(v, 10)), 0)
	}
	// Memory pressure, for a moment: the container's memory goes to swap
	// (the kernel reclaims as the limit is written; it refuses a limit it
	// cannot reclaim down to).
	unlock, err := hookstate.Lock(filepath.Join(c.Dir, "run", "hook"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var pressed error
	for _, low := range []int64{48 * mi, 96 * mi} {
		if pressed = setLimit(low); pressed == nil {
			break
		}
	}
	restored := setLimit(256 * mi)
	unlock()
	if pressed != nil || restored != nil {
		t.Fatalf("lowering the container's memory limit for a moment: %v; setting it back to 256Mi: %v", pressed, restored)
	}
	t.Logf("pushed to swap: memory usage %dMi, memory+swap usage %dMi", file("memory.usage_in_bytes")>>20, file("memory.memsw.usage_in_bytes")>>20)
	if got := read(); got != claim {
		t.Fatalf("after the memory pressure: host swap limit %s, want %s", describeLimit(got), describeLimit(claim))
	}

	patch := `{"spec":{"containers":[{"name":"worker","resources":{"requests":{"memory":"128Mi","cpu":"100m"},"limits":{"memory":"128Mi","cpu":"100m"}}}]}}`
	if _, err := c.client.CoreV1().Pods(ns).Patch(context.Background(), p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatal(err)
	}
	// The kubelet lowers the memory limit; memsw stays: 320Mi − 128Mi.
	var got int64
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		got = read()
		return got == 192*mi, nil
	}); err != nil {
		t.Fatalf("after the resize: host swap limit %s, want 192Mi (memsw 320Mi over a 128Mi memory limit)", describeLimit(got))
	}
	c.waitEvent(t, p, corev1.EventTypeWarning, "SwapLimitNotRestored", "is 192Mi, 128Mi more than its claims' 64Mi")
	claimName := ""
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			claimName = *s.ResourceClaimName
		}
	}
	c.waitClaimCondition(t, ns, claimName, metav1.ConditionFalse, "container worker: swap limit 192Mi, 128Mi more than its claims grant (64Mi)")
	if v := c.pluginCounter(t, "dra_swap_over_granted_bytes", ""); v != float64(128*mi) {
		t.Errorf("dra_swap_over_granted_bytes = %v, want %d", v, 128*mi)
	}
	if v := c.pluginCounter(t, "dra_swap_limits_not_restored", ""); v != 1 {
		t.Errorf("dra_swap_limits_not_restored = %v, want 1", v)
	}

	// The container frees its memory: its usage fits, and the claim's
	// limit is written back (at most FirstRetry after the last write, at
	// the verifier's next pass).
	freed := time.Now()
	c.signalContainer(t, version, root, group, syscall.SIGUSR1)
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		got = read()
		return got == claim, nil
	}); err != nil {
		t.Fatalf("after the container freed its memory: host swap limit %s, want the claim's %s", describeLimit(got), describeLimit(claim))
	}
	t.Logf("the claim's limit held again %v after the container freed its memory", time.Since(freed).Round(time.Millisecond))
	c.waitClaimCondition(t, ns, claimName, metav1.ConditionTrue, "swap limit applied")
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(30*time.Second), true, func(context.Context) (bool, error) {
		return c.pluginCounter(t, "dra_swap_limits_not_restored", "") == 0 && c.pluginCounter(t, "dra_swap_over_granted_bytes", "") == 0, nil
	}); err != nil {
		t.Errorf("dra_swap_limits_not_restored and dra_swap_over_granted_bytes not back to 0")
	}
	t.Logf("took %v from the pod's start", time.Since(start).Round(time.Second))
}

// signalContainer sends sig to every process of the container's cgroup
// on the node.
func (c *env) signalContainer(t *testing.T, version int, root, group string, sig syscall.Signal) {
	t.Helper()
	dir := filepath.Join(root, group)
	if version == 1 {
		dir = filepath.Join(root, "memory", group)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("signal process %d of %s: %v", pid, dir, err)
		}
	}
}
