package scale

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
	"github.com/dra-driver-swap/dra-driver-swap/test/noopdriver"
)

const (
	// offerBytes is the swap every simulated node offers (and the no-op
	// device's capacity): 8 GiB, room for 128 claims of requestBytes. The
	// scheduler puts identical pods on one node until it is full, so
	// claims fill node after node (10,000 fill 79 nodes): what a node
	// offers, not only its pod count, decides where they go.
	offerBytes int64 = 8 << 30
	// requestBytes is what each claim of the swap and no-op modes asks.
	requestBytes int64 = 64 << 20
	// writers is how many goroutines create or delete objects at once.
	writers = 16
	// schedulerQPS and schedulerBurst are the kube-scheduler's client
	// rate limits (clientConnection.qps/burst; default 50/100): high, so
	// the scheduler's own work, not its client's throttle, is measured.
	schedulerQPS   = 5000
	schedulerBurst = 10000
)

// Cluster is a real etcd, kube-apiserver, kube-scheduler (started per
// measurement) and dra-swap-controller process, with simulated nodes: Node
// objects and the ResourceSlices their kubelet plugins would publish.
type Cluster struct {
	t      testing.TB
	s      *framework.APIServer
	client kubernetes.Interface
	dir    string
	nodes  int

	schedulerBin string
	scheduler    *process
	schedulerURL string

	controllerBin string
	controller    *process
	// controllerMemoryLimit is the chart's memory limit of the
	// controller's container.
	controllerMemoryLimit                int64
	controllerMetrics                    string
	webhookPort, metricsPort, healthPort int
	// webhookConfiguration is the chart's ValidatingWebhookConfiguration,
	// whose caBundle the controller keeps.
	webhookConfiguration string
}

// nodeName is the name of simulated node i.
func nodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// nodeLabels are simulated node i's labels: 10 zones in 2 regions.
func nodeLabels(i int) map[string]string {
	return map[string]string{
		podlabels.Hostname:   nodeName(i),
		podlabels.Zone:       fmt.Sprintf("zone-%d", i%10),
		podlabels.Region:     fmt.Sprintf("region-%d", i%2),
		corev1.LabelOSStable: "linux",
	}
}

// swapFacts are what discovery would find on a simulated node offering
// total bytes of swap.
func swapFacts(total int64) discovery.Facts {
	return discovery.Facts{
		TotalBytes:    total,
		Devices:       []discovery.SwapDevice{{Path: "/swapfile", Type: "file", SizeBytes: total}},
		Medium:        discovery.MediumSSD,
		CgroupVersion: 2,
		SwapControl:   true,
		SwapBehavior:  v1alpha1.SwapBehaviorNoSwap,
		KernelVersion: "6.1.0",
	}
}

// swapSlice is node i's dra.swap ResourceSlice: the device and pool the
// kubelet plugin publishes (swapdevice.Device, swapdevice.Resources),
// offering total.
func swapSlice(i int, total int64) (*resourceapi.ResourceSlice, error) {
	name := nodeName(i)
	device, reason := swapdevice.Device(swapFacts(total), nodeLabels(i), swapdevice.Policy{OvercommitRatio: 1})
	if reason != "" {
		return nil, fmt.Errorf("node %s offers no swap: %s", name, reason)
	}
	pool := swapdevice.Resources(name, device).Pools[name]
	if len(pool.Slices) != 1 {
		return nil, fmt.Errorf("node %s: %d slices in its pool, want 1", name, len(pool.Slices))
	}
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + v1alpha1.DriverName},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   v1alpha1.DriverName,
			NodeName: ptr.To(name),
			Pool:     resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
			Devices:  pool.Slices[0].Devices,
		},
	}, nil
}

// noopSlice is node i's slice of the no-op driver: its device
// (noopdriver.Device) with the capacity dra.swap offers.
func noopSlice(i int) *resourceapi.ResourceSlice {
	name := nodeName(i)
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-noop"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   noopdriver.DriverName,
			NodeName: ptr.To(name),
			Pool:     resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
			Devices:  []resourceapi.Device{noopdriver.Device(*resource.NewQuantity(offerBytes, resource.BinarySI))},
		},
	}
}

// simulatedNode is a Ready node with room for far more pods than a run
// creates (the scheduler's resource fit is never what limits).
func simulatedNode(i int) *corev1.Node {
	room := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("4Ti"),
		corev1.ResourcePods:   resource.MustParse("5000"),
	}
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: nodeLabels(i)},
		Status: corev1.NodeStatus{
			Capacity:    room,
			Allocatable: room,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "simulated", LastHeartbeatTime: now, LastTransitionTime: now,
			}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", 64+i>>16, i>>8&255, i&255)}},
		},
	}
}

