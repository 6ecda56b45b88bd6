package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// hotColdLine is a HOTCOLD line of the workload's hot/cold mode
// (test/e2e/images/workload/hotcold.go).
type hotColdLine struct {
	Phase          string  `json:"phase"`
	Seconds        float64 `json:"seconds"`
	OpsPerSecond   float64 `json:"opsPerSecond"`
	MemoryCurrent  int64   `json:"memoryCurrent"`
	Anon           int64   `json:"anon"`
	File           int64   `json:"file"`
	SwapCurrent    int64   `json:"swapCurrent"`
	Zswap          int64   `json:"zswap"`
	StallSomeTotal int64   `json:"stallSomeTotalMicros"`
	Kernel         string  `json:"kernel"`
	ZswapEnabled   string  `json:"zswapEnabled"`
	Compressor     string  `json:"zswapCompressor"`
}

// benchEnv reads a benchmark knob from the environment.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// offloadNode is the node whose swap device says it offloads.
func offloadNode(ctx context.Context, c *cluster.Cluster) (string, *resourceapi.Device, error) {
	list, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", nil, err
	}
	for _, s := range list.Items {
		if s.Spec.Driver != v1alpha1.DriverName || s.Spec.NodeName == nil || len(s.Spec.Devices) == 0 {
			continue
		}
		d := s.Spec.Devices[0]
		if a := d.Attributes[v1alpha1.AttrOffload]; a.BoolValue != nil && *a.BoolValue {
			return *s.Spec.NodeName, &d, nil
		}
	}
	return "", nil, fmt.Errorf("no node's swap device offloads (attribute %s): the benchmark needs a cgroup v2 node", v1alpha1.AttrOffload)
}

