// Package integration runs the driver's components against a real
// kube-apiserver and etcd (see framework).
package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/claimstatus"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

const (
	mi       = int64(1) << 20
	gi       = int64(1) << 30
	nodeName = "node-a"
	bootID   = "6a0b8e2e-4d1c-4f5e-9b7a-0c1d2e3f4a5b"
)

// hostTree is a fake host root that the plugin's discovery reads.
type hostTree struct {
	t    testing.TB
	root string
}

func (h hostTree) write(path, content string) {
	h.t.Helper()
	full := filepath.Join(h.root, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		h.t.Fatal(err)
	}
	// Replace atomically so the plugin never reads a half-written file.
	tmp := full + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, full); err != nil {
		h.t.Fatal(err)
	}
}

func swaps(entries ...string) string {
	return "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n" + strings.Join(entries, "")
}

// newHost builds a cgroup v1 node with one 2Gi swap partition on an SSD.
func newHost(t testing.TB) hostTree {
	h := hostTree{t: t, root: t.TempDir()}
	h.write("proc/swaps", swaps("/dev/vdb                                partition\t2097152\t\t0\t\t-2\n"))
	h.write("sys/class/block/vdb/queue/rotational", "0\n")
	h.write("proc/sys/kernel/osrelease", "6.1.0-25-amd64\n")
	h.write("proc/sys/kernel/random/boot_id", bootID+"\n")
	h.write("sys/module/zswap/parameters/enabled", "N\n")
	h.write("sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "9223372036854771712\n")
	h.write("var/lib/kubelet/config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailSwapOn: false\nmemorySwap:\n  swapBehavior: NoSwap\n")
	return h
}

// runPlugin starts an API server with the node object, a fake host tree
// and the kubelet plugin; the plugin stops, and must exit cleanly, when the
// test ends.
func runPlugin(t testing.TB, configure ...func(*kubeletplugin.Config)) (context.Context, kubernetes.Interface, hostTree, kubeletplugin.Config) {
	api := framework.StartAPIServer(t)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	createNode(t, ctx, api.Client)
	h := newHost(t)
	cfg, done := startPlugin(t, ctx, api.Client, h, configure...)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("plugin: %v", err)
		}
	})
	return ctx, api.Client, h, cfg
}

func startPlugin(t testing.TB, ctx context.Context, client kubernetes.Interface, h hostTree, configure ...func(*kubeletplugin.Config)) (kubeletplugin.Config, <-chan error) {
	dir := t.TempDir()
	cfg := kubeletplugin.Config{
		DriverName:     "dra.swap",
		NodeName:       nodeName,
		Discovery:      discovery.Options{Root: h.root, KubeletConfigPath: "/var/lib/kubelet/config.yaml"},
		Policy:         swapdevice.Policy{OvercommitRatio: 1, ReservedBytes: 0, DefaultRequestBytes: gi},
		RescanInterval: 100 * time.Millisecond,
		VerifyInterval: 100 * time.Millisecond,
		CDIDir:         filepath.Join(dir, "cdi"),
		HookPath:       "/opt/dra-swap/bin/dra-swap-hook",
		HookStateDir:   filepath.Join(dir, "hook"),
		PluginDataDir:  filepath.Join(dir, "plugins", "dra.swap"),
		RegistrarDir:   filepath.Join(dir, "plugins_registry"),
	}
	for _, c := range configure {
		c(&cfg)
	}
	// The kubelet owns the registration directory; it exists before any plugin starts.
	if err := os.MkdirAll(cfg.RegistrarDir, 0o750); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		plugin, err := kubeletplugin.New(ctx, cfg, client)
		if err != nil {
			done <- err
			return
		}
		done <- plugin.Run(ctx)
	}()
	return cfg, done
}

func createNode(t testing.TB, ctx context.Context, client kubernetes.Interface) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{
		"kubernetes.io/hostname":        nodeName,
		"topology.kubernetes.io/zone":   "zone-a",
		"topology.kubernetes.io/region": "region-1",
	}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitForSlice waits until the node's dra.swap slice satisfies check and
