package prepare

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

const otherPodID = "00000000-0000-4000-8000-0000000000f1"

// withResult adds another allocation result of the claim for request.
func withResult(request string, bytes int64) claimOpt {
	return func(c *resourceapi.ResourceClaim) {
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: request, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "dra.swap"}})
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: request, Driver: "dra.swap", Pool: node, Device: "swap",
			ShareID:          ptr.To(types.UID(fmt.Sprintf("22222222-0000-4000-8000-%012d", len(c.Status.Allocation.Devices.Results)))),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": *resource.NewQuantity(bytes, resource.BinarySI)},
		})
	}
}

// device returns the spec's device for a result index.
func device(t *testing.T, s *cdispec.Spec, uid string, index int) cdispec.Device {
	t.Helper()
	for _, d := range s.Devices {
		if d.Name == cdi.DeviceName(uid, index) {
			return d
		}
	}
	t.Fatalf("spec has no device for result %d: %+v", index, s.Devices)
	return cdispec.Device{}
}

func deviceEnv(d cdispec.Device) string {
	return strings.Join(d.ContainerEdits.Env, " ")
}

func deviceArgs(d cdispec.Device) string {
	if len(d.ContainerEdits.Hooks) == 0 {
		return ""
	}
	return strings.Join(d.ContainerEdits.Hooks[0].Args, " ")
}

// A claim with two requests gets one device per request result, each with
// its own bytes: a container that references one request gets that
// request's swap, not the claim's.
func TestPrepareOneDevicePerRequest(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	p := pod(map[string][]string{"a": {"swap"}, "b": {"swap"}}, "swap")
	p.Spec.Containers[0].Resources.Claims[0].Request = "r1" // a: only r1's swap
	e.pods.pods["ns/pod"] = p
	claim := newClaim(uidA, "swap", 100*mi, withResult("r2", 200*mi))
	claim.Status.Allocation.Devices.Results[0].Request = "r1"
	claim.Spec.Devices.Requests[0].Name = "r1"

	r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if len(r.Devices) != 2 ||
		!slices.Equal(r.Devices[0].Requests, []string{"r1"}) || !slices.Equal(r.Devices[0].CDIDeviceIDs, []string{cdi.DeviceID(uidA, 0)}) ||
		!slices.Equal(r.Devices[1].Requests, []string{"r2"}) || !slices.Equal(r.Devices[1].CDIDeviceIDs, []string{cdi.DeviceID(uidA, 1)}) {
		t.Fatalf("devices = %s, want one per request with its own CDI device", devicesString(r.Devices))
	}
	s := e.spec(uidA)
	d0, d1 := device(t, s, uidA, 0), device(t, s, uidA, 1)
	if args := deviceArgs(d0); !strings.Contains(args, "--swap-limit=104857600 ") || !strings.Contains(args, "--result-index=0") {
		t.Errorf("r1's hook args = %s", args)
	}
	if args := deviceArgs(d1); !strings.Contains(args, "--swap-limit=209715200 ") || !strings.Contains(args, "--result-index=1") {
		t.Errorf("r2's hook args = %s", args)
	}
	// r1 reaches a (100Mi in all) and b (300Mi): no single total fits, so
	// its variable shows its own bytes; r2 reaches b only.
	if env := deviceEnv(d0); env != "DRA_SWAP_LIMIT_BYTES=104857600" {
		t.Errorf("r1's env = %s", env)
	}
	if env := deviceEnv(d1); env != "DRA_SWAP_LIMIT_BYTES=314572800" {
		t.Errorf("r2's env = %s", env)
	}
	// Each container's own requests add up to no more than the claim, so
	// the pod needs no budget of its own... except that r1 is also used by
	// b, which makes a and b together able to use 400Mi of a 300Mi claim.
	if args := deviceArgs(d0); !strings.Contains(args, "--pod-swap-limit=314572800") {
		t.Errorf("r1's hook args = %s, want the pod's budget of 300Mi", args)
	}
}