// BenchmarkOffload is `make bench-offload`: on the node that offloads (the
// cgroup v2 node of the two-node cluster), side by side and in rotating
// order each round, the same hot/cold workload (HOT_MIB hot, COLD_MIB
// cold, within a LIMIT memory limit) without a claim, with a swap claim
// and with a swap claim that asks for offload at BUDGET percent; it
// prints each pod's memory (memory.current, anonymous, file), swap and
// operations per second over time, and a summary per kind (the last
// quarter of each run, the mean over rounds). Then the density: copies of
// a smaller hot/cold pod added one at a time, with and without offload,
// until one is OOM-killed, evicted or does not start (or MAX copies). A
// measurement, not a test.
func BenchmarkOffload(b *testing.B) {
	c, err := cluster.Load("")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	node, dev, err := offloadNode(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	var (
		rounds  = benchEnv("BENCH_OFFLOAD_ROUNDS", 2)
		seconds = benchEnv("BENCH_OFFLOAD_SECONDS", 240)
		hot     = benchEnv("BENCH_OFFLOAD_HOT_MIB", 64)
		cold    = benchEnv("BENCH_OFFLOAD_COLD_MIB", 64)
		limit   = benchEnv("BENCH_OFFLOAD_LIMIT_MIB", 192)
		budget  = os.Getenv("BENCH_OFFLOAD_BUDGET")
	)
	if budget == "" {
		budget = "1"
	}
	ns := "bench-offload-" + rand.String(5)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) }()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		b.Fatal(err)
	}
	template := func(name string, mib int, config string) {
		t := cluster.SwapTemplate(ns, name, "", int64(mib)<<20)
		if config != "" {
			t.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: v1alpha1.DriverName, Parameters: runtime.RawExtension{
					Raw: []byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig",` + config + `}`)}},
			}}}
		}
		if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// The claims hold the whole heap: swap never limits what is moved.
	template("plain", hot+cold, "")
	template("offload", hot+cold, `"offload":{"maxStallPercent":`+budget+`}`)
	kinds := []string{"no claim", "claim", "claim with offload"}
	templateOf := map[string]string{"claim": "plain", "claim with offload": "offload"}
	pod := func(name, kind string, hot, cold, limit, seconds int) *corev1.Pod {
		templates, claims := map[string]string{}, []string(nil)
		if t := templateOf[kind]; t != "" {
			templates["swap"], claims = t, []string{"swap"}
		}
		p := c.WorkloadPod(ns, name, templates, cluster.Container{Name: "worker", Claims: claims, MemLimit: fmt.Sprintf("%dMi", limit)})
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		k := &p.Spec.Containers[0]
		// A small request: the node's memory, not the scheduler, decides
		// how many fit (the density).
		k.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")}
		k.Env = append(k.Env, corev1.EnvVar{Name: "HOT_MIB", Value: strconv.Itoa(hot)}, corev1.EnvVar{Name: "COLD_MIB", Value: strconv.Itoa(cold)},
			corev1.EnvVar{Name: "DURATION_SECONDS", Value: strconv.Itoa(seconds)}, corev1.EnvVar{Name: "REPORT_SECONDS", Value: "10"})
		return p
	}

	var report strings.Builder
	series := map[string][][]hotColdLine{} // kind -> round -> lines
	var nodeLine hotColdLine
	b.ResetTimer()
	for round := range rounds {
		var names []string
		for k := range kinds {
			kind := kinds[(round+k)%len(kinds)]
			name := fmt.Sprintf("r%d-%s", round, strings.ReplaceAll(kind, " ", "-"))
			if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod(name, kind, hot, cold, limit, seconds), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			names = append(names, name)
		}
		for k, name := range names {
			kind := kinds[(round+k)%len(kinds)]
			lines, err := waitHotCold(ctx, c, ns, name, time.Duration(seconds)*time.Second+cluster.Scaled(3*time.Minute))
			if err != nil {
				b.Fatalf("round %d, %s: %v", round, kind, err)
			}
			if lines[0].Kernel != "" {
				nodeLine = lines[0]
			}
			series[kind] = append(series[kind], lines)
		}
		for _, name := range names {
			_ = c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		if err := waitPodsGone(ctx, c, ns); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()

	fmt.Fprintf(&report, "node %s: kernel %s, swap %s MiB on %s, zswap %s (compressor %s); %d rounds of %d s, the three pods side by side in rotating order\n",
		node, nodeLine.Kernel, attrInt(dev, "totalBytes", 20), attrString(dev, "medium"), nodeLine.ZswapEnabled, nodeLine.Compressor,
		rounds, seconds)
	fmt.Fprintf(&report, "the offload loop: %s\n", loopSettings(ctx, c, node))
	fmt.Fprintf(&report, "workload: %d MiB hot (read and written in a loop), %d MiB cold (written once), memory limit %d Mi; offload budget %s %%\n\n",
		hot, cold, limit, budget)
	fmt.Fprintf(&report, "over time (round 1; MiB, ops/s in millions, stall %% over each report interval):\n\n")
	fmt.Fprintf(&report, "| s | kind | memory.current | anon | file | swap | Mops/s | stall %% |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, kind := range kinds {
		lines := series[kind][0]
		for i, l := range lines {
			if l.Phase != "running" || i%3 != 1 && i != len(lines)-2 {
				continue
			}
			stall := 100 * float64(l.StallSomeTotal-lines[i-1].StallSomeTotal) / ((l.Seconds - lines[i-1].Seconds) * 1e6)
			fmt.Fprintf(&report, "| %.0f | %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f |\n", l.Seconds, kind, mib(l.MemoryCurrent), mib(l.Anon), mib(l.File),
				mib(l.SwapCurrent), l.OpsPerSecond/1e6, stall)
		}
	}
	fmt.Fprintf(&report, "\nsummary (the last quarter of each run, mean over rounds):\n\n")
	fmt.Fprintf(&report, "| kind | memory.current MiB | anon MiB | swap MiB | Mops/s | stall %% | resident vs no claim | ops/s vs no claim |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	summary := map[string]steady{}
	for _, kind := range kinds {
		summary[kind] = steadyState(series[kind])
	}
	base := summary["no claim"]
	for _, kind := range kinds {
		s := summary[kind]
		fmt.Fprintf(&report, "| %s | %.0f | %.0f | %.0f | %.2f | %.3f | %+.0f %% | %+.1f %% |\n", kind, mib(int64(s.memory)), mib(int64(s.anon)), mib(int64(s.swap)),
			s.ops/1e6, s.stall*100, 100*(s.memory/base.memory-1), 100*(s.ops/base.ops-1))
	}
	// The report so far, logged and written to BENCH_REPORT: the
	// side-by-side figures before the density runs (it drives the node
	// towards its memory's end and may not come back), then all of it.
	flush := func() {
		b.Log("\n" + report.String())
		if path := os.Getenv("BENCH_REPORT"); path != "" {
			_ = os.WriteFile(path, []byte(report.String()), 0o644)
		}
	}
	flush()
	if os.Getenv("BENCH_OFFLOAD_DENSITY") != "0" {
		density(b, ctx, c, ns, node, pod, &report)
		flush()
	}
}

// steady is one kind's figures over the last quarter of its runs.
type steady struct{ memory, anon, swap, ops, stall float64 }

func steadyState(runs [][]hotColdLine) steady {
	var s steady
	n := 0
	for _, lines := range runs {
		var running []hotColdLine
		for _, l := range lines {
			if l.Phase == "running" {
				running = append(running, l)
			}
		}
		if len(running) < 4 {
			continue
		}
		q := running[len(running)*3/4:]
		first, last := q[0], q[len(q)-1]
		for _, l := range q {
			s.memory += float64(l.MemoryCurrent) / float64(len(q))
			s.anon += float64(l.Anon) / float64(len(q))
			s.swap += float64(l.SwapCurrent) / float64(len(q))
			s.ops += l.OpsPerSecond / float64(len(q))
		}
		if last.Seconds > first.Seconds {
			s.stall += float64(last.StallSomeTotal-first.StallSomeTotal) / ((last.Seconds - first.Seconds) * 1e6)
		}
		n++
	}
	if n > 0 {
		s.memory, s.anon, s.swap, s.ops, s.stall = s.memory/float64(n), s.anon/float64(n), s.swap/float64(n), s.ops/float64(n), s.stall/float64(n)
	}
	return s
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func attrString(d *resourceapi.Device, name resourceapi.QualifiedName) string {
	if a := d.Attributes[name]; a.StringValue != nil {
		return *a.StringValue
	}
	return "?"
}

func attrInt(d *resourceapi.Device, name resourceapi.QualifiedName, shift uint) string {
	if a := d.Attributes[name]; a.IntValue != nil {
		return strconv.FormatInt(*a.IntValue>>shift, 10)
	}
	return "?"
}

// waitHotCold waits until the pod finished and returns its HOTCOLD lines,
// read through the API server (the pod may be on another node).
func waitHotCold(ctx context.Context, c *cluster.Cluster, ns, name string, timeout time.Duration) ([]hotColdLine, error) {
	var p *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed), nil
	}); err != nil {
		return nil, fmt.Errorf("pod %s did not finish: %w (%s)", name, err, whereStuck(ctx, c, p))
	}
	if p.Status.Phase == corev1.PodFailed {
		return nil, fmt.Errorf("pod %s failed: %+v", name, p.Status.ContainerStatuses)
	}
	return hotColdLines(ctx, c, ns, name)
}

