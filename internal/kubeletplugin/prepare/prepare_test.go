package prepare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
)

const (
	node  = "node-a"
	boot  = "boot-1"
	mi    = int64(1) << 20
	uidA  = "00000000-0000-4000-8000-00000000000a"
	uidB  = "00000000-0000-4000-8000-00000000000b"
	podID = "00000000-0000-4000-8000-0000000000f0"
)

// env is a Manager over real spec and checkpoint files in a temp dir.
type env struct {
	t       testing.TB
	specDir string
	store   *checkpoint.Store
	writer  *cdi.Writer
	pods    *fakePods
	saver   *failingStore
	m       *Manager
	// cgroup and offer are what the node says (prepare.Node): its cgroup
	// version and its offer (negative: not known, no check).
	cgroup int
	offer  int64
	// noOffload and noCompressedOnly say why the node cannot offload or
	// keep pages compressed only ("": it can).
	noOffload, noCompressedOnly string
	// recorded and prepared, when set, are what the Observer calls.
	recorded func(claims int, limitBytes int64)
	prepared func(ClaimReport)
}

func (e *env) Support() v1alpha1.NodeSupport {
	return v1alpha1.NodeSupport{CgroupVersion: e.cgroup, Offload: e.noOffload, CompressedOnly: e.noCompressedOnly}
}
func (e *env) Offer() int64 { return e.offer }

func (e *env) Recorded(claims int, limitBytes int64) {
	if e.recorded != nil {
		e.recorded(claims, limitBytes)
	}
}

func (e *env) Prepared(r ClaimReport) {
	if e.prepared != nil {
		e.prepared(r)
	}
}

type fakePods struct {
	pods map[string]*corev1.Pod
	err  error
}

// GetPod is what the plugin's cache answers once its wait is over: the pod
// of that name and UID, else NotFound (a pod of that name with another UID
// is an earlier pod of the same name).
func (f *fakePods) GetPod(_ context.Context, namespace, name string, uid types.UID) (*corev1.Pod, error) {
	if f.err != nil {
		return nil, f.err
	}
	if p, ok := f.pods[namespace+"/"+name]; ok && p.UID == uid {
		return p, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

// failingStore is a checkpoint.Store whose saves fail while fail is set.
type failingStore struct {
	*checkpoint.Store
	fail bool
}

var errDiskFull = errors.New("disk full")

// Update does what checkpoint.Store.Update does when its save fails:
// change runs on the checkpoint, nothing is saved, undo runs.
func (f *failingStore) Update(change func(*checkpoint.Checkpoint) error, undo func() error) error {
	if !f.fail {
		return f.Store.Update(change, undo)
	}
	err := f.Store.Update(func(cp *checkpoint.Checkpoint) error {
		if err := change(cp); err != nil {
			return err
		}
		return errDiskFull
	}, nil)
	if errors.Is(err, errDiskFull) && undo != nil {
		if undoErr := undo(); undoErr != nil {
			err = errors.Join(err, undoErr)
		}
	}
	return err
}

func newEnv(t testing.TB) *env {
	return newEnvIn(t, t.TempDir())
}

// newEnvIn is an env on the spec directory and checkpoint in dir, which
// other envs (other plugin instances) may share.
//
// Its pod cache holds the pod "ns/pod" that newClaim's claims are reserved
// for, with no containers: the kubelet prepares a claim only for a pod
// bound to the node. Tests that look at containers replace it.
func newEnvIn(t testing.TB, dir string) *env {
	e := &env{t: t, specDir: filepath.Join(dir, "cdi"), pods: &fakePods{pods: map[string]*corev1.Pod{"ns/pod": pod(nil)}}, cgroup: 1, offer: -1}
	var err error
	e.writer, err = cdi.NewWriter(e.specDir, "/opt/dra-swap/bin/dra-swap-hook", "/run/dra-swap/hook")
	if err != nil {
		t.Fatal(err)
	}
	e.store = checkpoint.NewStore(filepath.Join(dir, "checkpoint.json"), boot)
	e.saver = &failingStore{Store: e.store}
	e.restart()
	return e
}

// restart builds a new Manager, as a restarted plugin does.
func (e *env) restart() {
	e.m = NewManager(Options{DriverName: "dra.swap", PoolName: node, Node: e, Observer: e}, e.writer, e.saver, e.pods)
}

func (e *env) specFiles() []string {
	entries, _ := os.ReadDir(e.specDir)
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	return names
}

func (e *env) spec(uid string) *cdispec.Spec {
	data, err := os.ReadFile(filepath.Join(e.specDir, cdi.SpecName(uid)+".json"))
	if err != nil {
		e.t.Fatal(err)
	}
	var s cdispec.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		e.t.Fatal(err)
	}
	return &s
}

func (e *env) checkpointed() map[types.UID]checkpoint.ClaimInfo {
	cp, _, err := e.store.Load()
	if err != nil {
		e.t.Fatal(err)
	}
	return cp.Claims
}

type claimOpt func(*resourceapi.ResourceClaim)

func newClaim(uid, name string, bytes int64, opts ...claimOpt) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "swap", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "dra.swap"},
		}}}},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: "swap", Driver: "dra.swap", Pool: node, Device: "swap",
					ShareID:          ptr.To(types.UID("11111111-0000-4000-8000-" + uid[24:])),
					ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": *resource.NewQuantity(bytes, resource.BinarySI)},
				}},
			}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod", UID: podID}},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// withConfig adds an opaque config to the allocation the way the
