package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
	"github.com/dra-driver-swap/dra-driver-swap/test/noopdriver"
)

// benchRounds is how many pods of each kind BenchmarkPodStartup creates
// (BENCH_ROUNDS changes it).
var benchRounds = benchEnv("BENCH_ROUNDS", 30)

// kubeletPrepare is the kubelet's dra_grpc_operations_duration_seconds
// for NodePrepareResources of one driver: its sum and count.
type kubeletPrepare struct{ sum, count float64 }

// kubeletPrepareStats reads the kubelet's metrics through the API server.
func kubeletPrepareStats(ctx context.Context, c *cluster.Cluster) (map[string]kubeletPrepare, error) {
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", c.Node, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's metrics: %w", err)
	}
	out := map[string]kubeletPrepare{}
	s := bufio.NewScanner(strings.NewReader(string(raw)))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		var field string
		switch {
		case strings.HasPrefix(line, "dra_grpc_operations_duration_seconds_sum{"):
			field = "sum"
		case strings.HasPrefix(line, "dra_grpc_operations_duration_seconds_count{"):
			field = "count"
		default:
			continue
		}
		// method_name is the gRPC method: "/<package>.DRAPlugin/NodePrepareResources".
		if !strings.Contains(labelValue(line, "method_name"), "/NodePrepareResources") {
			continue
		}
		driver := labelValue(line, "driver_name")
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			continue
		}
		st := out[driver]
		if field == "sum" {
			st.sum += v
		} else {
			st.count += v
		}
		out[driver] = st
	}
	return out, s.Err()
}