// A claim's swap goes to the first pod in its reservedFor: its spec names
// that pod, and the hook refuses the containers of every other pod.
func TestPrepareGrantsTheClaimToOnePod(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	first := pod(map[string][]string{"a": {"swap"}}, "swap")
	second := pod(map[string][]string{"a": {"swap"}}, "swap")
	second.Name, second.UID = "second", otherPodID
	e.pods.pods["ns/pod"], e.pods.pods["ns/second"] = first, second
	claim := newClaim(uidA, "swap", 100*mi)
	claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "second", UID: otherPodID})
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if args := deviceArgs(device(t, e.spec(uidA), uidA, 0)); !strings.Contains(args, "--pod-uid="+podID) {
		t.Errorf("hook args = %s, want the first pod's UID", args)
	}
	// The first pod is gone, or is gone and was recreated under its name
	// (another UID): the next one in reservedFor gets it.
	recreated := pod(map[string][]string{"a": {"swap"}}, "swap")
	recreated.UID = "00000000-0000-4000-8000-0000000000f2"
	for name, first := range map[string]*corev1.Pod{"gone": nil, "recreated": recreated} {
		e2 := newEnv(t)
		delete(e2.pods.pods, "ns/pod")
		if first != nil {
			e2.pods.pods["ns/pod"] = first
		}
		e2.pods.pods["ns/second"] = second
		if r := e2.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]; r.Err != nil {
			t.Fatalf("%s: %v", name, r.Err)
		}
		if args := deviceArgs(device(t, e2.spec(uidA), uidA, 0)); !strings.Contains(args, "--pod-uid="+otherPodID) {
			t.Errorf("%s: hook args = %s, want the second pod's UID", name, args)
		}
	}
}

// The kubelet prepares a claim only for a pod bound to the node and in the
// claim's reservedFor: when the plugin's cache shows none of them (it lags,
// or holds an earlier pod of the same name), the claim fails for the
// kubelet to retry, and nothing is prepared without a pod to bound it.
func TestPrepareFailsWithoutAReservedPod(t *testing.T) {
	recreated := pod(map[string][]string{"a": {"swap"}}, "swap")
	recreated.UID = "00000000-0000-4000-8000-0000000000f2"
	tests := []struct {
		name string
		pods map[string]*corev1.Pod
	}{
		{name: "the cache has no reserved pod", pods: map[string]*corev1.Pod{}},
		{name: "the cache has an earlier pod of the same name", pods: map[string]*corev1.Pod{"ns/pod": recreated}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.pods.pods = tc.pods
			claim := newClaim(uidA, "swap", 100*mi)
			r := e.m.Prepare(testContext(t), []*resourceapi.ResourceClaim{claim})[claim.UID]
			if r.Err == nil || !strings.Contains(r.Err.Error(), "ns/swap") || !strings.Contains(r.Err.Error(), "reserved for (pod)") {
				t.Fatalf("error = %v, want one naming the claim and its pod", r.Err)
			}
			assertNothingLeft(t, e)
		})
	}
}

// A claim reserved for a PodGroup (DRAWorkloadResourceClaims) would reach
// every pod of the group: it is refused, not granted without a pod.
func TestPrepareRefusesAPodGroupReservation(t *testing.T) {
	e := newEnv(t)
	claim := newClaim(uidA, "swap", 100*mi)
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{
		{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "group", UID: otherPodID},
	}
	r := e.m.Prepare(testContext(t), []*resourceapi.ResourceClaim{claim})[claim.UID]
	want := `the claim is reserved for podgroups.scheduling.k8s.io "group", not for a pod: dra.swap grants a claim's swap to one pod; per-group swap is not supported`
	if r.Err == nil || !strings.Contains(r.Err.Error(), want) || !strings.Contains(r.Err.Error(), "ns/swap") {
		t.Fatalf("error = %v, want one naming the claim and saying %q", r.Err, want)
	}
	assertNothingLeft(t, e)
}

// Critical pods never swap, whichever position they have among the pods
// that use a claim.
func TestPrepareRefusesACriticalPodAnywhereInReservedFor(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	e.pods.pods["ns/pod"] = pod(map[string][]string{"a": {"swap"}}, "swap")
	critical := pod(map[string][]string{"a": {"swap"}}, "swap")
	critical.Name, critical.UID, critical.Spec.PriorityClassName = "critical", otherPodID, "system-node-critical"
	e.pods.pods["ns/critical"] = critical
	claim := newClaim(uidA, "swap", 100*mi)
	claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "critical", UID: otherPodID})
	r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
	if r.Err == nil || !strings.Contains(r.Err.Error(), "pod ns/critical has priority class system-node-critical") {
		t.Fatalf("error = %v", r.Err)
	}
	assertNothingLeft(t, e)
}

