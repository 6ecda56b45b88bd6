package integration

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

const (
	benchNodes = 100
	benchPods  = 5000
)

// BenchmarkReconcileLabels measures the pod label reconciler against a
// real API server: 5000 pods already bound across 100 nodes that run the
// driver, none labeled (as after the controller was down), then the
// controller starts and labels them all. It reports pods labeled per
// second and the heap the controller added (its caches), measured after
// a GC. The controller's client runs at 500 QPS; at the default 50 QPS the
// API rate limit, not the reconciler, bounds the throughput.
func BenchmarkReconcileLabels(b *testing.B) {
	s := framework.StartAPIServer(b)
	ctx := klog.NewContext(context.Background(), ktesting.NewLogger(b, ktesting.NewConfig(ktesting.Verbosity(0))))
	ctrl.SetLogger(klog.Background())
	fast := rest.CopyConfig(s.Config)
	fast.QPS, fast.Burst = 1000, 2000
	client := kubernetes.NewForConfigOrDie(fast)
	env := &controllerEnv{t: b, client: client, s: s}

	for i := range benchNodes {
		name := fmt.Sprintf("node-%03d", i)
		env.node(ctx, name, map[string]string{podlabels.Zone: fmt.Sprintf("zone-%d", i%3)}, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
	}

	for n := range b.N {
		b.StopTimer()
		ns := fmt.Sprintf("bench-%d", n)
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		createBoundPods(ctx, b, client, ns)

		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)

		w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: podlabels.Hostname})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		cctx, cancel := context.WithCancel(ctx)
		cfg := rest.CopyConfig(s.Config)
		cfg.QPS, cfg.Burst = 500, 1000
		done := make(chan error, 1)
		go func() {
			done <- controller.Run(cctx, cfg, controller.Config{
				Policy: podlabels.Policy{Selection: podlabels.SelectAll}, Workers: 8,
				DisableWebhooks: true, MetricsAddress: "0", HealthAddress: "0",
			})
		}()
		labeled := map[string]bool{}
		timeout := time.After(5 * time.Minute)
		for len(labeled) < benchPods {
			select {
			case ev := <-w.ResultChan():
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					labeled[ev.Object.(*corev1.Pod).Name] = true
				}
			case err := <-done:
				b.Fatalf("controller stopped: %v", err)
			case <-timeout:
				b.Fatalf("only %d of %d pods labeled after 5 minutes", len(labeled), benchPods)
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		w.Stop()

		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(benchPods)/elapsed.Seconds(), "pods/s")
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "controller-heap-MiB")
		b.StartTimer()
	}
}

// createBoundPods creates benchPods pods spread over the nodes, bound at
// creation (spec.nodeName), with 16 writers.
func createBoundPods(ctx context.Context, b *testing.B, client kubernetes.Interface, ns string) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, benchPods)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				_, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Labels: map[string]string{"app": "bench"}},
					Spec: corev1.PodSpec{
						NodeName:   fmt.Sprintf("node-%03d", i%benchNodes),
						Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
					},
				}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range benchPods {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
