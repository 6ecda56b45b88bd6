package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// TestKubeletAndRuntimeRestart: the kubelet, then containerd, restarted
// while a claim pod runs: its limit is unchanged, a new claim pod gets its
// limit, and after containerd's restart the plugin registers with its NRI
// socket again.
func TestKubeletAndRuntimeRestart(t *testing.T) {
	c := loadCluster(t, needsNode("restarts the node's kubelet and containerd"))
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	const want = 60 * mi
	c.swapTemplate(t, ns, "swap-60", "", want)
	running := c.runningClaimPod(t, ns, "through-restarts", "swap-60", want)
	for _, component := range []string{"kubelet", c.runtime()} {
		t.Logf("%s", strings.TrimSpace(c.script(t, "restart.sh", component)))
		if got := c.hostSwapLimit(t, running, "worker"); got != want {
			t.Errorf("after the %s restart: running container's swap limit %d, want %d", component, got, want)
		}
		fresh := c.createPod(t, c.WorkloadPod(ns, "after-"+component+"-restart", map[string]string{"swap": "swap-60"},
			ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
		fresh = c.waitPod(t, ns, fresh.Name, "completion", podTimeout, finished)
		if fresh.Status.Phase != corev1.PodSucceeded {
			t.Errorf("after the %s restart: new claim pod %s, reason %s", component, fresh.Status.Phase, terminatedReason(fresh, "worker"))
			continue
		}
		assertSwapLimit(t, c.report(t, fresh, "worker", "START"), want)
	}
	if c.Env["NRI_DISABLE"] == "1" {
		return
	}
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		return c.pluginCounter(t, "dra_swap_nri_connected", "") == 1, nil
	})
	if err != nil {
		t.Errorf("the plugin did not register with %s's NRI socket again after %s restarted", c.runtime(), c.runtime())
	}
}

// TestPluginKilledDuringBurst: the plugin is killed with SIGKILL while a
// burst of claim pods is being prepared; the kubelet restarts its
// container. Every pod ends Running with its exact limit, and once they
// are deleted no CDI spec, checkpoint entry or hook record is left.
func TestPluginKilledDuringBurst(t *testing.T) {
	c := loadCluster(t, needsNode("kills the plugin's process on the node and reads its checkpoint and the hook's records"))
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	ctx := context.Background()
	n := 12
	if cluster.Emulated() {
		n = 6 // the emulated node starts a pod in seconds, not milliseconds
	}
	var pods []*corev1.Pod
	for i := range n {
		mib := int64(20 + i)
		tmpl := fmt.Sprintf("swap-%d", mib)
		c.swapTemplate(t, ns, tmpl, "", mib*mi)
		pods = append(pods, c.createPod(t, c.WorkloadPod(ns, fmt.Sprintf("burst-%d", i), map[string]string{"swap": tmpl},
			ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 1800})))
	}
	// Kill as soon as the first claim is being prepared.
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(filepath.Join(c.dir, "kubelet", "plugins", "dra.swap", "checkpoint.json"))
		return bytes.Contains(data, []byte(`"swapBytes"`)), nil
	})
	if err != nil {
		t.Fatalf("no claim was prepared: %v", err)
	}
	killed := killPlugin(t)
	t.Logf("killed the kubelet plugin (pids %v) with SIGKILL", killed)

	var containers []string
	var claims []string
	for i, p := range pods {
		p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
		want := int64(20+i) * mi
		if got := c.hostSwapLimit(t, p, "worker"); got != want {
			t.Errorf("pod %s: swap limit %d, want %d", p.Name, got, want)
		}
		containers = append(containers, containerID(p, "worker"))
		claims = append(claims, c.claimUID(t, p))
	}
	for i := range n {
		if err := c.client.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("burst-%d", i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, uid := range claims {
		c.waitUnprepared(t, uid)
	}
	// The runtime's poststop hook removes a container's record when the
	// runtime deletes it, which can come after the claim's unprepare; the
	// verifier removes what no poststop did once the cgroup is gone.
	var left []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		left = left[:0]
		for _, id := range containers {
			if _, err := os.Stat(filepath.Join(c.dir, "run", "hook", id)); err == nil {
				left = append(left, id)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("hook records of deleted containers still there after %v: %v", podTimeout, left)
	}
}

// killPlugin sends SIGKILL to every kubelet plugin process on the node.
func killPlugin(t *testing.T) []int {
	t.Helper()
	var killed []int
	for _, pid := range pluginPIDs(t) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed = append(killed, pid)
		}
	}
	if len(killed) == 0 {
		t.Fatal("no kubelet plugin process found to kill")
	}
	return killed
}