// scheduler does; one from the claim is in the claim's spec too.
func withConfig(source resourceapi.AllocationConfigSource, raw string, requests ...string) claimOpt {
	return func(c *resourceapi.ResourceClaim) {
		config := resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "dra.swap", Parameters: runtime.RawExtension{Raw: []byte(raw)},
		}}
		c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: source, Requests: requests, DeviceConfiguration: config,
		})
		if source == resourceapi.AllocationConfigSourceClaim {
			c.Spec.Devices.Config = append(c.Spec.Devices.Config, resourceapi.DeviceClaimConfiguration{Requests: requests, DeviceConfiguration: config})
		}
	}
}

// pod builds a pod whose containers use the named pod-level claims; each
// pod-level claim "x" resolves to the ResourceClaim "x".
func pod(containers map[string][]string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod", UID: podID}}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c})
		p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: c, ResourceClaimName: ptr.To(c)})
	}
	for _, name := range []string{"a", "b", "c"} {
		refs, ok := containers[name]
		if !ok {
			continue
		}
		ctr := corev1.Container{Name: name}
		for _, r := range refs {
			ctr.Resources.Claims = append(ctr.Resources.Claims, corev1.ResourceClaim{Name: r})
		}
		p.Spec.Containers = append(p.Spec.Containers, ctr)
	}
	return p
}

// devicesString prints devices with their share IDs' values.
func devicesString(devices []kubeletplugin.Device) string {
	var b strings.Builder
	for _, d := range devices {
		share := "<nil>"
		if d.ShareID != nil {
			share = string(*d.ShareID)
		}
		fmt.Fprintf(&b, "{%v %s %s %v %s}", d.Requests, d.PoolName, d.DeviceName, d.CDIDeviceIDs, share)
	}
	return b.String()
}

func envValue(s *cdispec.Spec) string {
	return strings.TrimPrefix(s.Devices[0].ContainerEdits.Env[0], v1alpha1.EnvSwapLimit+"=")
}

func hookArgs(s *cdispec.Spec) string {
	return strings.Join(s.Devices[0].ContainerEdits.Hooks[0].Args, " ")
}