// The pod's budget is set only when its containers could together use
// more than its claims were charged.
func TestPreparePodBudget(t *testing.T) {
	tests := []struct {
		name       string
		containers map[string][]string
		wantBudget string // "" for none
	}{
		{name: "a claim per container", containers: map[string][]string{"a": {"x"}, "b": {"y"}}},
		{name: "two claims in one container", containers: map[string][]string{"a": {"x", "y"}}},
		{name: "a claim shared by two containers", containers: map[string][]string{"a": {"x"}, "b": {"x"}, "c": {"y"}}, wantBudget: "314572800"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := testContext(t)
			e.pods.pods["ns/pod"] = pod(tc.containers, "x", "y")
			x, y := newClaim(uidA, "x", 100*mi), newClaim(uidB, "y", 200*mi)
			for uid, r := range e.m.Prepare(ctx, []*resourceapi.ResourceClaim{x, y}) {
				if r.Err != nil {
					t.Fatalf("%s: %v", uid, r.Err)
				}
			}
			for _, uid := range []string{uidA, uidB} {
				args := deviceArgs(device(t, e.spec(uid), uid, 0))
				has := strings.Contains(args, "--pod-swap-limit=")
				if tc.wantBudget == "" && has || tc.wantBudget != "" && !strings.Contains(args, "--pod-swap-limit="+tc.wantBudget) {
					t.Errorf("claim %s: hook args %s, want pod budget %q", uid, args, tc.wantBudget)
				}
			}
		})
	}
}

type recordedEvent struct{ pod, eventType, reason, message string }

type fakeEvents struct{ events []recordedEvent }

func (f *fakeEvents) PodEvent(pod *corev1.Pod, eventType, reason, message string) {
	f.events = append(f.events, recordedEvent{pod: pod.Namespace + "/" + pod.Name, eventType: eventType, reason: reason, message: message})
}

// An admin-access allocation is not charged by the scheduler: it is
// prepared for observation, grants no swap, and the pod is told.
func TestPrepareAdminAccess(t *testing.T) {
	e := newEnv(t)
	events := &fakeEvents{}
	e.m.opts.Events = events
	ctx := testContext(t)
	e.pods.pods["ns/pod"] = pod(map[string][]string{"a": {"swap"}}, "swap")
	claim := newClaim(uidA, "swap", 0)
	r0 := &claim.Status.Allocation.Devices.Results[0]
	r0.AdminAccess, r0.ConsumedCapacity = ptr.To(true), nil
	r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	d := device(t, e.spec(uidA), uidA, 0)
	if deviceEnv(d) != "DRA_SWAP_ADMIN_ACCESS=true" || len(d.ContainerEdits.Hooks) != 0 {
		t.Errorf("admin device = %+v, want only the marker variable", d.ContainerEdits)
	}
	if c := e.checkpointed()[claim.UID]; c.LimitBytes != 0 {
		t.Errorf("checkpoint holds %d bytes for an admin-access claim", c.LimitBytes)
	}
	if len(events.events) != 1 || events.events[0].reason != ReasonSwapNotGranted || events.events[0].pod != "ns/pod" ||
		!strings.Contains(events.events[0].message, "admin access") {
		t.Errorf("events = %+v", events.events)
	}
}

// When the node's swap shrinks below what its prepared claims hold, a
// claim allocated against the earlier offer is refused with both numbers;
// claims already prepared stay prepared.
func TestPrepareRefusesWhenSwapShrank(t *testing.T) {
	e := newEnv(t)
	e.offer = 200 * mi
	ctx := testContext(t)
	e.pods.pods["ns/pod"] = pod(map[string][]string{"a": {"x"}, "b": {"y"}}, "x", "y")
	x := newClaim(uidA, "x", 150*mi)
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{x})[x.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	y := newClaim(uidB, "y", 100*mi)
	r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{y})[y.UID]
	want := "the node offers 200Mi of swap and the claims prepared on it hold 150Mi, so the 100Mi allocated to this claim does not fit now"
	if r.Err == nil || !strings.Contains(r.Err.Error(), want) {
		t.Fatalf("error = %v, want %q", r.Err, want)
	}
	e.offer = 100 * mi
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{x})[x.UID]; r.Err != nil {
		t.Errorf("re-preparing a prepared claim after swap shrank: %v", r.Err)
	}
	if _, ok := e.checkpointed()[y.UID]; ok || len(e.specFiles()) != 1 {
		t.Errorf("the refused claim left state: checkpoint %v, specs %v", e.checkpointed(), e.specFiles())
	}
	e.offer = -1 // not known yet: no check
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{y})[y.UID]; r.Err != nil {
		t.Errorf("prepare before the offer is known: %v", r.Err)
	}
}

