package integration

import (
	"context"
	"encoding/json"
	"fmt"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/claimstatus"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// TestPluginOffloadSupport: a claim that asks for offload or for
// compressed-only swap is refused at prepare, naming the field and the
// reason, on a node that cannot honour it (cgroup v1; a cgroup v2 kernel
// without memory.reclaim; zswap disabled), and prepared where it can; the
// device's offload attribute says which, rescan by rescan.
func TestPluginOffloadSupport(t *testing.T) {
	t.Parallel()
	ctx, client, h, cfg := runPlugin(t, func(c *kubeletplugin.Config) { c.OffloadInterval = 0 })
	waitForSlice(t, ctx, client, "a cgroup v1 node does not offload", func(d *resourceapi.Device) bool { return d != nil && attr(d, "offload") == "false" })

	ns := "default"
	pod := podOnNode(t, ctx, client, ns, "offloaded")
	prepare := func(name, params string) string {
		t.Helper()
		claim := configuredClaim(t, ctx, client, ns, name, "64Mi", params, pod)
		conn, err := grpc.NewClient("unix://"+filepath.Join(cfg.PluginDataDir, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		resp, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
			Claims: []*drapb.Claim{{Namespace: ns, Name: claim.Name, Uid: string(claim.UID)}}})
		if err != nil {
			t.Fatal(err)
		}
		if msg := resp.Claims[string(claim.UID)].GetError(); msg != "" {
			return msg
		}
		spec, err := os.ReadFile(filepath.Join(cfg.CDIDir, "dra.swap-swap_"+string(claim.UID)+".json"))
		if err != nil {
			t.Fatal(err)
		}
		return string(spec)
	}
	const (
		offload        = `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":0.5}}`
		compressedOnly = `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"CompressedOnly"}`
	)
	expect := func(got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("prepare gave %q, want it to contain %q", got, w)
			}
		}
	}
	expect(prepare("v1-offload", offload),
		"spec.devices.config[0].opaque.parameters.offload: Forbidden: offload needs cgroup v2 (memory.reclaim and memory.pressure); this node uses cgroup v1")
	expect(prepare("v1-compressed", compressedOnly),
		"spec.devices.config[0].opaque.parameters.zswap: Forbidden: CompressedOnly needs memory.zswap.writeback, which exists only on cgroup v2")

	// The node turns out to be cgroup v2, with a kernel without
	// memory.reclaim, and the plugin's loop is off.
	if err := os.RemoveAll(filepath.Join(h.root, "sys/fs/cgroup")); err != nil {
		t.Fatal(err)
	}
	h.write("sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n")
	h.write("sys/fs/cgroup/kubepods.slice/memory.swap.max", "max\n")
	h.write("sys/fs/cgroup/kubepods.slice/memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	waitForSlice(t, ctx, client, "cgroup v2", func(d *resourceapi.Device) bool { return d != nil && attr(d, "cgroupVersion") == "2" })
	expect(prepare("v2-old-kernel", offload),
		"spec.devices.config[0].opaque.parameters.offload: Forbidden: this node cannot offload: the kernel has no memory.reclaim (Linux 5.19 or later)")
	h.write("sys/fs/cgroup/kubepods.slice/memory.reclaim", "")
	time.Sleep(500 * time.Millisecond) // several rescans (100 ms)
	expect(prepare("v2-no-loop", offload), "this node cannot offload: the kubelet plugin runs without its offload loop (--offload-interval=0")
	expect(prepare("v2-old-zswap", compressedOnly),
		"spec.devices.config[0].opaque.parameters.zswap: Forbidden: this node cannot keep pages compressed only: the kernel has no memory.zswap.writeback (Linux 6.8 or later)")
	h.write("sys/fs/cgroup/kubepods.slice/memory.zswap.writeback", "1\n")
	waitForSlice(t, ctx, client, "memory.zswap.writeback found", func(d *resourceapi.Device) bool { return d != nil && attr(d, "zswapWriteback") == "true" })
	expect(prepare("v2-zswap-off", compressedOnly),
		"spec.devices.config[0].opaque.parameters.zswap: Forbidden: this node cannot keep pages compressed only: zswap is disabled")
}