// parallel runs do(i) for i in [0, n) on writers goroutines and returns
// the first error.
func parallel(ctx context.Context, n int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range writers {
		wg.Go(func() {
			for i := range next {
				if err := do(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// StartCluster starts etcd and kube-apiserver (framework.StartAPIServer),
// creates nodes simulated nodes with their slices, the DeviceClasses and
// the driver's webhook configuration (URL-based, on loopback), and starts
// the dra-swap-controller process with the chart's defaults.
func StartCluster(ctx context.Context, t testing.TB, nodes int) (*Cluster, error) {
	schedulerBin, err := binary("KUBE_SCHEDULER", "kube-scheduler", "build it with `hack/build-tools.sh kube-scheduler` or point KUBE_SCHEDULER at a kube-scheduler binary")
	if err != nil {
		return nil, err
	}
	s := framework.StartAPIServer(t)
	c := &Cluster{t: t, s: s, client: s.Client, dir: s.Dir, nodes: nodes, schedulerBin: schedulerBin}
	if err := c.createNodes(ctx); err != nil {
		return nil, err
	}
	for _, class := range []string{v1alpha1.DriverName, noopdriver.DriverName} {
		if _, err := c.client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: class},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: v1alpha1.DriverSelector(class)},
			}}},
		}, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create DeviceClass %s: %w", class, err)
		}
	}
	if err := c.startController(ctx); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		c.stopScheduler()
		if t.Failed() {
			for _, log := range []string{"kube-scheduler.log", "dra-swap-controller.log"} {
				t.Logf("----- last lines of %s -----\n%s", log, tail(filepath.Join(c.dir, log), 40))
			}
		}
	})
	return c, nil
}

// createNodes creates the Nodes, then their dra.swap and no-op slices.
func (c *Cluster) createNodes(ctx context.Context) error {
	if err := parallel(ctx, c.nodes, func(ctx context.Context, i int) error {
		node, err := c.client.CoreV1().Nodes().Create(ctx, simulatedNode(i), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", nodeName(i), err)
		}
		// The API server's TaintNodesByCondition admission taints a new
		// node not-ready; the node lifecycle controller, which does not
		// run here, would lift it once the node is Ready.
		if len(node.Spec.Taints) > 0 {
			node.Spec.Taints = nil
			if _, err := c.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("untaint node %s: %w", nodeName(i), err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := parallel(ctx, c.nodes, func(ctx context.Context, i int) error {
		rs, err := swapSlice(i, offerBytes)
		if err != nil {
			return err
		}
		if _, err := c.client.ResourceV1().ResourceSlices().Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ResourceSlice %s: %w", rs.Name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	return parallel(ctx, c.nodes, func(ctx context.Context, i int) error {
		rs := noopSlice(i)
		if _, err := c.client.ResourceV1().ResourceSlices().Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ResourceSlice %s: %w", rs.Name, err)
		}
		return nil
	})
}

// setOffer republishes node i's dra.swap slice offering total bytes, as
// its kubelet plugin does when the node's swap changes.
func (c *Cluster) setOffer(ctx context.Context, i int, total int64) error {
	rs, err := swapSlice(i, total)
	if err != nil {
		return err
	}
	cur, err := c.client.ResourceV1().ResourceSlices().Get(ctx, rs.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get ResourceSlice %s: %w", rs.Name, err)
	}
	rs.ResourceVersion = cur.ResourceVersion
	rs.Spec.Pool.Generation = cur.Spec.Pool.Generation + 1
	if _, err := c.client.ResourceV1().ResourceSlices().Update(ctx, rs, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update ResourceSlice %s: %w", rs.Name, err)
	}
	return nil
}

// startController registers the driver's ValidatingWebhookConfiguration,
// pointed at a port on loopback, and starts the controller there.
func (c *Cluster) startController(ctx context.Context) error {
	bin, err := controllerBinary(ctx, c.dir)
	if err != nil {
		return err
	}
	c.controllerBin = bin
	for _, port := range []*int{&c.webhookPort, &c.metricsPort, &c.healthPort} {
		if *port, err = freePort(); err != nil {
			return err
		}
	}
	c.controllerMetrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", c.metricsPort)
	url := fmt.Sprintf("https://localhost:%d", c.webhookPort)
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	// The chart's webhooks (its default rendering), pointed at the
	// controller on loopback.
	validating, err := manifest.StaticWebhookConfiguration(filepath.Join(root, "deployments", "static", "dra-driver-swap.yaml"), url)
	if err != nil {
		return err
	}
	c.webhookConfiguration = validating.Name
	if _, err := c.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the webhook configuration: %w", err)
	}
	if c.controllerMemoryLimit, err = chartControllerMemoryLimit(filepath.Join(root, "deployments", "static", "dra-driver-swap.yaml")); err != nil {
		return err
	}
	return c.runController(ctx, 0)
}

// chartControllerMemoryLimit is the memory limit of the controller's
// container in the chart's default rendering.
func chartControllerMemoryLimit(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	objs, err := manifest.Decode(string(data))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, ctr := range containers {
			m, _ := ctr.(map[string]any)
			if m["name"] != "controller" {
				continue
			}
			limit, _, _ := unstructured.NestedString(m, "resources", "limits", "memory")
			q, err := resource.ParseQuantity(limit)
			if err != nil {
				return 0, fmt.Errorf("%s: the controller's memory limit %q: %w", path, limit, err)
			}
			return q.Value(), nil
		}
	}
	return 0, fmt.Errorf("%s: no controller container", path)
}

// runController (re)starts the dra-swap-controller binary as the chart
// does (leader election, self-managed webhook certificate, 4 workers,
// --pod-selection swap-claims, and 50 QPS / burst 100 unless qps is set:
// then qps and burst 2×qps), and waits until the API server calls its
// webhooks.
func (c *Cluster) runController(ctx context.Context, qps int) error {
	if c.controller != nil {
		c.controller.stop()
	}
	args := []string{
		"--kubeconfig=" + c.s.Kubeconfig(c.t),
		"--leader-election-namespace=kube-system",
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(c.webhookPort),
		"--webhook-dns-names=localhost", "--webhook-secret-namespace=kube-system",
		"--validating-webhook-configuration=" + c.webhookConfiguration,
		"--metrics-address=127.0.0.1:" + strconv.Itoa(c.metricsPort),
		"--health-address=127.0.0.1:" + strconv.Itoa(c.healthPort),
	}
	if qps > 0 {
		args = append(args, "--kube-api-qps="+strconv.Itoa(qps), "--kube-api-burst="+strconv.Itoa(2*qps))
	}
	// In the chart's container the controller sets its soft memory limit
	// to two fifths of the container's memory limit; a process here has
	// no container limit, so it is given that share.
	env, err := exec.LookPath("env")
	if err != nil {
		return err
	}
	args = append([]string{"GOMEMLIMIT=" + strconv.FormatInt(c.controllerMemoryLimit*2/5, 10), c.controllerBin}, args...)
	p, err := startProcess("dra-swap-controller", env, filepath.Join(c.dir, "dra-swap-controller.log"), args...)
	if err != nil {
		return err
	}
	c.controller = p
	c.t.Cleanup(p.stop)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitHTTP(wctx, p, fmt.Sprintf("http://127.0.0.1:%d/readyz", c.healthPort)); err != nil {
		return err
	}
	// Ready when the API server calls the webhook: a SwapConfig out of
	// range is refused with the controller's message.
	probe := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "swap", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: v1alpha1.DriverName}}},
			Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: v1alpha1.DriverName, Parameters: runtimeRaw(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":500}`),
			}}}},
		}},
	}
	return wait.PollUntilContextCancel(wctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("dra-swap-controller exited: %w (log %s)", p.Err(), p.Log())
		}
		_, err := c.client.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "swapHighPercent"), nil
	})
}