// whereStuck says where a pod that did not finish is: its phase, its
// containers' waiting reasons and the last warning event about it.
func whereStuck(ctx context.Context, c *cluster.Cluster, p *corev1.Pod) string {
	if p == nil {
		return "never read"
	}
	out := fmt.Sprintf("phase %s on %q", p.Status.Phase, p.Spec.NodeName)
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			out += fmt.Sprintf(", %s waiting: %s %s", s.Name, w.Reason, w.Message)
		}
	}
	events, err := c.Client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name + ",type=Warning"})
	if err == nil && len(events.Items) > 0 {
		e := events.Items[len(events.Items)-1]
		out += fmt.Sprintf(", last warning (%d of them): %s %s", len(events.Items), e.Reason, e.Message)
	}
	return out
}

func hotColdLines(ctx context.Context, c *cluster.Cluster, ns, name string) ([]hotColdLine, error) {
	raw, err := c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: "worker"}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("pod %s's log: %w", name, err)
	}
	var lines []hotColdLine
	s := bufio.NewScanner(strings.NewReader(string(raw)))
	for s.Scan() {
		rest, ok := strings.CutPrefix(s.Text(), "HOTCOLD ")
		if !ok {
			continue
		}
		var l hotColdLine
		if err := json.Unmarshal([]byte(rest), &l); err != nil {
			return nil, fmt.Errorf("pod %s: %q: %w", name, rest, err)
		}
		lines = append(lines, l)
	}
	if len(lines) < 3 {
		return nil, fmt.Errorf("pod %s printed %d HOTCOLD lines", name, len(lines))
	}
	return lines, nil
}