func TestPrepareOneClaim(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	e.pods.pods["ns/pod"] = pod(map[string][]string{"a": {"swap"}, "b": nil}, "swap")
	claim := newClaim(uidA, "swap", 300*mi)

	res := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})
	r := res[claim.UID]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := kubeletplugin.Device{Requests: []string{"swap"}, PoolName: node, DeviceName: "swap", CDIDeviceIDs: []string{"dra.swap/swap=" + uidA + "-0"}}
	if len(r.Devices) != 1 || fmt.Sprint(r.Devices[0].Requests, r.Devices[0].PoolName, r.Devices[0].DeviceName, r.Devices[0].CDIDeviceIDs) !=
		fmt.Sprint(want.Requests, want.PoolName, want.DeviceName, want.CDIDeviceIDs) || r.Devices[0].ShareID == nil {
		t.Fatalf("devices = %+v", r.Devices)
	}
	s := e.spec(uidA)
	if got := envValue(s); got != "314572800" {
		t.Errorf("env = %s", got)
	}
	if got := hookArgs(s); !strings.Contains(got, "--swap-limit=314572800 --claim-uid="+uidA) {
		t.Errorf("hook args = %s", got)
	}
	if c := e.checkpointed()[claim.UID]; c.LimitBytes != 300*mi || c.Name != "swap" {
		t.Errorf("checkpoint entry = %+v", c)
	}
	if n, b, err := e.m.Prepared(); n != 1 || b != 300*mi || err != nil {
		t.Errorf("Prepared() = %d, %d, %v", n, b, err)
	}

	// Idempotent: again, and again after a restart.
	for i, restart := range []bool{false, true} {
		if restart {
			e.restart()
		}
		again := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
		if again.Err != nil || devicesString(again.Devices) != devicesString(r.Devices) {
			t.Fatalf("prepare #%d = %+v, want %+v", i+2, again, r)
		}
		if files := e.specFiles(); len(files) != 1 || len(e.checkpointed()) != 1 {
			t.Fatalf("prepare #%d: specs %v, checkpoint %v", i+2, files, e.checkpointed())
		}
	}
}

func TestPrepareEnvAddsUp(t *testing.T) {
	tests := []struct {
		name       string
		containers map[string][]string
		wantA      int64
		wantB      int64
	}{
		{name: "one container, two claims", containers: map[string][]string{"a": {"x", "y"}}, wantA: 300 * mi, wantB: 300 * mi},
		{name: "two containers, one claim each", containers: map[string][]string{"a": {"x"}, "b": {"y"}}, wantA: 100 * mi, wantB: 200 * mi},
		{name: "claim x shared by containers with different totals", containers: map[string][]string{"a": {"x", "y"}, "b": {"x"}}, wantA: 100 * mi, wantB: 300 * mi},
		{name: "same claim twice in one container counts once", containers: map[string][]string{"a": {"x", "x"}, "b": {"y"}}, wantA: 100 * mi, wantB: 200 * mi},
		{name: "another driver's claim adds nothing", containers: map[string][]string{"a": {"x", "gpu"}, "b": {"y"}}, wantA: 100 * mi, wantB: 200 * mi},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := testContext(t)
			e.pods.pods["ns/pod"] = pod(tc.containers, "x", "y", "gpu")
			x, y := newClaim(uidA, "x", 100*mi), newClaim(uidB, "y", 200*mi)
			for uid, r := range e.m.Prepare(ctx, []*resourceapi.ResourceClaim{x, y}) {
				if r.Err != nil {
					t.Fatalf("%s: %v", uid, r.Err)
				}
			}
			if got := envValue(e.spec(uidA)); got != fmt.Sprint(tc.wantA) {
				t.Errorf("env of x = %s, want %d", got, tc.wantA)
			}
			if got := envValue(e.spec(uidB)); got != fmt.Sprint(tc.wantB) {
				t.Errorf("env of y = %s, want %d", got, tc.wantB)
			}
			// The hook still gets each claim's own bytes: it sums per container.
			if got := hookArgs(e.spec(uidB)); !strings.Contains(got, "--swap-limit=209715200 ") {
				t.Errorf("hook args of y = %s", got)
			}
		})
	}
}

