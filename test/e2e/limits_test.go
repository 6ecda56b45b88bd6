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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
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
// (PostUpdateContainer), counted with trigger "update" and reported in a
// SwapLimitRestored event.
func TestLimitsHoldAfterResize(t *testing.T) {
	c := loadCluster(t)
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
	updatesBefore := c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="update"`)
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
	updates := c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="update"`) - updatesBefore
	failures := c.pluginCounter(t, "dra_swap_limit_restore_failures_total", "") - failuresBefore
	t.Logf("cgroup v%d: %d of %d resizes left a window; restored after an update (NRI): %v; restore failures: %v", version, drifted, len(steps), updates, failures)
	if failures != 0 {
		t.Errorf("%v restore failures during the resizes", failures)
	}
	if version == 1 && c.Env["NRI_DISABLE"] != "1" {
		// containerd drops the swap value of an update on v1: every
		// resize rewrites memsw, and the NRI plugin restores it.
		if updates < float64(len(steps)) {
			t.Errorf("restored after an update %v times, want at least %d (one per resize): the NRI path did not restore the limits", updates, len(steps))
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
	c := loadCluster(t)
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
	c := loadCluster(t)
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
	c := loadCluster(t)
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