func waitPodsGone(ctx context.Context, c *cluster.Cluster, ns string) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, cluster.Scaled(3*time.Minute), true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
}

// density adds copies of a smaller hot/cold pod to the node one at a
// time, BENCH_DENSITY_SPACING_SECONDS apart, without and with offload, and
// counts how many run while the node keeps BENCH_DENSITY_RESERVE_MIB of
// memory available (the kubelet's own signal, memory.available of its
// summary API, read once each copy has had its spacing to settle): a soft
// eviction threshold set well above the hard one, so that the run ends
// before the node thrashes (an emulated node under memory thrash misses
// its probes and leases, and says nothing of the driver). A copy that is
// OOM-killed, evicted or does not start ends the run too. The copies keep
// their hot set warm at OPS_PER_SECOND (the workload's rate cap), not in
// a busy loop: dozens of them share the node's CPUs.
func density(b *testing.B, ctx context.Context, c *cluster.Cluster, ns, node string, pod func(name, kind string, hot, cold, limit, seconds int) *corev1.Pod, report *strings.Builder) {
	var (
		hot     = benchEnv("BENCH_DENSITY_HOT_MIB", 32)
		cold    = benchEnv("BENCH_DENSITY_COLD_MIB", 96)
		limit   = benchEnv("BENCH_DENSITY_LIMIT_MIB", 160)
		most    = benchEnv("BENCH_DENSITY_MAX", 40)
		reserve = int64(benchEnv("BENCH_DENSITY_RESERVE_MIB", 1024)) << 20
		rate    = benchEnv("BENCH_DENSITY_OPS_PER_SECOND", 100000)
		spacing = time.Duration(benchEnv("BENCH_DENSITY_SPACING_SECONDS", 30)) * time.Second
	)
	fmt.Fprintf(report, "\ndensity: copies of a %d MiB hot (%d operations/s) / %d MiB cold pod (limit %d Mi) added every %s while the node keeps %d MiB available, until one is OOM-killed, evicted or does not start (at most %d):\n\n",
		hot, rate, cold, limit, spacing, reserve>>20, most)
	fmt.Fprintf(report, "| kind | copies that ran | node memory available after the last, MiB | what ended it |\n|---|---:|---:|---|\n")
	results := map[string]int{}
	for _, kind := range []string{"no claim", "claim with offload"} {
		if kind == "claim with offload" {
			// A claim per copy, of the cold half.
			name := fmt.Sprintf("density-offload-%d", cold)
			t := cluster.SwapTemplate(ns, name, "", int64(cold+hot/2)<<20)
			t.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: v1alpha1.DriverName, Parameters: runtime.RawExtension{
					Raw: []byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":1}}`)}},
			}}}
			if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		ran, why := 0, fmt.Sprintf("reached %d", most)
		var (
			names     []string
			available int64
		)
	copies:
		for i := range most {
			name := fmt.Sprintf("d-%s-%02d", strings.ReplaceAll(kind, " ", "-"), i)
			p := pod(name, kind, hot, cold, limit, 0)
			if kind == "claim with offload" {
				p.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To(fmt.Sprintf("density-offload-%d", cold))
			}
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "OPS_PER_SECOND", Value: strconv.Itoa(rate)})
			if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			names = append(names, name)
			deadline := time.Now().Add(spacing)
			for time.Now().Before(deadline) || !allStarted(ctx, c, ns, names) {
				if msg := densityFailure(ctx, c, ns, names); msg != "" {
					why = msg
					break copies
				}
				if time.Now().After(deadline.Add(cluster.Scaled(2 * time.Minute))) {
					// Say where: the copies not running yet.
					var stuck []string
					for _, n := range names {
						if got, err := c.Client.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{}); err == nil && got.Status.Phase != corev1.PodRunning {
							stuck = append(stuck, n+": "+whereStuck(ctx, c, got))
						}
					}
					why = fmt.Sprintf("copy %d did not start within %s (%s)", i+1, cluster.Scaled(2*time.Minute), strings.Join(stuck, "; "))
					break copies
				}
				time.Sleep(2 * time.Second)
			}
			// A saturated node's kubelet may not answer one read in
			// time: read again for a minute before giving up.
			var (
				a    int64
				last error
			)
			err := wait.PollUntilContextTimeout(ctx, 2*time.Second, cluster.Scaled(time.Minute), true, func(ctx context.Context) (bool, error) {
				a, last = nodeMemoryAvailable(ctx, c, node)
				return last == nil, nil
			})
			if err != nil {
				why = fmt.Sprintf("reading the node's memory.available after copy %d: %v (%v)", i+1, err, last)
				break
			}
			if a < reserve {
				why = fmt.Sprintf("copy %d left %d MiB available, under the %d MiB reserve", i+1, a>>20, reserve>>20)
				break
			}
			ran, available = i+1, a
		}
		results[kind] = ran
		fmt.Fprintf(report, "| %s | %d | %d | %s |\n", kind, ran, available>>20, why)
		b.Logf("density, %s: %d copies (%s)", kind, ran, why)
		for _, name := range names {
			_ = c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		if err := waitPodsGone(ctx, c, ns); err != nil {
			b.Fatal(err)
		}
	}
	if base := results["no claim"]; base > 0 {
		fmt.Fprintf(report, "\ndensity with offload: %.2f× the same node without\n", float64(results["claim with offload"])/float64(base))
	}
}