// pluginPrepareStats is the kubelet plugin's own time in prepare on the
// node (dra_swap_claim_operation_duration_seconds, operation="prepare",
// one claim per call here), read from its pods' metrics port (the bench
// runs on the node).
func pluginPrepareStats(ctx context.Context, c *cluster.Cluster) (kubeletPrepare, error) {
	list, err := c.Client.CoreV1().Pods(driverNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=kubelet-plugin", FieldSelector: "spec.nodeName=" + c.Node})
	if err != nil {
		return kubeletPrepare{}, fmt.Errorf("the kubelet plugin's pods: %w", err)
	}
	var out kubeletPrepare
	for _, p := range list.Items {
		raw, err := scrapeMetrics(ctx, &p)
		if err != nil {
			return kubeletPrepare{}, fmt.Errorf("the metrics of plugin pod %s: %w", p.Name, err)
		}
		for _, line := range strings.Split(raw, "\n") {
			if !strings.Contains(line, `operation="prepare"`) {
				continue
			}
			v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			if err != nil {
				continue
			}
			switch {
			case strings.HasPrefix(line, "dra_swap_claim_operation_duration_seconds_sum{"):
				out.sum += v
			case strings.HasPrefix(line, "dra_swap_claim_operation_duration_seconds_count{"):
				out.count += v
			}
		}
	}
	return out, nil
}

// scrapeMetrics reads /metrics from the pod's port named metrics.
func scrapeMetrics(ctx context.Context, p *corev1.Pod) (string, error) {
	var port int32
	for _, ctr := range p.Spec.Containers {
		for _, cp := range ctr.Ports {
			if cp.Name == "metrics" {
				port = cp.ContainerPort
			}
		}
	}
	if port == 0 || p.Status.PodIP == "" {
		return "", fmt.Errorf("no metrics port or no pod IP yet")
	}
	body, _, err := httpGet(ctx, "http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port)))+"/metrics", "", maxScrape)
	if err != nil {
		return "", err
	}
	return string(body), nil
}

func labelValue(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	value, _, _ := strings.Cut(line[i+len(name)+2:], `"`)
	return value
}

// BenchmarkPodStartup creates, in rotating order, the same pod without a
// claim, with a claim of a driver whose prepare does nothing
// (test/noopdriver, which shows what Kubernetes' DRA machinery costs any
// driver) and with a dra.swap claim, benchRounds of each, and prints the
// median create→Ready time of each kind with the kubelet's mean
// NodePrepareResources time per driver. It is a measurement, not a test:
// `make bench-e2e` runs it on a fresh local cluster.
func BenchmarkPodStartup(b *testing.B) {
	c, err := cluster.Load("")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	kubeletDir := filepath.Join(c.Dir, "kubelet")
	dataDir := filepath.Join(kubeletDir, "plugins", noopdriver.DriverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		b.Fatal(err)
	}
	// The no-op driver's client is limited as the plugin's is
	// (--kube-api-qps 50, --kube-api-burst 200): the bench's own client
	// (client-go's 5 QPS) would throttle its claim reads in a burst.
	noopConfig := rest.CopyConfig(c.Config)
	noopConfig.QPS, noopConfig.Burst = 50, 200
	helper, err := noopdriver.Start(ctx, kubernetes.NewForConfigOrDie(noopConfig), noopdriver.Config{NodeName: c.Node,
		RegistrarDir: filepath.Join(kubeletDir, "plugins_registry"), PluginDataDir: dataDir})
	if err != nil {
		b.Fatal(err)
	}
	defer helper.Stop()
	ns := "bench-" + rand.String(5)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) }()
	if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: noopdriver.DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", noopdriver.DriverName)}}}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, noopdriver.DriverName, metav1.DeleteOptions{})
	}()
	template := func(name, class string, capacity resourceapi.QualifiedName, bytes int64) {
		t := cluster.SwapTemplate(ns, name, class, bytes)
		t.Spec.Spec.Devices.Requests[0].Exactly.Capacity.Requests = map[resourceapi.QualifiedName]resource.Quantity{capacity: *resource.NewQuantity(bytes, resource.BinarySI)}
		if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	template("noop", noopdriver.DriverName, noopdriver.CapacityName, 64*mi)
	template("swap", "dra.swap", "swap", 64*mi)
	// A burst's twelve claims fit in the e2e node's swap with room to spare.
	template("burst-noop", noopdriver.DriverName, noopdriver.CapacityName, 16*mi)
	template("burst-swap", "dra.swap", "swap", 16*mi)
	// The default ServiceAccount comes from the controller-manager.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		b.Fatal(err)
	}

	// With BENCH_OFFLOAD_PODS, that many pods whose claims ask for offload
	// run on the node throughout, and the plugin's loop offloads them while
	// the pods are measured (a node that offloads: cgroup v2). With
	// BENCH_OFFLOAD_IDLE=1 too, their claims do not ask for offload: the
	// same node's figures with the loop idle.
	offloading := benchEnv("BENCH_OFFLOAD_PODS", 0)
	idle := os.Getenv("BENCH_OFFLOAD_IDLE") == "1"
	var loopBefore offloadLoopStats
	if offloading > 0 {
		loopBefore = startOffloading(b, ctx, c, ns, offloading, idle)
	}
	// A plugin restarted meanwhile (its liveness probe on a saturated
	// node, or its memory limit) makes the figures those of a plugin
	// starting over: the benchmark fails on it.
	restartsBefore, _, err := nodePluginRestarts(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	kinds := []string{"no claim", "no-op claim", "swap claim"}
	// pod is the pod of a kind; prefix names it and its claim templates.
	pod := func(prefix, kind string, i int) *corev1.Pod {
		name := fmt.Sprintf("%s%s-%02d", prefix, strings.ReplaceAll(kind, " ", "-"), i)
		name = strings.ReplaceAll(name, "no-op", "noop")
		templates := map[string]string{}
		var claims []string
		switch kind {
		case "no-op claim":
			templates["c"], claims = prefix+"noop", []string{"c"}
		case "swap claim":
			templates["c"], claims = prefix+"swap", []string{"c"}
		}
		p := c.WorkloadPod(ns, name, templates, cluster.Container{Name: "worker", Claims: claims, AllocMiB: 1, MemLimit: "64Mi", Hold: 600})
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		return p
	}
	before, err := kubeletPrepareStats(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	// Asides, each reported as not known when it cannot be read: the
	// plugin's own part of its prepares, and how busy the node's CPUs were.
	pluginBefore, pluginErr := pluginPrepareStats(ctx, c)
	cpuBefore, cpuErr := nodeCPU(ctx, c, c.Node)
	startup := map[string][]time.Duration{}
	b.ResetTimer()
	for round := range benchRounds {
		for k := range kinds {
			kind := kinds[(round+k)%len(kinds)] // rotate the order each round
			took, err := createUntilReady(ctx, c, pod("", kind, round))
			if err != nil {
				b.Fatalf("%s, round %d: %v", kind, round, err)
			}
			startup[kind] = append(startup[kind], took)
		}
	}
	b.StopTimer()
	after, err := kubeletPrepareStats(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	pluginAfter, err := pluginPrepareStats(ctx, c)
	pluginErr = errors.Join(pluginErr, err)
	cpuAfter, err := nodeCPU(ctx, c, c.Node)
	cpuErr = errors.Join(cpuErr, err)
	var report strings.Builder
	fmt.Fprintf(&report, "pod create -> Ready over %d rounds (rotating order), kubelet v1.37.1, containerd 2.2.1, node %s:\n", benchRounds, c.Node)
	for _, kind := range kinds {
		ds := startup[kind]
		slices.Sort(ds)
		fmt.Fprintf(&report, "  %-12s median %6.1f ms  (min %6.1f, max %6.1f)\n", kind, ms(ds[len(ds)/2]), ms(ds[0]), ms(ds[len(ds)-1]))
	}
	fmt.Fprintf(&report, "kubelet dra_grpc_operations_duration_seconds, NodePrepareResources, mean over the benchmark:\n")
	means := map[string]float64{}
	for _, driver := range []string{noopdriver.DriverName, "dra.swap"} {
		d := kubeletPrepare{sum: after[driver].sum - before[driver].sum, count: after[driver].count - before[driver].count}
		means[driver] = d.mean()
		fmt.Fprintf(&report, "  %-22s %6.2f ms over %.0f calls\n", driver, d.mean(), d.count)
		b.ReportMetric(d.mean(), strings.ReplaceAll(driver, ".", "_")+"-prepare-ms")
	}
	own := "not known"
	if pluginErr == nil {
		own = fmt.Sprintf("%.2f ms mean", kubeletPrepare{sum: pluginAfter.sum - pluginBefore.sum, count: pluginAfter.count - pluginBefore.count}.mean())
	}
	fmt.Fprintf(&report, "  dra.swap - no-op: %+.2f ms (target: within 1 ms); the plugin's own part of its prepare %s\n", means["dra.swap"]-means[noopdriver.DriverName], own)
	if cpuErr != nil {
		fmt.Fprintf(&report, "node CPU over the rounds: not known (%v)\n", cpuErr)
	} else {
		plugin := "not known"
		if v := cpuAfter.pluginSince(cpuBefore); v >= 0 {
			plugin = fmt.Sprintf("%.3f", v)
		}
		fmt.Fprintf(&report, "node CPU over the rounds: %.2f of %d cores busy; the kubelet plugin's pod %s cores (the kernel's reclaim on the offload loop's behalf included)\n",
			cpuAfter.busySince(cpuBefore), cpuAfter.cores, plugin)
	}
	b.ReportMetric(means["dra.swap"]-means[noopdriver.DriverName], "swap-minus-noop-prepare-ms")
	for _, kind := range kinds {
		ds := startup[kind]
		b.ReportMetric(ms(ds[len(ds)/2]), strings.ReplaceAll(kind, " ", "-")+"-median-ms")
	}
	if offloading > 0 {
		reportOffloading(b, ctx, c, ns, loopBefore, offloading, idle, &report)
	}
	// The one-pod figures are out before the bursts, which a saturated
	// node may fail.
	b.Log("\n" + report.String())
	writeBenchReport(report.String())
	// BENCH_BURST_ROUNDS=0 leaves the bursts out: on a node that offloads
	// 20 pods under emulation each burst takes minutes (make bench-offload
	// measures the one-pod figures only).
	rounds := burstRounds
	if v, err := strconv.Atoi(os.Getenv("BENCH_BURST_ROUNDS")); err == nil && v >= 0 {
		rounds = v // 0 too, unlike benchEnv
	}
	if rounds > 0 {
		bursts := runBursts(b, ctx, c, ns, kinds, rounds, func(kind string, round, i int) *corev1.Pod {
			// The burst-* templates; the round in the name only.
			p := pod("burst-", kind, i)
			p.Name = fmt.Sprintf("burst-r%d-%s", round, strings.TrimPrefix(p.Name, "burst-"))
			return p
		})
		var more strings.Builder
		bursts.report(b, &more)
		b.Log("\n" + more.String())
		report.WriteString(more.String())
	}
	if restarts, last, err := nodePluginRestarts(ctx, c); err != nil {
		b.Error(err)
	} else if restarts != restartsBefore {
		b.Errorf("the kubelet plugin on node %s restarted %d times during the benchmark (%s): the figures include its restarts", c.Node, restarts-restartsBefore, last)
	}
	writeBenchReport(report.String())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// createUntilReady creates the pod, waits until it is Ready (polling every
// 25 ms), returns how long that took, and deletes it.
func createUntilReady(ctx context.Context, c *cluster.Cluster, p *corev1.Pod) (time.Duration, error) {
	pods := c.Client.CoreV1().Pods(p.Namespace)
	start := time.Now()
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	defer func() { _ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}) }()
	var took time.Duration
	err := wait.PollUntilContextTimeout(ctx, 25*time.Millisecond, cluster.Scaled(2*time.Minute), true, func(ctx context.Context) (bool, error) {
		got, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if podReady(got) {
			took = time.Since(start)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return 0, fmt.Errorf("pod %s not Ready: %w", p.Name, err)
	}
	return took, nil
}

// writeBenchReport writes the report to BENCH_REPORT, if set.
func writeBenchReport(report string) {
	if path := os.Getenv("BENCH_REPORT"); path != "" {
		_ = os.WriteFile(path, []byte(report), 0o644)
	}
}

// A burst creates burstPods pods of one kind at once, as a Deployment
// scaled up or a Job started does; burstRounds bursts of each kind (by
// default: BENCH_BURST_ROUNDS), the kinds in rotating order.
const burstPods, burstRounds = 12, 3

// burstResults are the bursts' figures by kind.
type burstResults struct {
	kinds  []string
	rounds int
	// allReady is each burst's time from its first create until all its
	// pods were Ready.
	allReady map[string][]time.Duration
	// prepare is the kubelet's NodePrepareResources during the bursts, by
	// driver.
	prepare map[string]kubeletPrepare
	// plugin is the dra.swap plugin's own time in prepare during its
	// bursts (without the helper's claim read and gRPC); pluginUnknown
	// when its metrics could not be read.
	plugin        kubeletPrepare
	pluginUnknown bool
}

// burstDriver is the DRA driver of a kind of pod ("" for none).
func burstDriver(kind string) string {
	switch kind {
	case "no-op claim":
		return noopdriver.DriverName
	case "swap claim":
		return "dra.swap"
	}
	return ""
}

// runBursts runs the bursts: each one's pods are created at once from a
// client of their own (not throttled below the burst), listed until all
// are Ready, then deleted, and the next burst starts once they are gone
// (their claims unprepared).
func runBursts(b *testing.B, ctx context.Context, c *cluster.Cluster, ns string, kinds []string, rounds int, pod func(kind string, round, i int) *corev1.Pod) *burstResults {
	b.Helper()
	config := rest.CopyConfig(c.Config)
	config.QPS, config.Burst = 100, 200
	client := kubernetes.NewForConfigOrDie(config)
	pods := client.CoreV1().Pods(ns)
	res := &burstResults{kinds: kinds, rounds: rounds, allReady: map[string][]time.Duration{}, prepare: map[string]kubeletPrepare{}}
	for round := range rounds {
		for k := range kinds {
			kind := kinds[(round+k)%len(kinds)]
			label := fmt.Sprintf("r%d-%s", round, strings.ReplaceAll(strings.ReplaceAll(kind, " ", "-"), "no-op", "noop"))
			before, err := kubeletPrepareStats(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			// The plugin's own time is an aside: without it the bursts
			// still measure what they are for.
			pluginBefore, pluginErr := pluginPrepareStats(ctx, c)
			took, err := burst(ctx, pods, label, func(i int) *corev1.Pod { return pod(kind, round, i) })
			if err != nil {
				b.Fatalf("burst of %s, round %d: %v", kind, round, err)
			}
			after, err := kubeletPrepareStats(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			pluginAfter, err := pluginPrepareStats(ctx, c)
			if err = errors.Join(pluginErr, err); err != nil {
				b.Logf("the plugin's own prepare time is not known: %v", err)
				res.pluginUnknown = true
			}
			if kind == "swap claim" {
				res.plugin.sum += pluginAfter.sum - pluginBefore.sum
				res.plugin.count += pluginAfter.count - pluginBefore.count
			}
			res.allReady[kind] = append(res.allReady[kind], took)
			if d := burstDriver(kind); d != "" {
				p := res.prepare[d]
				p.sum += after[d].sum - before[d].sum
				p.count += after[d].count - before[d].count
				res.prepare[d] = p
			}
			if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{LabelSelector: "burst=" + label}); err != nil {
				b.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, cluster.Scaled(2*time.Minute), true, func(ctx context.Context) (bool, error) {
				list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "burst=" + label})
				return err == nil && len(list.Items) == 0, nil
			}); err != nil {
				b.Fatalf("the pods of burst %s are not gone: %v", label, err)
			}
		}
	}
	return res
}

// burst creates burstPods pods labelled burst=label at once and returns the
// time from the first create until a list shows all of them Ready (listed
// every 50 ms: a watch that the API server ends mid-burst would lose the
// burst).
func burst(ctx context.Context, pods corev1client.PodInterface, label string, pod func(i int) *corev1.Pod) (time.Duration, error) {
	errs := make([]error, burstPods)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range burstPods {
		p := pod(i)
		p.Labels = map[string]string{"burst": label}
		wg.Go(func() {
			_, errs[i] = pods.Create(ctx, p, metav1.CreateOptions{})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	var took time.Duration
	ready := 0
	var lastUnready *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, cluster.Scaled(3*time.Minute), true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "burst=" + label})
		if err != nil {
			return false, nil
		}
		ready, lastUnready = 0, nil
		for i := range list.Items {
			if podReady(&list.Items[i]) {
				ready++
			} else {
				lastUnready = &list.Items[i]
			}
		}
		if ready < burstPods {
			return false, nil
		}
		took = time.Since(start)
		return true, nil
	})
	if err != nil {
		why := ""
		if p := lastUnready; p != nil {
			why = fmt.Sprintf(" (pod %s: phase %s, conditions %v)", p.Name, p.Status.Phase, conditions(p.Status.Conditions))
		}
		return 0, fmt.Errorf("%d of %d pods Ready%s: %w", ready, burstPods, why, err)
	}
	return took, nil
}

// report prints the bursts' figures and reports them as metrics.
func (r *burstResults) report(b *testing.B, out *strings.Builder) {
	fmt.Fprintf(out, "%d pods created at once, %d bursts of each kind (rotating order): create -> all Ready, and the kubelet's NodePrepareResources during the bursts:\n",
		burstPods, r.rounds)
	for _, kind := range r.kinds {
		ds := r.allReady[kind]
		line := fmt.Sprintf("  %-12s all Ready: median %7.1f ms (rounds:", kind, median(ds))
		for _, d := range ds {
			line += fmt.Sprintf(" %.0f", ms(d))
		}
		line += ")"
		if d := burstDriver(kind); d != "" {
			line += fmt.Sprintf("  prepare mean %6.2f ms over %.0f calls", r.prepare[d].mean(), r.prepare[d].count)
		}
		fmt.Fprintln(out, line)
		b.ReportMetric(median(ds), "burst-"+strings.ReplaceAll(kind, " ", "-")+"-all-ready-ms")
	}
	swap, noop := r.prepare["dra.swap"].mean(), r.prepare[noopdriver.DriverName].mean()
	own := fmt.Sprintf("%.2f ms mean", r.plugin.mean())
	if r.pluginUnknown {
		own = "not known"
	}
	fmt.Fprintf(out, "  dra.swap - no-op: prepare %+.2f ms (target: within 5 ms), all Ready %+.1f ms (medians); the plugin's own part of its prepare %s\n",
		swap-noop, median(r.allReady["swap claim"])-median(r.allReady["no-op claim"]), own)
	b.ReportMetric(swap, "burst-dra_swap-prepare-ms")
	b.ReportMetric(noop, "burst-noop-prepare-ms")
	b.ReportMetric(swap-noop, "burst-swap-minus-noop-prepare-ms")
	b.ReportMetric(r.plugin.mean(), "burst-dra_swap-plugin-own-ms")
}

// mean is the mean call in milliseconds (0 without calls).
func (k kubeletPrepare) mean() float64 {
	if k.count == 0 {
		return 0
	}
	return k.sum / k.count * 1000
}

// median in milliseconds.
func median(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return ms(s[len(s)/2])
}
