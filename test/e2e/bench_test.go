package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
	"github.com/dra-driver-swap/dra-driver-swap/test/noopdriver"
)

// benchRounds is how many pods of each kind BenchmarkPodStartup creates.
const benchRounds = 30

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

func labelValue(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.Index(rest, `"`)]
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
	helper, err := noopdriver.Start(ctx, c.Client, noopdriver.Config{NodeName: c.Node,
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
	template := func(name, class string, capacity resourceapi.QualifiedName) {
		t := cluster.SwapTemplate(ns, name, class, 64*mi)
		t.Spec.Spec.Devices.Requests[0].Exactly.Capacity.Requests = map[resourceapi.QualifiedName]resource.Quantity{capacity: *resource.NewQuantity(64*mi, resource.BinarySI)}
		if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	template("noop", noopdriver.DriverName, noopdriver.CapacityName)
	template("swap", "dra.swap", "swap")
	// The default ServiceAccount comes from the controller-manager.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		b.Fatal(err)
	}

	kinds := []string{"no claim", "no-op claim", "swap claim"}
	pod := func(kind string, i int) *corev1.Pod {
		name := fmt.Sprintf("%s-%02d", strings.ReplaceAll(kind, " ", "-"), i)
		name = strings.ReplaceAll(name, "no-op", "noop")
		templates := map[string]string{}
		var claims []string
		switch kind {
		case "no-op claim":
			templates["c"], claims = "noop", []string{"c"}
		case "swap claim":
			templates["c"], claims = "swap", []string{"c"}
		}
		p := c.WorkloadPod(ns, name, templates, cluster.Container{Name: "worker", Claims: claims, AllocMiB: 1, MemLimit: "64Mi", Hold: 600})
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		return p
	}
	before, err := kubeletPrepareStats(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	startup := map[string][]time.Duration{}
	b.ResetTimer()
	for round := range benchRounds {
		for k := range kinds {
			kind := kinds[(round+k)%len(kinds)] // rotate the order each round
			took, err := createUntilReady(ctx, c, pod(kind, round))
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
	var report strings.Builder
	fmt.Fprintf(&report, "pod create -> Ready over %d rounds (rotating order), kubelet v1.37.1, containerd 2.2.1, node %s:\n", benchRounds, c.Node)
	for _, kind := range kinds {
		ds := startup[kind]
		slices.Sort(ds)
		fmt.Fprintf(&report, "  %-12s median %6.1f ms  (min %6.1f, max %6.1f)\n", kind, ms(ds[len(ds)/2]), ms(ds[0]), ms(ds[len(ds)-1]))
	}
	fmt.Fprintf(&report, "kubelet dra_grpc_operations_duration_seconds, NodePrepareResources, mean over the benchmark:\n")
	for _, driver := range []string{noopdriver.DriverName, "dra.swap"} {
		d := kubeletPrepare{sum: after[driver].sum - before[driver].sum, count: after[driver].count - before[driver].count}
		mean := 0.0
		if d.count > 0 {
			mean = d.sum / d.count * 1000
		}
		fmt.Fprintf(&report, "  %-22s %6.2f ms over %.0f calls\n", driver, mean, d.count)
		b.ReportMetric(mean, strings.ReplaceAll(driver, ".", "_")+"-prepare-ms")
	}
	for _, kind := range kinds {
		ds := startup[kind]
		b.ReportMetric(ms(ds[len(ds)/2]), strings.ReplaceAll(kind, " ", "-")+"-median-ms")
	}
	b.Log("\n" + report.String())
	if path := os.Getenv("BENCH_REPORT"); path != "" {
		_ = os.WriteFile(path, []byte(report.String()), 0o644)
	}
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