// returns its device (nil for an empty pool).
func waitForSlice(t testing.TB, ctx context.Context, client kubernetes.Interface, what string, check func(*resourceapi.Device) bool) *resourceapi.Device {
	t.Helper()
	var last []resourceapi.ResourceSlice
	var found *resourceapi.Device
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		last = list.Items
		for _, s := range list.Items {
			if s.Spec.Driver != "dra.swap" || s.Spec.Pool.Name != nodeName || ptr.Deref(s.Spec.NodeName, "") != nodeName {
				continue
			}
			var dev *resourceapi.Device
			if len(s.Spec.Devices) > 0 {
				dev = &s.Spec.Devices[0]
			}
			if check(dev) {
				found = dev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for a slice where %s: %v; slices: %+v", what, err, last)
	}
	return found
}

func capacityIs(bytes int64) func(*resourceapi.Device) bool {
	return func(d *resourceapi.Device) bool {
		if d == nil {
			return false
		}
		c, ok := d.Capacity["swap"]
		return ok && c.Value.Value() == bytes
	}
}

func attr(d *resourceapi.Device, name resourceapi.QualifiedName) string {
	a, ok := d.Attributes[name]
	switch {
	case !ok:
		return "<none>"
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return "<empty>"
}

// TestPluginPublishesSwap runs the kubelet plugin against a real API
// server and a fake host tree, and follows its ResourceSlice through swap
// and configuration changes on the node.
func TestPluginPublishesSwap(t *testing.T) {
	t.Parallel()
	ctx, client, h, _ := runPlugin(t)

	dev := waitForSlice(t, ctx, client, "capacity is 2Gi", capacityIs(2*gi))
	if dev.Name != "swap" || !ptr.Deref(dev.AllowMultipleAllocations, false) {
		t.Errorf("device %q allowMultipleAllocations=%v", dev.Name, dev.AllowMultipleAllocations)
	}
	p := dev.Capacity["swap"].RequestPolicy
	if p == nil || p.Default.Value() != gi || p.ValidRange == nil || p.ValidRange.Min.Value() != mi || p.ValidRange.Step.Value() != mi || p.ValidRange.Max.Value() != 2*gi {
		t.Errorf("request policy = %+v", p)
	}
	want := map[resourceapi.QualifiedName]string{
		"swapBehavior": "NoSwap", "totalBytes": fmt.Sprint(2 * gi), "devices": "1", "medium": "ssd", "zswap": "false",
		"cgroupVersion": "1", "kernelVersion": "6.1.0", "tmpfsNoswap": "false", "swapLimitExact": "false", "swapPeak": "false", "zswapWriteback": "false",
		"topology.kubernetes.io/zone": "zone-a", "topology.kubernetes.io/region": "region-1", "kubernetes.io/hostname": nodeName,
	}
	for name, v := range want {
		if got := attr(dev, name); got != v {
			t.Errorf("attribute %s = %s, want %s", name, got, v)
		}
	}

	// swapon of a 1Gi file on an HDD-backed... file medium is whatever its
	// disk is; the 2Gi partition keeps the higher priority.
	h.write("proc/swaps", swaps(
		"/dev/vdb                                partition\t2097152\t\t0\t\t-2\n",
		"/swapfile                               file\t\t1048576\t\t0\t\t-3\n"))
	dev = waitForSlice(t, ctx, client, "capacity is 3Gi after swapon", capacityIs(3*gi))
	if attr(dev, "devices") != "2" || attr(dev, "totalBytes") != fmt.Sprint(3*gi) || attr(dev, "medium") != "ssd" {
		t.Errorf("after swapon: devices=%s total=%s medium=%s", attr(dev, "devices"), attr(dev, "totalBytes"), attr(dev, "medium"))
	}

	// The kubelet's configuration changes to LimitedSwap, and back
	// (TestPluginSwapBehavior follows the offer through such changes).
	h.write("var/lib/kubelet/config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemorySwap:\n  swapBehavior: LimitedSwap\n")
	waitForSlice(t, ctx, client, "swapBehavior is LimitedSwap", func(d *resourceapi.Device) bool { return d != nil && attr(d, "swapBehavior") == "LimitedSwap" })
	h.write("var/lib/kubelet/config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemorySwap:\n  swapBehavior: NoSwap\n")
	waitForSlice(t, ctx, client, "swapBehavior is NoSwap again", func(d *resourceapi.Device) bool { return d != nil && attr(d, "swapBehavior") == "NoSwap" })

	// The node moves to another zone.
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels["topology.kubernetes.io/zone"] = "zone-b"
	if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForSlice(t, ctx, client, "zone is zone-b", func(d *resourceapi.Device) bool {
		return d != nil && attr(d, "topology.kubernetes.io/zone") == "zone-b"
	})

	// swapoff: the device stays, with zero capacity and tainted, so the
	// swap behavior still reaches the controller but nothing is allocated.
	h.write("proc/swaps", swaps())
	unusable := func(d *resourceapi.Device) bool {
		if d == nil {
			return false
		}
		c := d.Capacity["swap"]
		return c.Value.Sign() == 0 && len(d.Taints) == 1 && d.Taints[0].Key == "dra.swap/no-usable-swap" &&
			d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule && attr(d, "usable") == "false" && attr(d, "swapBehavior") == "NoSwap"
	}
	waitForSlice(t, ctx, client, "the device is unusable after swapoff", unusable)

	// swapon again, but the cgroup swap control file is gone (swapaccount=0).
	h.write("proc/swaps", swaps("/dev/zram0                              partition\t524288\t\t0\t\t100\n"))
	if err := os.Remove(filepath.Join(h.root, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // several rescans
	waitForSlice(t, ctx, client, "still unusable without swap accounting", unusable)
	h.write("sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "9223372036854771712\n")
	dev = waitForSlice(t, ctx, client, "zram device of 512Mi", capacityIs(512*mi))
	if attr(dev, "medium") != "zram" {
		t.Errorf("medium = %s, want zram", attr(dev, "medium"))
	}
}

// TestPluginPreparesOverGRPC calls the plugin's kubelet DRA gRPC v1 service
// the way the kubelet does, for a claim allocated in the API server.
func TestPluginPreparesOverGRPC(t *testing.T) {
	t.Parallel()
	metricsPort := freePort(t)
	ctx, client, h, cfg := runPlugin(t, func(c *kubeletplugin.Config) { c.MetricsAddress = fmt.Sprintf("127.0.0.1:%d", metricsPort) })
	waitForSlice(t, ctx, client, "the device is published", capacityIs(2*gi))

	ns := "default"
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swap-claim"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "swap",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "dra.swap",
				Capacity:        &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse("300Mi")}},
			},
		}}}},
	}
	claim, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The pod that uses it, on the plugin's node: the plugin finds it in
	// its node-scoped pod cache and grants the claim to it.
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "swap-user"},
		Spec: corev1.PodSpec{NodeName: nodeName, ResourceClaims: []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: ptr.To(claim.Name)}},
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "swap"}}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Allocate and reserve as the scheduler would.
	shareID := "8f0e1d2c-3b4a-4596-8877-665544332211"
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "swap", Driver: "dra.swap", Pool: nodeName, Device: "swap",
		ShareID:          ptr.To(apitypes.UID(shareID)),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse("300Mi")},
	}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	claim, err = client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient("unix://"+filepath.Join(cfg.PluginDataDir, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dra := drapb.NewDRAPluginClient(conn)
	pbClaim := &drapb.Claim{Namespace: ns, Name: claim.Name, Uid: string(claim.UID)}
	for i := range 2 { // idempotent
		resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{pbClaim}})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Claims[string(claim.UID)]
		if r == nil || r.Error != "" || len(r.Devices) != 1 {
			t.Fatalf("prepare #%d: %+v", i+1, resp)
		}
		d := r.Devices[0]
		if d.PoolName != nodeName || d.DeviceName != "swap" || d.GetShareId() != shareID ||
			len(d.CdiDeviceIds) != 1 || d.CdiDeviceIds[0] != "dra.swap/swap="+string(claim.UID)+"-0" {
			t.Fatalf("prepare #%d device: %+v", i+1, d)
		}
	}
	spec, err := os.ReadFile(filepath.Join(cfg.CDIDir, "dra.swap-swap_"+string(claim.UID)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"DRA_SWAP_LIMIT_BYTES=314572800"`, `"--swap-limit=314572800"`, `"createRuntime"`, `"--pod-uid=` + string(pod.UID) + `"`} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("CDI spec lacks %s: %s", want, spec)
		}
	}
	if cp, err := os.ReadFile(filepath.Join(cfg.PluginDataDir, "checkpoint.json")); err != nil || !strings.Contains(string(cp), string(claim.UID)) {
		t.Errorf("checkpoint = %s, %v", cp, err)
	}
	// The claim's status says what was granted, to whom, and that the
	// containers have not started yet.
	var status []resourceapi.AllocatedDeviceStatus
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		status = c.Status.Devices
		return len(status) == 1, nil
	}); err != nil {
		t.Fatalf("the claim's status.devices: %+v", status)
	}
	d0 := status[0]
	if d0.Driver != "dra.swap" || d0.Pool != nodeName || d0.Device != "swap" || ptr.Deref(d0.ShareID, "") != shareID ||
		len(d0.Conditions) != 1 || d0.Conditions[0].Type != claimstatus.ConditionSwapApplied || d0.Conditions[0].Status != metav1.ConditionUnknown ||
		d0.Data == nil || !strings.Contains(string(d0.Data.Raw), `"swapBytes":314572800`) || !strings.Contains(string(d0.Data.Raw), `"containers":{"app":314572800}`) {
		t.Errorf("device status %+v, data %s", d0, d0.Data)
	}
	t.Logf("status.devices[0]: condition %s=%s (%s), data %s", d0.Conditions[0].Type, d0.Conditions[0].Status, d0.Conditions[0].Message, d0.Data.Raw)

	// The node's swap shrinks below what the prepared claim holds (a swap
	// area was turned off): the device is tainted so nothing more is
	// allocated here, the Node is told, the metrics show it, and a claim
	// allocated against the earlier offer is refused with both numbers.
	h.write("proc/swaps", swaps("/dev/vdb                                partition\t262144\t\t0\t\t-2\n"))
	overcommitted := func(d *resourceapi.Device) bool {
		return d != nil && len(d.Taints) == 1 && d.Taints[0].Key == v1alpha1.TaintOvercommitted && d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule
	}
	dev := waitForSlice(t, ctx, client, "the device is tainted overcommitted", overcommitted)
	t.Logf("after the swap shrank: taint %s=%s", dev.Taints[0].Key, dev.Taints[0].Value)
	waitForNodeEvent(t, ctx, client, publish.ReasonOvercommitted, "hold 300Mi but the node offers 256Mi")
	metrics := scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	for _, want := range []string{"dra_swap_node_swap_allocated_bytes 3.145728e+08", "dra_swap_node_swap_offered_bytes 2.68435456e+08"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	late := allocatedClaim(t, ctx, client, ns, "late-claim", "64Mi", pod)
	resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: ns, Name: late.Name, Uid: string(late.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	if msg := resp.Claims[string(late.UID)].GetError(); !strings.Contains(msg, "the node offers 256Mi of swap and the claims prepared on it hold 300Mi, so the 64Mi allocated to this claim does not fit now: the node's offer shrank") {
		t.Errorf("a claim allocated against the earlier offer: %q", msg)
	}
	// The prepared claim itself is still answered.
	if resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{pbClaim}}); err != nil || resp.Claims[string(claim.UID)].GetError() != "" {
		t.Errorf("the prepared claim after the swap shrank: %+v, %v", resp, err)
	}
	h.write("proc/swaps", swaps("/dev/vdb                                partition\t2097152\t\t0\t\t-2\n"))
	waitForSlice(t, ctx, client, "the taint is gone with the swap back", func(d *resourceapi.Device) bool { return d != nil && len(d.Taints) == 0 })
	waitForNodeEvent(t, ctx, client, publish.ReasonOvercommitCleared, "taint dra.swap/overcommitted removed")

	for range 2 {
		resp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{pbClaim}})
		if err != nil || resp.Claims[string(claim.UID)].GetError() != "" {
			t.Fatalf("unprepare: %+v, %v", resp, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.CDIDir, "dra.swap-swap_"+string(claim.UID)+".json")); !os.IsNotExist(err) {
		t.Errorf("CDI spec still there: %v", err)
	}
}

// allocatedClaim creates a claim of size allocated on the node and
// reserved for pod, as the scheduler leaves it.
func allocatedClaim(t *testing.T, ctx context.Context, client kubernetes.Interface, ns, name, size string, pod *corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	claim, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "swap", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "dra.swap"},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "swap", Driver: "dra.swap", Pool: nodeName, Device: "swap",
		ShareID:          ptr.To(apitypes.UID("9f0e1d2c-3b4a-4596-8877-665544332299")),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse(size)},
	}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	claim, err = client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}

// waitForNodeEvent waits for the plugin's event on the node.
func waitForNodeEvent(t *testing.T, ctx context.Context, client kubernetes.Interface, reason, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.kind=Node,regarding.name=" + nodeName})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, e.Reason+": "+e.Note)
			if e.Reason == reason && strings.Contains(e.Note, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("node %s: no %s event saying %q; events: %q", nodeName, reason, text, seen)
	}
}

// scrape returns a metrics page.
func scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