// readNodeSummary is the node's part of its kubelet's summary API
// (stats/summary), the figures the eviction manager uses.
func readNodeSummary(ctx context.Context, c *cluster.Cluster, node string) (statsapi.Summary, error) {
	var summary statsapi.Summary
	raw, err := c.Client.CoreV1().RESTClient().Get().Resource("nodes").Name(node).SubResource("proxy").Suffix("stats/summary").DoRaw(ctx)
	if err != nil {
		return summary, err
	}
	if err := json.Unmarshal(raw, &summary); err != nil {
		return summary, fmt.Errorf("node %s's summary: %w", node, err)
	}
	return summary, nil
}

// nodeMemoryAvailable is the node's memory.available as its kubelet's
// eviction manager computes it (the summary API's node.memory.availableBytes).
func nodeMemoryAvailable(ctx context.Context, c *cluster.Cluster, node string) (int64, error) {
	summary, err := readNodeSummary(ctx, c, node)
	if err != nil {
		return 0, err
	}
	s := summary.Node
	if s.Memory == nil || s.Memory.AvailableBytes == nil {
		return 0, fmt.Errorf("node %s's summary has no memory.availableBytes", node)
	}
	return int64(*s.Memory.AvailableBytes), nil
}

// cpuReading is a node's CPU time used since boot, when it was read, and
// its cores; plugin is the CPU time of the kubelet plugin's pod on it (the
// kernel's reclaim on the offload loop's behalf included), -1 when the
// summary has none.
type cpuReading struct {
	at     time.Time
	used   time.Duration
	plugin time.Duration
	cores  int64
}