// startScheduler starts kube-scheduler with its client at schedulerQPS
// and its /metrics on loopback, and waits until it is ready.
func (c *Cluster) startScheduler(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	config := filepath.Join(c.dir, "kube-scheduler.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, c.s.Kubeconfig(c.t), schedulerQPS, schedulerBurst)), 0o600); err != nil {
		return fmt.Errorf("write the scheduler's configuration: %w", err)
	}
	var gates []string
	for name, on := range framework.DefaultFeatureGates {
		gates = append(gates, fmt.Sprintf("%s=%t", name, on))
	}
	p, err := startProcess("kube-scheduler", c.schedulerBin, filepath.Join(c.dir, "kube-scheduler.log"),
		"--config="+config,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--authentication-kubeconfig="+c.s.Kubeconfig(c.t), "--authorization-kubeconfig="+c.s.Kubeconfig(c.t),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--feature-gates="+strings.Join(gates, ","),
		"--v=1",
	)
	if err != nil {
		return err
	}
	c.scheduler = p
	c.schedulerURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return waitHTTP(wctx, p, c.schedulerURL+"/readyz")
}

func (c *Cluster) stopScheduler() {
	if c.scheduler != nil {
		c.scheduler.stop()
		c.scheduler = nil
	}
}

// scrape reads a component's /metrics.
func scrape(ctx context.Context, url string) ([]sample, error) {
	body, err := httpGet(ctx, url, 64<<20)
	if err != nil {
		return nil, err
	}
	return parseMetrics(body)
}

// namespace creates a namespace with its default ServiceAccount (no
// controller-manager runs).
func (c *Cluster) namespace(ctx context.Context, name string) error {
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	if _, err := c.client.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the default ServiceAccount of %s: %w", name, err)
	}
	return nil
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
