package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/pkg/plugin"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// benchPlugin is the kubelet plugin against a real API server, with pods
// on its node that each use one allocated swap claim, and a gRPC client
// that calls it the way the kubelet does.
type benchPlugin struct {
	ctx     context.Context
	dra     drapb.DRAPluginClient
	claims  []*drapb.Claim // one per pod
	metrics string         // the plugin's /metrics URL
}

func newBenchPlugin(b *testing.B, pods int) *benchPlugin {
	b.Helper()
	api := framework.StartAPIServer(b)
	// The plugin's clients as the DaemonSet runs them (--kube-api-qps 50,
	// --kube-api-burst 200; events and status writes with a rate limiter
	// of their own).
	cfg := rest.CopyConfig(api.Config)
	cfg.QPS, cfg.Burst = 50, 200
	pluginClient := kubernetes.NewForConfigOrDie(cfg)
	background := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	createNode(b, ctx, api.Client)
	h := newHost(b)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	pcfg, done := startPlugin(b, ctx, pluginClient, h, func(c *plugin.Config) {
		c.RescanInterval, c.VerifyInterval, c.PressureInterval = 10*time.Second, time.Minute, 0
		c.BackgroundClient = background
		c.MetricsAddress = metricsAddr
	})
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("plugin: %v", err)
		}
	})
	waitForSlice(b, ctx, api.Client, "the device is published", capacityIs(2*gi))

	client := api.Client
	ns := "bench"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	bp := &benchPlugin{ctx: ctx, metrics: "http://" + metricsAddr + "/metrics"}
	for i := range pods {
		name := fmt.Sprintf("pod-%03d", i)
		claim, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-swap"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "swap", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "dra.swap"},
			}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: nodeName, ResourceClaims: []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To(claim.Name)}},
				Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "swap"}}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "swap", Driver: "dra.swap", Pool: nodeName, Device: "swap",
			ShareID:          ptr.To(apitypes.UID(fmt.Sprintf("5e0c1d2c-3b4a-4596-8877-%012d", i))),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse("8Mi")},
		}}}}
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		if claim, err = client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		bp.claims = append(bp.claims, &drapb.Claim{Namespace: ns, Name: claim.Name, Uid: string(claim.UID)})
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(pcfg.PluginDataDir, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	bp.dra = drapb.NewDRAPluginClient(conn)
	// The plugin's node-scoped pod cache has every pod once a prepare of
	// the last pod's claim finds it (it waits up to 2 s for a pod).
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last := bp.claims[len(bp.claims)-1]
		if err := bp.prepare(last); err != nil {
			return false, nil
		}
		return true, bp.unprepare(last)
	}); err != nil {
		b.Fatal("the plugin does not prepare the claims")
	}
	return bp
}