// busySince is the mean number of cores busy between two readings.
func (r cpuReading) busySince(before cpuReading) float64 {
	if !r.at.After(before.at) {
		return 0
	}
	return float64(r.used-before.used) / float64(r.at.Sub(before.at))
}

// pluginSince is the mean number of cores the plugin's pod used between
// two readings, -1 when either has none (a plugin pod restarted between
// them counts from its new start).
func (r cpuReading) pluginSince(before cpuReading) float64 {
	if !r.at.After(before.at) || r.plugin < 0 || before.plugin < 0 || r.plugin < before.plugin {
		return -1
	}
	return float64(r.plugin-before.plugin) / float64(r.at.Sub(before.at))
}

// nodeCPU reads the node's CPU use (the summary API's
// node.cpu.usageCoreNanoSeconds) and its capacity.
func nodeCPU(ctx context.Context, c *cluster.Cluster, node string) (cpuReading, error) {
	summary, err := readNodeSummary(ctx, c, node)
	if err != nil {
		return cpuReading{}, err
	}
	s := summary.Node
	if s.CPU == nil || s.CPU.UsageCoreNanoSeconds == nil {
		return cpuReading{}, fmt.Errorf("node %s's summary has no cpu.usageCoreNanoSeconds", node)
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return cpuReading{}, err
	}
	r := cpuReading{at: s.CPU.Time.Time, used: time.Duration(*s.CPU.UsageCoreNanoSeconds), plugin: -1, cores: n.Status.Capacity.Cpu().Value()}
	for _, p := range summary.Pods {
		if isPluginPod(p.PodRef.Namespace, p.PodRef.Name) && p.CPU != nil && p.CPU.UsageCoreNanoSeconds != nil {
			r.plugin = time.Duration(*p.CPU.UsageCoreNanoSeconds)
		}
	}
	return r, nil
}

// allStarted reports whether every named pod runs.
func allStarted(ctx context.Context, c *cluster.Cluster, ns string, names []string) bool {
	for _, name := range names {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false
		}
	}
	return true
}

// densityFailure says which of the named pods was OOM-killed, evicted or
// failed, "" while none was.
func densityFailure(ctx context.Context, c *cluster.Cluster, ns string, names []string) string {
	for _, name := range names {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if p.Status.Reason == "Evicted" {
			return fmt.Sprintf("%s evicted: %s", name, p.Status.Message)
		}
		for _, s := range p.Status.ContainerStatuses {
			for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
				if t != nil {
					msg := t.Message
					if len(msg) > 300 {
						msg = msg[len(msg)-300:] // the runtime's message ends with the cause
					}
					return fmt.Sprintf("%s %s (exit %d): %s", name, t.Reason, t.ExitCode, msg)
				}
			}
		}
		if p.Status.Phase == corev1.PodFailed {
			return fmt.Sprintf("%s failed: %s", name, p.Status.Message)
		}
	}
	return ""
}

// offloadLoopStats are the plugin's offload loop figures at one time.
type offloadLoopStats struct {
	containers, passes, passSeconds, reclaimed float64
}

// pluginMetrics scrapes the kubelet plugin on the cluster's node.
func pluginMetrics(ctx context.Context, c *cluster.Cluster) (string, error) {
	pods, err := nodePluginPods(ctx, c)
	if err != nil {
		return "", err
	}
	for i := range pods {
		if p := &pods[i]; p.Status.Phase == corev1.PodRunning {
			return scrapeMetrics(ctx, p)
		}
	}
	return "", fmt.Errorf("no running kubelet plugin pod on node %s", c.Node)
}

// nodePluginPods are the kubelet plugin's pods on the cluster's node.
func nodePluginPods(ctx context.Context, c *cluster.Cluster) ([]corev1.Pod, error) {
	return pluginPodsOn(ctx, c, c.Node)
}