func TestPrepareUsesCheckpointForEarlierClaims(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	e.pods.pods["ns/pod"] = pod(map[string][]string{"a": {"x", "y"}}, "x", "y")
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidA, "x", 100*mi)})[uidA]; r.Err != nil {
		t.Fatal(r.Err)
	}
	e.restart()
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidB, "y", 200*mi)})[uidB]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := envValue(e.spec(uidB)); got != fmt.Sprint(300*mi) {
		t.Errorf("env of y = %s, want the sum with the checkpointed x", got)
	}
}

func TestPrepareConfig(t *testing.T) {
	tests := []struct {
		name     string
		cgroup   int
		opts     []claimOpt
		wantArgs []string
		wantErr  string
		// noOffload and noCompressedOnly are the node's reasons.
		noOffload, noCompressedOnly string
	}{
		{
			name:   "class and claim merge on v2",
			cgroup: 2,
			opts: []claimOpt{
				withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":50}`),
				withConfig(resourceapi.AllocationConfigSourceClass, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":90,"zswap":"Disabled"}`),
			},
			wantArgs: []string{"--swap-high=52428800", "--zswap=off"},
		},
		{
			name:     "swappiness on v1",
			cgroup:   1,
			opts:     []claimOpt{withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":10}`)},
			wantArgs: []string{"--swappiness=10"},
		},
		{
			name:    "unknown field",
			cgroup:  1,
			opts:    []claimOpt{withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","limit":"1Gi"}`)},
			wantErr: `spec.devices.config[0].opaque.parameters: Invalid value: decode dra.swap/v1alpha1 SwapConfig: strict decoding error: unknown field "limit"`,
		},
		{
			name:    "invalid value",
			cgroup:  2,
			opts:    []claimOpt{withConfig(resourceapi.AllocationConfigSourceClass, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":500}`)},
			wantErr: `DeviceClass dra.swap (its config for request "swap"): spec.config.opaque.parameters.swapHighPercent: Invalid value: 500`,
		},
		{
			name:    "v2 knob on a v1 node",
			cgroup:  1,
			opts:    []claimOpt{withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"Enabled"}`)},
			wantErr: "spec.devices.config[0].opaque.parameters.zswap: Forbidden: memory.zswap.max exists only on cgroup v2; this node uses cgroup v1",
		},
		{
			name:   "offload and compressed only on a capable v2 node",
			cgroup: 2,
			opts: []claimOpt{
				withConfig(resourceapi.AllocationConfigSourceClass, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":0.5}}`),
				withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"CompressedOnly","offload":{}}`),
			},
			wantArgs: []string{"--zswap-writeback=off", "--offload-max-stall=50"},
		},
		{
			name:    "offload on a v1 node",
			cgroup:  1,
			opts:    []claimOpt{withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{"maxStallPercent":0.5}}`)},
			wantErr: "spec.devices.config[0].opaque.parameters.offload: Forbidden: offload needs cgroup v2 (memory.reclaim and memory.pressure); this node uses cgroup v1",
		},
		{
			name:    "compressed only on a v1 node",
			cgroup:  1,
			opts:    []claimOpt{withConfig(resourceapi.AllocationConfigSourceClass, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"CompressedOnly"}`)},
			wantErr: `DeviceClass dra.swap (its config for request "swap"): spec.config.opaque.parameters.zswap: Forbidden: CompressedOnly needs memory.zswap.writeback`,
		},
		{
			name:      "offload on a v2 node that cannot",
			cgroup:    2,
			noOffload: "the kernel has no memory.reclaim (Linux 5.19 or later)",
			opts:      []claimOpt{withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","offload":{}}`)},
			wantErr:   "spec.devices.config[0].opaque.parameters.offload: Forbidden: this node cannot offload: the kernel has no memory.reclaim (Linux 5.19 or later)",
		},
		{
			name:             "compressed only on a v2 node that cannot",
			cgroup:           2,
			noCompressedOnly: "zswap is disabled",
			opts:             []claimOpt{withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"CompressedOnly"}`)},
			wantErr:          "spec.devices.config[0].opaque.parameters.zswap: Forbidden: this node cannot keep pages compressed only: zswap is disabled",
		},
		{
			name:   "the user's index: the second config of the claim, after a class's",
			cgroup: 1,
			opts: []claimOpt{
				withConfig(resourceapi.AllocationConfigSourceClass, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":5}`),
				func(c *resourceapi.ResourceClaim) {
					// A config for another driver comes first in the claim.
					c.Spec.Devices.Config = append(c.Spec.Devices.Config, resourceapi.DeviceClaimConfiguration{
						DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.example.com"}}})
				},
				withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":101}`),
			},
			wantErr: "spec.devices.config[1].opaque.parameters.swappiness: Invalid value: 101",
		},
		{
			name:   "a config naming the request applies to the subrequest the scheduler chose",
			cgroup: 1,
			opts: []claimOpt{
				func(c *resourceapi.ResourceClaim) {
					c.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "swap", FirstAvailable: []resourceapi.DeviceSubRequest{
						{Name: "fast", DeviceClassName: "dra.swap-fast"}, {Name: "any", DeviceClassName: "dra.swap"}}}
					c.Status.Allocation.Devices.Results[0].Request = "swap/fast"
				},
				withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":7}`, "swap"),
			},
			wantArgs: []string{"--swappiness=7"},
		},
		{
			name:   "a class config of the chosen subrequest names its class",
			cgroup: 1,
			opts: []claimOpt{
				func(c *resourceapi.ResourceClaim) {
					c.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "swap", FirstAvailable: []resourceapi.DeviceSubRequest{
						{Name: "fast", DeviceClassName: "dra.swap-fast"}, {Name: "any", DeviceClassName: "dra.swap"}}}
					c.Status.Allocation.Devices.Results[0].Request = "swap/fast"
				},
				withConfig(resourceapi.AllocationConfigSourceClass, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"Enabled"}`, "swap/fast"),
			},
			wantErr: `DeviceClass dra.swap-fast (its config for request "swap/fast"): spec.config.opaque.parameters.zswap: Forbidden`,
		},
		{
			name:   "another driver's config is ignored",
			cgroup: 1,
			opts: []claimOpt{func(c *resourceapi.ResourceClaim) {
				withConfig(resourceapi.AllocationConfigSourceClaim, `not json`)(c)
				c.Status.Allocation.Devices.Config[0].Opaque.Driver = "gpu.example.com"
			}},
		},
		{
			name:   "config for another request is ignored",
			cgroup: 1,
			opts: []claimOpt{func(c *resourceapi.ResourceClaim) {
				withConfig(resourceapi.AllocationConfigSourceClaim, `not json`)(c)
				c.Status.Allocation.Devices.Config[0].Requests = []string{"gpu"}
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.cgroup, e.noOffload, e.noCompressedOnly = tc.cgroup, tc.noOffload, tc.noCompressedOnly
			ctx := testContext(t)
			claim := newClaim(uidA, "swap", 100*mi, tc.opts...)
			r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
			if tc.wantErr != "" {
				if r.Err == nil || !strings.Contains(r.Err.Error(), tc.wantErr) || !strings.Contains(r.Err.Error(), "ns/swap") {
					t.Fatalf("error = %v, want one naming the claim and %q", r.Err, tc.wantErr)
				}
				assertNothingLeft(t, e)
				return
			}
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			args := hookArgs(e.spec(uidA))
			for _, want := range tc.wantArgs {
				if !strings.Contains(args, want) {
					t.Errorf("hook args %q lack %q", args, want)
				}
			}
		})
	}
}

func assertNothingLeft(t *testing.T, e *env) {
	t.Helper()
	if files := e.specFiles(); len(files) != 0 {
		t.Errorf("CDI specs left behind: %v", files)
	}
	if cp := e.checkpointed(); len(cp) != 0 {
		t.Errorf("checkpoint entries left behind: %v", cp)
	}
}

func TestPrepareRejectsBadAllocations(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*resourceapi.ResourceClaim)
		wantErr string
	}{
		{name: "not allocated", mutate: func(c *resourceapi.ResourceClaim) { c.Status.Allocation = nil }, wantErr: "not allocated"},
		{name: "no consumed capacity", mutate: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].ConsumedCapacity = nil }, wantErr: `no consumed "swap" capacity`},
		{name: "zero bytes", mutate: func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].ConsumedCapacity["swap"] = resource.MustParse("0")
		}, wantErr: "the node offers none"},
		{name: "negative bytes", mutate: func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].ConsumedCapacity["swap"] = resource.MustParse("-1Mi")
		}, wantErr: "outside 1.."},
		{name: "absurd bytes", mutate: func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].ConsumedCapacity["swap"] = resource.MustParse("8Ei")
		}, wantErr: "outside 1.."},
		{name: "above the largest swap value", mutate: func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].ConsumedCapacity["swap"] = resource.MustParse("1025Ti")
		}, wantErr: "outside 1..1125899906842624 bytes"},
		{name: "other node's pool", mutate: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Pool = "node-b" }, wantErr: "not this node's swap device"},
		{name: "only other drivers", mutate: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Driver = "gpu.example.com" }, wantErr: "no device of driver dra.swap"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			claim := newClaim(uidA, "swap", 100*mi)
			tc.mutate(claim)
			r := e.m.Prepare(testContext(t), []*resourceapi.ResourceClaim{claim})[claim.UID]
			if r.Err == nil || !strings.Contains(r.Err.Error(), tc.wantErr) || !strings.Contains(r.Err.Error(), uidA) {
				t.Fatalf("error = %v, want one naming the claim and %q", r.Err, tc.wantErr)
			}
			assertNothingLeft(t, e)
		})
	}
}

func TestPrepareFailureLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	e.saver.fail = true
	claim := newClaim(uidA, "swap", 100*mi)
	r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
	if r.Err == nil || !strings.Contains(r.Err.Error(), "disk full") || !strings.Contains(r.Err.Error(), "ns/swap") {
		t.Fatalf("error = %v", r.Err)
	}
	assertNothingLeft(t, e)
	if n, _, err := e.m.Prepared(); n != 0 || err != nil {
		t.Errorf("Prepared() = %d, %v after a failed prepare", n, err)
	}

	// A claim prepared before keeps its spec when a repeated prepare fails.
	e.saver.fail = false
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	e.saver.fail = true
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]; r.Err == nil {
		t.Fatal("want an error")
	}
	if files := e.specFiles(); len(files) != 1 {
		t.Errorf("spec of the prepared claim was removed: %v", files)
	}

	// Pod lookups that fail (other than NotFound) fail the claim.
	e2 := newEnv(t)
	e2.pods.err = errors.New("connection refused")
	if r := e2.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidB, "y", mi)})[uidB]; r.Err == nil || !strings.Contains(r.Err.Error(), "look up pod ns/pod") {
		t.Fatalf("error = %v", r.Err)
	}
	assertNothingLeft(t, e2)
}

func TestPrepareCriticalPods(t *testing.T) {
	for _, allow := range []bool{false, true} {
		e := newEnv(t)
		e.m.opts.AllowCriticalPods = allow
		p := pod(map[string][]string{"a": {"swap"}}, "swap")
		p.Spec.PriorityClassName = "system-node-critical"
		e.pods.pods["ns/pod"] = p
		r := e.m.Prepare(testContext(t), []*resourceapi.ResourceClaim{newClaim(uidA, "swap", mi)})[uidA]
		if allow != (r.Err == nil) {
			t.Errorf("allow=%v: error %v", allow, r.Err)
		}
		if !allow && !strings.Contains(fmt.Sprint(r.Err), "critical pods never swap") {
			t.Errorf("error = %v", r.Err)
		}
	}
}

func TestUnprepare(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	claim := newClaim(uidA, "swap", 100*mi)
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	obj := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "swap"}, UID: claim.UID}
	unknown := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "other"}, UID: uidB}

	e.restart() // unprepare may run in another plugin instance
	for i := range 2 {
		res := e.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{obj, unknown})
		if len(res) != 2 || res[obj.UID] != nil || res[unknown.UID] != nil {
			t.Fatalf("unprepare #%d = %v", i+1, res)
		}
		assertNothingLeft(t, e)
	}
}

func TestUnprepareWithoutCheckpointRemovesSpec(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidA, "swap", mi)})[uidA]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := os.Remove(e.store.Path()); err != nil {
		t.Fatal(err)
	}
	e.restart()
	obj := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "swap"}, UID: uidA}
	if err := e.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{obj})[uidA]; err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, e)
}

func TestUnprepareSaveFailure(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidA, "swap", mi)})[uidA]; r.Err != nil {
		t.Fatal(r.Err)
	}
	e.saver.fail = true
	obj := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "swap"}, UID: uidA}
	if err := e.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{obj})[uidA]; err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("error = %v", err)
	}
	e.saver.fail = false
	if err := e.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{obj})[uidA]; err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, e)
}

func TestContainerTotalsInitContainersAndDirectClaims(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "direct", ResourceClaimName: ptr.To("real-claim")}},
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "direct"}}}}},
		Containers:     []corev1.Container{{Name: "main"}},
	}}
	got := containerShares(p, func(name string) []share {
		if name == "real-claim" {
			return []share{{claim: name, index: 0, request: "swap", limitBytes: 5}}
		}
		return nil
	})
	if fmt.Sprint(got) != "[[{real-claim 0 swap 5}] []]" {
		t.Fatalf("shares = %v", got)
	}
}

func BenchmarkPrepare(b *testing.B) {
	for _, n := range []int{1, 110} {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			e := newEnv(b)
			ctx := context.Background()
			claims := make([]*resourceapi.ResourceClaim, n)
			objs := make([]kubeletplugin.NamespacedObject, n)
			for i := range claims {
				uid := fmt.Sprintf("00000000-0000-4000-8000-%012x", i)
				claims[i] = newClaim(uid, fmt.Sprintf("claim-%d", i), mi)
				objs[i] = kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: claims[i].Name}, UID: claims[i].UID}
			}
			b.ResetTimer()
			for b.Loop() {
				// One kubelet call per pod, one claim per pod.
				for _, c := range claims {
					if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{c})[c.UID]; r.Err != nil {
						b.Fatal(r.Err)
					}
				}
				b.StopTimer()
				e.m.Unprepare(ctx, objs)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/claim")
		})
	}
}

// BenchmarkPrepareBurst has 12 pods' claims prepared at once, one call per
// pod as the kubelet makes them for pods that start together, and reports
// the mean call.
func BenchmarkPrepareBurst(b *testing.B) {
	const pods = 12
	e := newEnv(b)
	ctx := context.Background()
	claims := make([]*resourceapi.ResourceClaim, pods)
	objs := make([]kubeletplugin.NamespacedObject, pods)
	for i := range claims {
		uid := fmt.Sprintf("00000000-0000-4000-8000-%012x", i)
		claims[i] = newClaim(uid, fmt.Sprintf("claim-%d", i), mi)
		objs[i] = kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: claims[i].Name}, UID: claims[i].UID}
	}
	var total time.Duration
	for b.Loop() {
		var wg sync.WaitGroup
		took := make([]time.Duration, pods)
		for i, c := range claims {
			wg.Go(func() {
				start := time.Now()
				if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{c})[c.UID]; r.Err != nil {
					b.Error(r.Err)
				}
				took[i] = time.Since(start)
			})
		}
		wg.Wait()
		b.StopTimer()
		for _, d := range took {
			total += d
		}
		e.m.Unprepare(ctx, objs)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N*pods), "ms/call")
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}