// The refusal names what is true. A force-deleted pod's claim is
// deallocated at once, so the scheduler allocates its swap again, but it
// stays prepared (held) until the kubelet unprepares it: with the offer
// unchanged, the message says so and that the kubelet retries, not that
// swap shrank. Held claims above the offer can only mean it shrank.
func TestPrepareRefusalNamesTheCause(t *testing.T) {
	for _, tc := range []struct {
		name      string
		offerThen int64 // when the new claim is prepared
		newBytes  int64
		want      []string
		notWant   string
	}{
		{name: "force-deleted pod's claim still held, offer unchanged", offerThen: 200 * mi, newBytes: 100 * mi,
			want: []string{"offers 200Mi of swap and the claims prepared on it hold 150Mi, so the 100Mi allocated to this claim does not fit now",
				"holds its swap until the kubelet unprepares it, also after its pod was force-deleted", "the kubelet retries"},
			notWant: "delete the pod"},
		{name: "offer shrank below the held claims", offerThen: 100 * mi, newBytes: 10 * mi,
			want: []string{"offers 100Mi of swap and the claims prepared on it hold 150Mi", "the node's offer shrank after they were prepared",
				"delete the pod to have it scheduled again"},
			notWant: "force-deleted"},
		{name: "the node stopped offering swap (the kubelet turned to LimitedSwap)", offerThen: 0, newBytes: 10 * mi,
			want: []string{"offers 0 of swap and the claims prepared on it hold 150Mi", "the node offers no swap now",
				"its swap device's taints and health say why", "the kubelet's swap behavior", "the kubelet retries"},
			notWant: "force-deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.offer = 200 * mi
			ctx := testContext(t)
			e.pods.pods["ns/pod"] = pod(map[string][]string{"a": {"x"}}, "x")
			x := newClaim(uidA, "x", 150*mi)
			if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{x})[x.UID]; r.Err != nil {
				t.Fatal(r.Err)
			}
			// The pod is force-deleted; its claim is not unprepared yet.
			delete(e.pods.pods, "ns/pod")
			next := pod(map[string][]string{"a": {"y"}}, "y")
			next.Name, next.UID = "next", "22222222-0000-4000-8000-000000000002"
			e.pods.pods["ns/next"] = next
			y := newClaim(uidB, "y", tc.newBytes)
			y.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: next.Name, UID: next.UID}}
			e.offer = tc.offerThen
			r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{y})[y.UID]
			if r.Err == nil {
				t.Fatal("prepared a claim that does not fit")
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Err.Error(), w) {
					t.Errorf("error %q lacks %q", r.Err, w)
				}
			}
			if strings.Contains(r.Err.Error(), tc.notWant) {
				t.Errorf("error %q says %q", r.Err, tc.notWant)
			}
		})
	}
}