// pluginPodsOn lists the kubelet plugin's pods on a node.
func pluginPodsOn(ctx context.Context, c *cluster.Cluster, node string) ([]corev1.Pod, error) {
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !isPluginPod(p.Namespace, p.Name) }), nil
}

// isPluginPod says whether a pod is one of the kubelet plugin's (the
// DaemonSet's pods are named for it).
func isPluginPod(namespace, name string) bool {
	return namespace == driverNamespace && strings.Contains(name, "kubeletplugin")
}

// loopSettings says how the plugin on a node runs its offload loop: its
// --offload-* flags as its pod has them (the chart's values as installed,
// not as the benchmark assumes them).
func loopSettings(ctx context.Context, c *cluster.Cluster, node string) string {
	pods, err := pluginPodsOn(ctx, c, node)
	if err != nil {
		return fmt.Sprintf("not known (%v)", err)
	}
	var flags []string
	for _, p := range pods {
		for _, k := range p.Spec.Containers {
			for _, a := range k.Args {
				if strings.HasPrefix(a, "--offload-") && !slices.Contains(flags, a) {
					flags = append(flags, a)
				}
			}
		}
	}
	if len(flags) == 0 {
		return "not known (no --offload-* flags on the plugin's pod: the binary's defaults)"
	}
	return strings.Join(flags, " ")
}

// nodePluginRestarts sums the restart counts of the kubelet plugin's
// containers on the cluster's node and says the last termination of each
// that restarted.
func nodePluginRestarts(ctx context.Context, c *cluster.Cluster) (int32, string, error) {
	pods, err := nodePluginPods(ctx, c)
	if err != nil {
		return 0, "", err
	}
	var (
		n    int32
		last []string
	)
	for _, p := range pods {
		for _, s := range p.Status.ContainerStatuses {
			n += s.RestartCount
			if t := s.LastTerminationState.Terminated; s.RestartCount > 0 && t != nil {
				last = append(last, fmt.Sprintf("%s/%s: %s, exit %d at %s", p.Name, s.Name, t.Reason, t.ExitCode, t.FinishedAt.UTC().Format(time.TimeOnly)))
			}
		}
	}
	return n, strings.Join(last, "; "), nil
}

// loopStats reads the offload loop's figures from the plugin's metrics.
func loopStats(ctx context.Context, c *cluster.Cluster) (offloadLoopStats, error) {
	page, err := pluginMetrics(ctx, c)
	if err != nil {
		return offloadLoopStats{}, err
	}
	var s offloadLoopStats
	for line := range strings.Lines(page) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch {
		case name == "dra_swap_offload_containers":
			s.containers = v
		case name == "dra_swap_offload_pass_duration_seconds_count":
			s.passes = v
		case name == "dra_swap_offload_pass_duration_seconds_sum":
			s.passSeconds = v
		case strings.HasPrefix(name, "dra_swap_offload_reclaimed_bytes_total{"):
			s.reclaimed += v
		}
	}
	return s, nil
}