// pluginPIDs lists the kubelet plugin processes on the node (the host's
// view of the plugin container's process).
func pluginPIDs(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.HasPrefix(cmdline, []byte("/dra-swap-kubeletplugin\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func containerID(p *corev1.Pod, container string) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			_, id, _ := strings.Cut(s.ContainerID, "://")
			return id
		}
	}
	return ""
}

// TestWithoutNRI: containerd restarted with NRI disabled. The CDI hook
// still applies a claim's limit at create; what the user loses is the
// correction of updates: after an in-place resize the kubelet's value
// stands until the verifier's next pass (measured), which restores it
// with trigger "interval".
func TestWithoutNRI(t *testing.T) {
	c := loadCluster(t, needsNode("restarts the node's containerd with NRI off"))
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	// The runtime's configuration with NRI turned off: containerd's
	// plugin disabled, or CRI-O's enable_nri false.
	cfgPath, section, value := filepath.Join(c.dir, "containerd.toml"), []byte("[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = "), "true"
	if c.runtime() == "crio" {
		cfgPath, section, value = filepath.Join(c.dir, "crio", "crio.conf"), []byte("[crio.nri]\nenable_nri = "), "false"
	}
	orig, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(orig, section)
	if i < 0 {
		t.Fatalf("%s has no NRI section", cfgPath)
	}
	off := append(append(append([]byte{}, orig[:i+len(section)]...), value...), orig[bytes.IndexByte(orig[i+len(section):], '\n')+i+len(section):]...)
	if err := os.WriteFile(cfgPath, off, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(cfgPath, orig, 0o644); err != nil {
			t.Error(err)
		}
		c.script(t, "restart.sh", c.runtime())
		if c.Env["NRI_DISABLE"] != "1" {
			_ = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
				return c.pluginCounter(t, "dra_swap_nri_connected", "") == 1, nil
			})
		}
	})
	// The socket file outlives the containerd that made it; the plugin
	// finds no one listening.
	c.script(t, "restart.sh", c.runtime())
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, cluster.Scaled(time.Minute), true, func(context.Context) (bool, error) {
		return c.pluginCounter(t, "dra_swap_nri_connected", "") == 0, nil
	})
	if err != nil {
		t.Fatalf("dra_swap_nri_connected is still 1 after %s restarted without NRI", c.runtime())
	}

	const want = 100 * mi
	c.swapTemplate(t, ns, "swap-100", "", want)
	p := c.createPod(t, c.WorkloadPod(ns, "hook-only", map[string]string{"swap": "swap-100"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "128Mi", CPU: "100m", Hold: 1800}))
	p = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
	assertSwapLimit(t, c.report(t, p, "worker", "START"), want)
	version, root, group := c.hostCgroup(t, p, "worker")
	read := func() (int64, error) { return cgroupswap.ReadLimit(version, root, group) }
	before := c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="interval"`)
	st := c.resizeAndWatch(t, p, "192Mi", "100m", read, want)
	t.Logf("without NRI, memory resize to 192Mi on cgroup v%d: %s", version, st)
	if version == 1 {
		if st.wrongReads == 0 {
			t.Errorf("without NRI the kubelet's update left memsw right on v1; want the kubelet's value until the verifier restores it")
		}
		if n := c.pluginCounter(t, "dra_swap_limit_restored_total", `trigger="interval"`) - before; n < 1 {
			t.Errorf("restored by the interval %v times, want at least 1", n)
		}
	}
}

// TestChurn: 150 claim pods created and deleted, several at a
// time: a new pod is created as soon as one of the pods in flight has
// finished and been deleted, so the node always has that many pods to
// prepare, start or tear down. Every one had its exact limit (the workload
// reads its own cgroup), afterwards no CDI spec, checkpoint entry or hook
// record is left, and the plugin's RSS is printed at the start, after a
// warm-up tenth of the pods and at the end; from warm-up to the end it must
// not grow by more than a small allocator slack.
func TestChurn(t *testing.T) {
	c := loadCluster(t, needsNode("reads what the plugin leaves on the node (CDI specs, checkpoint, the hook's records) and its memory"))
	defer c.logLimitCounters(t)
	ns := c.namespace(t)
	ctx := context.Background()
	// 150 pods: 135 after the warm-up, so the RSS bound below catches a
	// leak of some 60 KiB per claim; 300 took 6 minutes of make test on a
	// slow 2-core machine for twice that sensitivity.
	total, parallel := 150, 10
	if cluster.Emulated() {
		// The emulated node starts a pod in some 10 s: 150 would take half
		// an hour there, and 20 took 5 minutes of make test's budget.
		// The v1 leg runs the full 150.
		total, parallel = 10, 5
	}
	const templates = 16
	for i := range templates {
		c.swapTemplate(t, ns, fmt.Sprintf("swap-%d", 16+i), "", int64(16+i)*mi)
	}
	pid := pluginPID(t)
	rssStart := rss(t, pid)
	// The first tenth of the pods warms the plugin up (informer caches,
	// gRPC buffers, the Go heap's first growth); a leak shows as growth
	// from there to the end.
	warmUp := max(parallel, total/10)
	var rssBefore int64
	type flight struct {
		index   int
		created time.Time
	}
	inFlight := map[string]flight{}
	next, done := 0, 0
	start := time.Now()
	for (next < total || len(inFlight) > 0) && !t.Failed() {
		for len(inFlight) < parallel && next < total {
			p := c.createPod(t, c.WorkloadPod(ns, fmt.Sprintf("churn-%d", next), map[string]string{"swap": fmt.Sprintf("swap-%d", 16+next%templates)},
				ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
			inFlight[p.Name] = flight{index: next, created: time.Now()}
			next++
		}
		time.Sleep(250 * time.Millisecond)
		pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			f, ok := inFlight[p.Name]
			if !ok || !finished(p) {
				continue
			}
			if p.Status.Phase != corev1.PodSucceeded {
				t.Errorf("pod %s: %s, reason %s", p.Name, p.Status.Phase, terminatedReason(p, "worker"))
			} else {
				assertSwapLimit(t, c.report(t, p, "worker", "START"), int64(16+f.index%templates)*mi)
			}
			if err := c.client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			delete(inFlight, p.Name)
			if done++; done == warmUp {
				rssBefore = rss(t, pid)
			}
		}
		for name, f := range inFlight {
			if time.Since(f.created) > podTimeout {
				t.Fatalf("pod %s/%s: not finished %v after it was created", ns, name, podTimeout)
			}
		}
	}
	c.waitNoPods(t, ns)
	t.Logf("%d claim pods, %d at a time, in %v", total, parallel, time.Since(start).Round(time.Second))
	// Nothing of theirs is left on the node.
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		return len(c.leftovers(t)) == 0, nil
	})
	if err != nil {
		t.Errorf("after the churn: %v", c.leftovers(t))
	}
	if after := pluginPID(t); after != pid {
		t.Fatalf("the plugin restarted during the churn (pid %d, now %d)", pid, after)
	}
	rssAfter := rss(t, pid)
	t.Logf("kubelet plugin RSS: %d KiB at the start, %d KiB after %d warm-up pods, %d KiB after all %d", rssStart, rssBefore, warmUp, rssAfter, total)
	if rssAfter > rssBefore+8*1024 {
		t.Errorf("the plugin's RSS grew from %d KiB to %d KiB over the churn", rssBefore, rssAfter)
	}
}

// leftovers lists what prepared claims left on the node: CDI specs,
// checkpoint entries and hook records.
func (c *env) leftovers(t *testing.T) []string {
	var left []string
	specs, _ := filepath.Glob(filepath.Join(c.dir, "cdi", "dra.swap-swap_*.json"))
	for _, s := range specs {
		left = append(left, "spec "+filepath.Base(s))
	}
	data, err := os.ReadFile(filepath.Join(c.dir, "kubelet", "plugins", "dra.swap", "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte(`"swapBytes"`)); n > 0 {
		left = append(left, fmt.Sprintf("%d checkpoint entries", n))
	}
	records, _ := os.ReadDir(filepath.Join(c.dir, "run", "hook"))
	for _, r := range records {
		if r.IsDir() && !strings.HasPrefix(r.Name(), ".") {
			left = append(left, "hook record "+r.Name())
		}
	}
	return left
}

// pluginPID is the one kubelet plugin process on the node.
func pluginPID(t *testing.T) int {
	t.Helper()
	pids := pluginPIDs(t)
	if len(pids) != 1 {
		t.Fatalf("want one kubelet plugin process, found %v", pids)
	}
	return pids[0]
}

// rss is a process's resident set size in KiB.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