// TestPluginOffloadPrepared: on a cgroup v2 node with memory.reclaim, PSI
// and zswap, with the plugin's loop on, the device says it offloads, the
// claims are prepared with the hook arguments that carry them, and the
// loop drives the container the hook recorded: it writes memory.reclaim,
// the claim's status carries its figures, and a stall above the budget
// pauses it with an event on the pod.
func TestPluginOffloadPrepared(t *testing.T) {
	t.Parallel()
	metricsPort := freePort(t)
	ctx, client, h, cfg := runPluginOn(t, newV2Host, func(c *kubeletplugin.Config) {
		c.OffloadInterval, c.Offload, c.OffloadMaxPassBytes = 200*time.Millisecond, offload.DefaultParams(), 256*mi
		c.MetricsAddress = fmt.Sprintf("127.0.0.1:%d", metricsPort)
	})
	waitForSlice(t, ctx, client, "the node offloads", func(d *resourceapi.Device) bool { return d != nil && attr(d, "offload") == "true" })
	ns := "default"
	pod := podOnNode(t, ctx, client, ns, "offloaded")
	// The parameters' keys in alphabetical order, as kubectl sends them
	// (sigs.k8s.io/yaml): with another order the API server refuses the
	// plugin's server-side apply of the claim's status, whatever it holds
	// (the merge writes the parameters back sorted, so the allocation looks
	// changed: "status.allocation: ... cannot be modified once set").
	claim := configuredClaim(t, ctx, client, ns, "offload", "512Mi",
		`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":0.5},"zswap":"CompressedOnly"}`, pod)
	conn, err := grpc.NewClient("unix://"+filepath.Join(cfg.PluginDataDir, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: ns, Name: claim.Name, Uid: string(claim.UID)}}})
	if err != nil || resp.Claims[string(claim.UID)].GetError() != "" {
		t.Fatalf("prepare: %+v, %v", resp, err)
	}
	spec, err := os.ReadFile(filepath.Join(cfg.CDIDir, "dra.swap-swap_"+string(claim.UID)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"--zswap-writeback=off"`, `"--offload-max-stall=50"`} {
		if !strings.Contains(string(spec), want) {
			t.Errorf("CDI spec lacks %s: %s", want, spec)
		}
	}

	// What the hook records when the container starts, and its cgroup.
	const cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	group := "/kubepods.slice/kubepods-pod" + strings.ReplaceAll(string(pod.UID), "-", "_") + ".slice/cri-containerd-" + cid + ".scope"
	dir := filepath.Join(cfg.HookStateDir, cid)
	if err := hookstate.WriteContainer(dir, hookstate.Container{ID: cid, CgroupVersion: 2, CgroupGroup: group,
		Namespace: ns, Pod: pod.Name, PodUID: string(pod.UID), Name: "app"}); err != nil {
		t.Fatal(err)
	}
	if err := hookstate.Record(dir, hookstate.ShareKey(string(claim.UID), 0), hookstate.Share{Settings: swapsettings.Settings{
		LimitBytes: 512 * mi, ZswapWritebackOff: true, OffloadMaxStall: ptr.To[int32](50)}}); err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join("sys/fs/cgroup", group)
	stall := func(total int) {
		h.write(filepath.Join(cg, "memory.pressure"), fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", total))
	}
	stall(0)
	h.write(filepath.Join(cg, "memory.current"), fmt.Sprint(1*gi))
	h.write(filepath.Join(cg, "memory.swap.current"), fmt.Sprint(20*mi))
	h.write(filepath.Join(cg, "memory.swap.peak"), fmt.Sprint(30*mi))
	h.write(filepath.Join(cg, "memory.reclaim"), "")
	h.write(filepath.Join(cg, "memory.swap.max"), fmt.Sprint(512*mi))

	// The loop reclaims 1 % of memory.current.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(filepath.Join(h.root, cg, "memory.reclaim"))
		return err == nil && strings.HasPrefix(string(data), "10735616"), err
	}); err != nil {
		data, _ := os.ReadFile(filepath.Join(h.root, cg, "memory.reclaim"))
		t.Fatalf("memory.reclaim holds %q, want a step of 10735616 bytes: %v", data, err)
	}
	// The claim's status carries the figures.
	var data claimstatus.DeviceStatusData
	var raw string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil || len(c.Status.Devices) != 1 || c.Status.Devices[0].Data == nil {
			return false, err
		}
		raw = string(c.Status.Devices[0].Data.Raw)
		data = claimstatus.DeviceStatusData{}
		return json.Unmarshal(c.Status.Devices[0].Data.Raw, &data) == nil && data.Offload != nil && data.Offload.State == offload.ReasonOffloading, nil
	}); err != nil {
		t.Fatalf("the claim's status data %s lacks the loop's figures: %v", raw, err)
	}
	if o := data.Offload; o.SwapBytes != 20*mi || ptr.Deref(o.SwapPeakBytes, 0) != 30*mi || o.MaxStallPercent != 50 || o.Containers != 1 || o.ReclaimedBytes < 10735616 ||
		data.Config == nil || data.Config.Zswap != v1alpha1.ZswapCompressedOnly {
		t.Errorf("status data %s", raw)
	}
	metrics := scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	for _, want := range []string{`dra_swap_offload_containers 1`, `dra_swap_offload_swap_used_bytes{claim="offload",claim_namespace="default"} 2.097152e+07`,
		`dra_swap_offload_max_stall_ratio{claim="offload",claim_namespace="default"} 0.005`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// The container stalls: a second of stall in every 200 ms pass is far
	// above 0.5 %. The loop pauses and tells the pod once.
	for total := 1_000_000; ; total += 1_000_000 {
		stall(total)
		var events []string
		list, err := client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + pod.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			events = append(events, e.Reason+": "+e.Note)
			if e.Reason == kubeletplugin.ReasonOffloadBackedOff {
				if !strings.Contains(e.Note, `Offload of container "app" on node "node-a" paused`) || !strings.Contains(e.Note, "above the budget of 0.50% of claim offload") {
					t.Errorf("event %q", e.Note)
				}
				return
			}
		}
		if total > 100_000_000 {
			t.Fatalf("no %s event; events: %q", kubeletplugin.ReasonOffloadBackedOff, events)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runPluginOn is runPlugin on the host tree newHost makes.
func runPluginOn(t testing.TB, newHost func(testing.TB) hostTree, configure ...func(*kubeletplugin.Config)) (context.Context, kubernetes.Interface, hostTree, kubeletplugin.Config) {
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

// newV2Host is newHost's node on cgroup v2 (systemd's kubepods.slice) with
// what offload and compressed-only swap need: memory.reclaim, PSI, zswap.
func newV2Host(t testing.TB) hostTree {
	h := newHost(t)
	if err := os.RemoveAll(filepath.Join(h.root, "sys/fs/cgroup")); err != nil {
		t.Fatal(err)
	}
	h.write("sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n")
	for file, content := range map[string]string{"memory.swap.max": "max\n", "memory.reclaim": "", "memory.zswap.writeback": "1\n",
		"memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"} {
		h.write(filepath.Join("sys/fs/cgroup/kubepods.slice", file), content)
	}
	h.write("sys/module/zswap/parameters/enabled", "Y\n")
	return h
}

// podOnNode creates a pod on the plugin's node that uses claim "swap".
func podOnNode(t *testing.T, ctx context.Context, client kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// configuredClaim creates a claim with a dra.swap opaque config, allocated
// on the plugin's node with that config and reserved for pod.
func configuredClaim(t *testing.T, ctx context.Context, client kubernetes.Interface, ns, name, size, params string, pod *corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	config := resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: v1alpha1.DriverName, Parameters: runtime.RawExtension{Raw: []byte(params)}}}
	claim, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "swap", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "dra.swap"}}},
			Config:   []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: config}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "swap", Driver: "dra.swap", Pool: nodeName, Device: "swap",
			ShareID:          ptr.To(uuid.NewUUID()),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": resource.MustParse(size)},
		}},
		Config: []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: config}},
	}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	claim, err = client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}