// startOffloading runs n small hot/cold pods whose claims ask for offload
// on the cluster's node and waits until the plugin's loop drives them all
// and has reclaimed from them. With idle, their claims do not ask for
// offload (the same pods, claims and memory, the loop with nothing to do:
// the floor the loop's cost shows against), and it waits until they run.
func startOffloading(b *testing.B, ctx context.Context, c *cluster.Cluster, ns string, n int, idle bool) offloadLoopStats {
	t := cluster.SwapTemplate(ns, "offloaded", "", 24<<20)
	if !idle {
		t.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: v1alpha1.DriverName, Parameters: runtime.RawExtension{
				Raw: []byte(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":1}}`)}},
		}}}
	}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		p := c.WorkloadPod(ns, fmt.Sprintf("offloaded-%02d", i), map[string]string{"swap": "offloaded"},
			cluster.Container{Name: "worker", Claims: []string{"swap"}, MemLimit: "48Mi"})
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		k := &p.Spec.Containers[0]
		// 20,000 operations a second each: the pods keep their hot pages
		// hot without taking the node's CPU (20 unpaced loops took all of
		// the emulated guest's two CPUs, and the kubelet plugin's share
		// of them with it).
		k.Env = append(k.Env, corev1.EnvVar{Name: "HOT_MIB", Value: "8"}, corev1.EnvVar{Name: "COLD_MIB", Value: "16"},
			corev1.EnvVar{Name: "REPORT_SECONDS", Value: "60"}, corev1.EnvVar{Name: "OPS_PER_SECOND", Value: "20000"})
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var (
		s       offloadLoopStats
		scrapes error
	)
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, cluster.Scaled(5*time.Minute), true, func(ctx context.Context) (bool, error) {
		s, scrapes = loopStats(ctx, c)
		if idle {
			ready := 0
			if pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
				for _, p := range pods.Items {
					if strings.HasPrefix(p.Name, "offloaded-") && podReady(&p) {
						ready++
					}
				}
			}
			return scrapes == nil && ready >= n, nil
		}
		return scrapes == nil && s.containers >= float64(n) && s.reclaimed > 0, nil
	}); err != nil {
		// Say why: the last scrape's error and where the pods are.
		phases := map[string]int{}
		if pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, p := range pods.Items {
				phases[fmt.Sprintf("%s on %q", p.Status.Phase, p.Spec.NodeName)]++
			}
		}
		b.Fatalf("the offload loop on node %s drives %.0f of the %d offloaded pods' containers and reclaimed %.0f bytes: %v (last scrape: %v; pods: %v)",
			c.Node, s.containers, n, s.reclaimed, err, scrapes, phases)
	}
	return s
}

// reportOffloading says what the loop did while the pods were measured.
func reportOffloading(b *testing.B, ctx context.Context, c *cluster.Cluster, ns string, before offloadLoopStats, n int, idle bool, report *strings.Builder) {
	after, err := loopStats(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	passes := after.passes - before.passes
	mean := 0.0
	if passes > 0 {
		mean = (after.passSeconds - before.passSeconds) / passes * 1000
	}
	states, err := offloadStates(ctx, c, ns)
	if err != nil {
		states = fmt.Sprintf("not known (%v)", err)
	}
	pods := "pods with offload claims"
	if idle {
		pods = "pods with claims without offload (BENCH_OFFLOAD_IDLE: the loop's floor)"
	}
	fmt.Fprintf(report, "meanwhile the offload loop (%s) drove %.0f containers (%d %s): %.0f passes of %.2f ms mean, %.1f MiB reclaimed\n",
		loopSettings(ctx, c, c.Node), after.containers, n, pods, passes, mean, (after.reclaimed-before.reclaimed)/(1<<20))
	fmt.Fprintf(report, "the offload claims' states (their status): %s\n", states)
	b.ReportMetric(mean, "offload-pass-ms")
}

// offloadStates counts the offload claims in a namespace by the state
// their status has (data.offload.state), with their mean stall.
func offloadStates(ctx context.Context, c *cluster.Cluster, ns string) (string, error) {
	claims, err := c.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	count := map[string]int{}
	var stall float64
	n := 0
	for _, claim := range claims.Items {
		for _, d := range claim.Status.Devices {
			if d.Data == nil {
				continue
			}
			var data struct {
				Offload *struct {
					State        string  `json:"state"`
					StallPercent float64 `json:"stallPercent"`
				} `json:"offload"`
			}
			if json.Unmarshal(d.Data.Raw, &data) != nil || data.Offload == nil {
				continue
			}
			count[data.Offload.State]++
			stall += data.Offload.StallPercent
			n++
		}
	}
	if n == 0 {
		return "none in their status yet", nil
	}
	var parts []string
	for _, state := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s %d", state, count[state]))
	}
	return fmt.Sprintf("%s; mean stall %.2f %%", strings.Join(parts, ", "), stall/float64(n)), nil
}