// A prepared claim is answered as recorded, without rewriting its spec:
// the kubelet may have handed the recorded devices to containers.
func TestPrepareAnswersAsRecorded(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	e.pods.pods["ns/pod"] = pod(map[string][]string{"a": {"swap"}}, "swap")
	claim := newClaim(uidA, "swap", 100*mi)
	if err := e.writer.Write(cdi.ClaimEdits{ClaimUID: uidA, Devices: []cdi.DeviceEdits{{ResultIndex: 0, Settings: swapsettings.Settings{LimitBytes: 100 * mi}, EnvLimitBytes: 100 * mi}}}); err != nil {
		t.Fatal(err)
	}
	id := cdi.DeviceID(uidA, 0)
	const recordedPool = "recorded-pool"
	if err := e.store.Update(func(cp *checkpoint.Checkpoint) error {
		cp.Claims[claim.UID] = checkpoint.ClaimInfo{Namespace: "ns", Name: "swap", LimitBytes: 100 * mi, EnvLimitBytes: 100 * mi,
			Devices: []checkpoint.PreparedDevice{{Requests: []string{"swap"}, PoolName: recordedPool, DeviceName: "swap", CDIDeviceIDs: []string{id}}}}
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
	if r.Err != nil || len(r.Devices) != 1 || r.Devices[0].PoolName != recordedPool || !slices.Equal(r.Devices[0].CDIDeviceIDs, []string{id}) {
		t.Fatalf("prepare = %+v, want the recorded device of pool %s", r, recordedPool)
	}
}

// A container may ask for swap as an extended resource backed by DRA
// (resources.limits: deviceclass.resource.kubernetes.io/dra.swap: 1): the
// scheduler allocates it in a claim of its own, which the kubelet prepares
// in the same call as the pod's other claims and maps to the container
// through status.extendedResourceClaimStatus. It counts in the container's
// total and in the pod's budget like any claim.
func TestPrepareExtendedResourceClaim(t *testing.T) {
	const (
		resourceName = "deviceclass.resource.kubernetes.io/dra.swap"
		extName      = "pod-extended-resources-x7k2p"
		request      = "container-0-request-0"
	)
	tests := []struct {
		name string
		// containers' references to the claim x (100Mi); container a
		// also asks for the extended resource (200Mi).
		containers map[string][]string
		wantBudget string // "" for none
		// wantTotals: per claim, the containers that get its device and
		// each one's total.
		wantTotals map[string]map[string]int64
	}{
		{
			name:       "one container with the extended resource, one with a claim",
			containers: map[string][]string{"a": nil, "b": {"x"}},
			wantTotals: map[string]map[string]int64{extName: {"a": 200 * mi}, "x": {"b": 100 * mi}},
		},
		{
			name:       "the claim shared by two containers",
			containers: map[string][]string{"a": nil, "b": {"x"}, "c": {"x"}},
			wantBudget: "314572800",
			wantTotals: map[string]map[string]int64{extName: {"a": 200 * mi}, "x": {"b": 100 * mi, "c": 100 * mi}},
		},
		{
			name:       "the extended resource's container uses the claim too",
			containers: map[string][]string{"a": {"x"}, "b": {"x"}},
			wantBudget: "314572800",
			wantTotals: map[string]map[string]int64{extName: {"a": 300 * mi}, "x": {"a": 300 * mi, "b": 100 * mi}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			got := map[string]map[string]int64{}
			e.prepared = func(r ClaimReport) {
				for _, res := range r.Results {
					got[r.Claim.Name] = res.Containers
				}
			}
			p := pod(tc.containers, "x")
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{resourceName: resource.MustParse("1")}
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{resourceName: resource.MustParse("1")}
			p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{
				ResourceClaimName: extName,
				RequestMappings:   []corev1.ContainerExtendedResourceRequest{{ContainerName: "a", ResourceName: resourceName, RequestName: request}},
			}
			e.pods.pods["ns/pod"] = p
			x := newClaim(uidA, "x", 100*mi)
			ext := newClaim(uidB, extName, 200*mi, func(c *resourceapi.ResourceClaim) {
				c.Spec.Devices.Requests[0].Name = request
				c.Status.Allocation.Devices.Results[0].Request = request
			})
			for uid, r := range e.m.Prepare(testContext(t), []*resourceapi.ResourceClaim{x, ext}) {
				if r.Err != nil {
					t.Fatalf("%s: %v", uid, r.Err)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantTotals) {
				t.Errorf("containers' totals per claim = %v, want %v", got, tc.wantTotals)
			}
			for _, uid := range []string{uidA, uidB} {
				args := deviceArgs(device(t, e.spec(uid), uid, 0))
				has := strings.Contains(args, "--pod-swap-limit=")
				if tc.wantBudget == "" && has || tc.wantBudget != "" && !strings.Contains(args, "--pod-swap-limit="+tc.wantBudget) {
					t.Errorf("claim %s: hook args %s, want pod budget %q", uid, args, tc.wantBudget)
				}
			}
		})
	}
}