func (bp *benchPlugin) prepare(claims ...*drapb.Claim) error {
	resp, err := bp.dra.NodePrepareResources(bp.ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
	if err != nil {
		return err
	}
	for _, c := range claims {
		if r := resp.Claims[c.Uid]; r == nil || r.Error != "" {
			return fmt.Errorf("prepare %s: %v", c.Name, r)
		}
	}
	return nil
}

func (bp *benchPlugin) unprepare(claims ...*drapb.Claim) error {
	resp, err := bp.dra.NodeUnprepareResources(bp.ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
	if err != nil {
		return err
	}
	for _, c := range claims {
		if r := resp.Claims[c.Uid]; r == nil || r.Error != "" {
			return fmt.Errorf("unprepare %s: %v", c.Name, r)
		}
	}
	return nil
}

// driverTime is the mean time the plugin itself spent per prepare call
// (its dra_swap_claim_operation_duration_seconds: the kubeletplugin
// helper's claim reads from the API server and gRPC are not in it), in
// milliseconds.
func (bp *benchPlugin) driverTime(b *testing.B) float64 {
	b.Helper()
	page := scrape(b, bp.metrics)
	var sum, count float64
	for _, line := range strings.Split(page, "\n") {
		if !strings.Contains(line, `operation="prepare"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "dra_swap_claim_operation_duration_seconds_sum"):
			sum = v
		case strings.HasPrefix(line, "dra_swap_claim_operation_duration_seconds_count"):
			count = v
		}
	}
	if count == 0 {
		return 0
	}
	return sum / count * 1000
}

// quantile of durations in milliseconds.
func quantileMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	i = min(max(i, 0), len(s)-1)
	return float64(s[i].Microseconds()) / 1000
}

// Calls are paced so that the claim reads stay within the plugin's API
// client rate limit (50 per second, bursts of 200): a node does not prepare
// more claims than that per second, and a benchmark that did would measure
// the token bucket, not the driver.
const (
	paceOne   = 20 * time.Millisecond  // one claim per call: 50 per second
	paceBurst = 250 * time.Millisecond // 12 claims per burst: 48 per second
	pace110   = 2200 * time.Millisecond
)

// BenchmarkPrepareAPIServer measures NodePrepareResources over the
// plugin's gRPC socket, the way the kubelet calls it, against a real
// kube-apiserver: the kubeletplugin helper reads each claim from the API
// server, the plugin finds the pod in its node-scoped cache, writes the
// claim's CDI spec and saves the checkpoint. Each case reports its target.
func BenchmarkPrepareAPIServer(b *testing.B) {
	b.Run("one-claim", func(b *testing.B) {
		bp := newBenchPlugin(b, 64)
		var ds []time.Duration
		i := 0
		for b.Loop() {
			c := bp.claims[i%len(bp.claims)]
			i++
			start := time.Now()
			if err := bp.prepare(c); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
			b.StopTimer()
			if err := bp.unprepare(c); err != nil {
				b.Fatal(err)
			}
			time.Sleep(paceOne)
			b.StartTimer()
		}
		b.ReportMetric(quantileMs(ds, 0.5), "p50-ms")
		b.ReportMetric(quantileMs(ds, 0.99), "p99-ms")
		own := bp.driverTime(b)
		b.ReportMetric(own, "driver-mean-ms")
		b.Logf("prepare of 1 claim: p50 %.2f ms, p99 %.2f ms over %d calls, of which the driver's own work %.2f ms mean (target: p99 <= 5 ms)",
			quantileMs(ds, 0.5), quantileMs(ds, 0.99), len(ds), own)
	})
	b.Run("12-pods-at-once", func(b *testing.B) {
		const pods = 12
		bp := newBenchPlugin(b, pods)
		var walls []time.Duration
		for b.Loop() {
			var wg sync.WaitGroup
			errs := make([]error, pods)
			start := time.Now()
			for j, c := range bp.claims {
				wg.Go(func() { errs[j] = bp.prepare(c) })
			}
			wg.Wait()
			walls = append(walls, time.Since(start))
			b.StopTimer()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			if err := bp.unprepare(bp.claims...); err != nil {
				b.Fatal(err)
			}
			time.Sleep(paceBurst)
			b.StartTimer()
		}
		b.ReportMetric(quantileMs(walls, 0.5), "p50-all-ms")
		b.ReportMetric(quantileMs(walls, 1), "max-all-ms")
		own := bp.driverTime(b)
		b.Logf("12 pods' claims prepared concurrently, all done after: p50 %.2f ms, max %.2f ms over %d bursts; the driver's own work per call %.2f ms mean (target: <= 50 ms)",
			quantileMs(walls, 0.5), quantileMs(walls, 1), len(walls), own)
	})
}

// BenchmarkPrepare110Claims prepares 110 claims (the kubelet's default
// maximum of pods) in one call.
func BenchmarkPrepare110Claims(b *testing.B) {
	b.Run("110-claims-one-call", func(b *testing.B) {
		bp := newBenchPlugin(b, 110)
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := bp.prepare(bp.claims...); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
			b.StopTimer()
			if err := bp.unprepare(bp.claims...); err != nil {
				b.Fatal(err)
			}
			time.Sleep(pace110)
			b.StartTimer()
		}
		b.ReportMetric(quantileMs(ds, 0.5), "p50-ms")
		b.ReportMetric(quantileMs(ds, 1), "max-ms")
		own := bp.driverTime(b)
		b.Logf("110 claims in one call: p50 %.2f ms, max %.2f ms over %d calls, of which the driver's own work %.2f ms mean (target: <= 100 ms)",
			quantileMs(ds, 0.5), quantileMs(ds, 1), len(ds), own)
	})
}
