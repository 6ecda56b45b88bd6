package prepare

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// fakeCluster is the API server as ReconcileSpecs asks it: the node's pods
// and the claims by namespace/name.
type fakeCluster struct {
	pods   []*corev1.Pod
	claims map[string]*resourceapi.ResourceClaim
	// err, if set, is every claim read's answer.
	err   error
	reads int
}

func (f *fakeCluster) NodePods() ([]*corev1.Pod, error) { return f.pods, nil }

func (f *fakeCluster) GetClaim(_ context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	f.reads++
	if f.err != nil {
		return nil, f.err
	}
	if c, ok := f.claims[namespace+"/"+name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
}

// loseCheckpoint makes the checkpoint unusable, as corruption or a
// downgrade does, and opens it as the plugin does at start-up (which sets
// it aside).
func (e *env) loseCheckpoint(content string) {
	e.t.Helper()
	if err := os.WriteFile(e.store.Path(), []byte(content), 0o600); err != nil {
		e.t.Fatal(err)
	}
	opened, err := e.store.Open()
	if err != nil || opened.Unusable == nil {
		e.t.Fatalf("Open = %+v, %v; want the file set aside", opened, err)
	}
	e.restart()
}

// Checkpoints that Open sets aside: cut short, and one a newer release
// wrote with a field this one does not know (a downgrade).
var unusable = map[string]string{
	"corrupt":       `{"version":1,"bootID":"` + boot + `","claims":{"`,
	"unknown field": `{"version":1,"bootID":"` + boot + `","claims":{},"fromANewerRelease":true}`,
}

// TestReconcileRebuildsTheCheckpoint: after the checkpoint was set aside,
// the entry of a claim the API server confirms is rebuilt exactly as
// prepare saved it, so that a repeated prepare answers as before, the
// offer check counts it, and unprepare removes it. The spec is never
// removed on the way.
func TestReconcileRebuildsTheCheckpoint(t *testing.T) {
	for name, content := range unusable {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ctx := testContext(t)
			p := pod(map[string][]string{"a": {"swap", "knobs"}, "b": {"swap"}}, "swap", "knobs")
			e.pods.pods["ns/pod"] = p
			plain := newClaim(uidA, "swap", 100*mi, withResult("admin", 0), withResult("second", 50*mi))
			plain.Status.Allocation.Devices.Results[1].AdminAccess = ptr.To(true)
			plain.Status.Allocation.Devices.Results[1].ConsumedCapacity = nil
			knobs := newClaim(uidB, "knobs", 200*mi, withConfig(resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":5}`))
			claims := []*resourceapi.ResourceClaim{plain, knobs}
			first := e.m.Prepare(ctx, claims)
			for _, c := range claims {
				if first[c.UID].Err != nil {
					t.Fatal(first[c.UID].Err)
				}
			}
			before := e.checkpointed()
			specs := map[string][]byte{}
			for _, f := range e.specFiles() {
				specs[f], _ = os.ReadFile(filepath.Join(e.specDir, f))
			}

			e.loseCheckpoint(content)
			cluster := &fakeCluster{pods: []*corev1.Pod{p}, claims: map[string]*resourceapi.ResourceClaim{"ns/swap": plain, "ns/knobs": knobs}}
			res, err := e.m.ReconcileSpecs(ctx, cluster)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Rebuilt) != 2 || len(res.Removed) != 0 || len(res.Kept) != 0 || res.Unconfirmed != 0 {
				t.Errorf("reconciled %+v, want both claims rebuilt", res)
			}
			if after := e.checkpointed(); !reflect.DeepEqual(after, before) {
				t.Errorf("rebuilt checkpoint\n%+v\nwant what prepare saved\n%+v", after, before)
			}
			for f, data := range specs {
				if now, err := os.ReadFile(filepath.Join(e.specDir, f)); err != nil || string(now) != string(data) {
					t.Errorf("spec %s changed or removed: %v", f, err)
				}
			}
			if cluster.reads != 2 {
				t.Errorf("%d claim reads, want 2 (the specs name their pod)", cluster.reads)
			}

			// A repeated prepare (a kubelet that restarted recreating the
			// pod's sandbox) answers as the first did.
			again := e.m.Prepare(ctx, claims)
			for _, c := range claims {
				if again[c.UID].Err != nil || devicesString(again[c.UID].Devices) != devicesString(first[c.UID].Devices) {
					t.Errorf("prepare of %s after the rebuild = %+v, want %+v", c.Name, again[c.UID], first[c.UID])
				}
			}
			// The offer check counts them.
			e.offer = 400 * mi
			e.pods.pods["ns/next"] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "next", UID: otherPodID}}
			next := newClaim("00000000-0000-4000-8000-00000000000c", "next", 100*mi)
			next.Status.ReservedFor[0].Name, next.Status.ReservedFor[0].UID = "next", otherPodID
			if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{next})[next.UID]; r.Err == nil || !strings.Contains(r.Err.Error(), "hold 350Mi") {
				t.Errorf("prepare beyond the offer = %v, want a refusal counting the rebuilt claims", r.Err)
			}
			for _, c := range claims {
				if err := e.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{claimObj(c.UID, c.Name)})[c.UID]; err != nil {
					t.Fatal(err)
				}
			}
			assertNothingLeft(t, e)
		})
	}
}

// reconcileCase is a spec left without a confirmed checkpoint entry and
// what the API server says about it.
type reconcileCase struct {
	name string
	// setup writes the spec (prepared through the env) and returns the
	// cluster the pass asks.
	setup   func(t *testing.T, e *env) *fakeCluster
	removed string // what the removal's reason says
	kept    string // what the keeping's reason says
	// keptBytes is the unconfirmed entry's swap.
	keptBytes int64
}

// prepared prepares claim for the env's pod and loses the checkpoint.
func prepared(t *testing.T, e *env, claim *resourceapi.ResourceClaim) {
	t.Helper()
	if r := e.m.Prepare(testContext(t), []*resourceapi.ResourceClaim{claim})[claim.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	e.loseCheckpoint(unusable["corrupt"])
}

func TestReconcileRemovesOrKeeps(t *testing.T) {
	podWith := func(claims ...string) *corev1.Pod { return pod(map[string][]string{"a": claims}, claims...) }
	tests := []reconcileCase{
		{
			name: "its pod is not on the node",
			setup: func(t *testing.T, e *env) *fakeCluster {
				prepared(t, e, newClaim(uidA, "swap", 100*mi))
				return &fakeCluster{}
			},
			removed: "the pod it grants its swap to (UID " + podID + ") is not on this node",
		},
		{
			name: "its pod uses no claim of that UID",
			setup: func(t *testing.T, e *env) *fakeCluster {
				prepared(t, e, newClaim(uidA, "swap", 100*mi))
				// The pod's claim of that name is another one now.
				return &fakeCluster{pods: []*corev1.Pod{podWith("swap")}, claims: map[string]*resourceapi.ResourceClaim{"ns/swap": newClaim(uidB, "swap", 100*mi)}}
			},
			removed: "its pod ns/pod uses no claim with this UID",
		},
		{
			name: "the claim is no longer allocated",
			setup: func(t *testing.T, e *env) *fakeCluster {
				claim := newClaim(uidA, "swap", 100*mi)
				prepared(t, e, claim)
				claim = claim.DeepCopy()
				claim.Status.Allocation = nil
				return &fakeCluster{pods: []*corev1.Pod{podWith("swap")}, claims: map[string]*resourceapi.ResourceClaim{"ns/swap": claim}}
			},
			removed: "claim ns/swap is not allocated on this node",
		},
		{
			name: "no pod on the node uses an admin-access claim",
			setup: func(t *testing.T, e *env) *fakeCluster {
				claim := newClaim(uidA, "swap", 0)
				claim.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
				prepared(t, e, claim)
				return &fakeCluster{pods: []*corev1.Pod{podWith("other")}}
			},
			removed: "no pod on this node uses a claim with this UID",
		},
		{
			name: "written by a plugin killed before it saved the checkpoint, pod gone",
			setup: func(t *testing.T, e *env) *fakeCluster {
				if err := e.writer.Write(cdi.ClaimEdits{ClaimUID: uidA, PodUID: otherPodID, Devices: []cdi.DeviceEdits{{Settings: swapsettings.Settings{LimitBytes: mi}, EnvLimitBytes: mi}}}); err != nil {
					t.Fatal(err)
				}
				return &fakeCluster{pods: []*corev1.Pod{podWith("swap")}}
			},
			removed: "is not on this node",
		},
		{
			name: "the API server fails",
			setup: func(t *testing.T, e *env) *fakeCluster {
				prepared(t, e, newClaim(uidA, "swap", 100*mi, withResult("more", 20*mi)))
				return &fakeCluster{pods: []*corev1.Pod{podWith("swap")}, err: apierrors.NewServiceUnavailable("etcd is down")}
			},
			kept:      "the API server did not confirm which claim it is: etcd is down",
			keptBytes: 120 * mi,
		},
		{
			name: "the allocation is not what the spec grants",
			setup: func(t *testing.T, e *env) *fakeCluster {
				prepared(t, e, newClaim(uidA, "swap", 100*mi))
				return &fakeCluster{pods: []*corev1.Pod{podWith("swap")}, claims: map[string]*resourceapi.ResourceClaim{"ns/swap": newClaim(uidA, "swap", 200*mi)}}
			},
			// The larger of what the spec grants and the claim was charged.
			kept:      "is not what result 0 of its allocation grants",
			keptBytes: 200 * mi,
		},
		{
			name: "a spec today's hook cannot read, its claim found",
			setup: func(t *testing.T, e *env) *fakeCluster {
				claim := newClaim(uidA, "swap", 100*mi)
				prepared(t, e, claim)
				path := filepath.Join(e.specDir, cdiSpecFile(uidA))
				data, _ := os.ReadFile(path)
				if err := os.WriteFile(path, []byte(strings.Replace(string(data), `"--result-index=0"`, `"--result-index=0","--newer"`, 1)), 0o600); err != nil {
					t.Fatal(err)
				}
				return &fakeCluster{pods: []*corev1.Pod{podWith("swap")}, claims: map[string]*resourceapi.ResourceClaim{"ns/swap": claim}}
			},
			kept:      "unknown to this hook",
			keptBytes: 100 * mi,
		},
		{
			name: "more claims to read than a pass may",
			setup: func(t *testing.T, e *env) *fakeCluster {
				// No pod named: every pod's claims are searched.
				if err := e.writer.Write(cdi.ClaimEdits{ClaimUID: uidA, Devices: []cdi.DeviceEdits{{AdminAccess: true}}}); err != nil {
					t.Fatal(err)
				}
				c := &fakeCluster{claims: map[string]*resourceapi.ResourceClaim{}}
				for i := range MaxClaimReads + 1 {
					p := podWith(fmt.Sprintf("claim-%d", i))
					p.Name, p.UID = fmt.Sprintf("pod-%d", i), types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
					c.pods = append(c.pods, p)
					c.claims["ns/"+p.Spec.ResourceClaims[0].Name] = newClaim(string(p.UID), "x", mi)
				}
				return c
			},
			kept: fmt.Sprintf("within %d claim reads", MaxClaimReads),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := testContext(t)
			cluster := tc.setup(t, e)
			res, err := e.m.ReconcileSpecs(ctx, cluster)
			if err != nil {
				t.Fatal(err)
			}
			if cluster.reads > MaxClaimReads {
				t.Errorf("%d claim reads, more than %d", cluster.reads, MaxClaimReads)
			}
			if tc.removed != "" {
				if !strings.Contains(res.Removed[uidA], tc.removed) || len(res.Kept) != 0 || len(res.Rebuilt) != 0 {
					t.Fatalf("reconciled %+v, want the spec removed because %q", res, tc.removed)
				}
				assertNothingLeft(t, e)
				return
			}
			if !strings.Contains(res.Kept[uidA], tc.kept) || len(res.Removed) != 0 || len(res.Rebuilt) != 0 {
				t.Fatalf("reconciled %+v, want the spec kept because %q", res, tc.kept)
			}
			if res.Unconfirmed != 1 || res.UnconfirmedBytes != tc.keptBytes {
				t.Errorf("unconfirmed %d, %d bytes; want 1, %d", res.Unconfirmed, res.UnconfirmedBytes, tc.keptBytes)
			}
			if !slices.Contains(e.specFiles(), cdiSpecFile(uidA)) {
				t.Fatal("kept spec removed")
			}
			info, ok := e.checkpointed()[uidA]
			if !ok || info.Confirmed() || info.LimitBytes != tc.keptBytes {
				t.Errorf("checkpoint entry %+v (held %v), want an unconfirmed one of %d bytes", info, ok, tc.keptBytes)
			}
			if n, b, err := e.m.Prepared(); n != 1 || b != tc.keptBytes || err != nil {
				t.Errorf("Prepared() = %d, %d, %v; want the kept spec counted", n, b, err)
			}
			// Kept: again on the next pass, and unprepare removes it.
			if again, err := e.m.ReconcileSpecs(ctx, cluster); err != nil || len(again.Kept) != 1 {
				t.Errorf("second pass = %+v, %v; want the spec kept", again, err)
			}
			if err := e.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{claimObj(uidA, "swap")})[uidA]; err != nil {
				t.Fatal(err)
			}
			assertNothingLeft(t, e)
		})
	}
}

// A kept spec's claim is confirmed later: by a pass once the API server
// answers, or by the kubelet preparing the claim again (after its own
// restart). Either way the claim then answers with the devices of its
// first prepare, and the entry is what prepare saved.
func TestKeptSpecConfirmedLater(t *testing.T) {
	for _, by := range []string{"a later pass", "a repeated prepare"} {
		t.Run(by, func(t *testing.T) {
			e := newEnv(t)
			ctx := testContext(t)
			p := pod(map[string][]string{"a": {"swap"}}, "swap")
			e.pods.pods["ns/pod"] = p
			claim := newClaim(uidA, "swap", 100*mi)
			first := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
			if first.Err != nil {
				t.Fatal(first.Err)
			}
			before := e.checkpointed()
			e.loseCheckpoint(unusable["unknown field"])
			cluster := &fakeCluster{pods: []*corev1.Pod{p}, claims: map[string]*resourceapi.ResourceClaim{"ns/swap": claim}, err: errors.New("connection refused")}
			if res, err := e.m.ReconcileSpecs(ctx, cluster); err != nil || len(res.Kept) != 1 {
				t.Fatalf("first pass = %+v, %v; want the spec kept", res, err)
			}
			cluster.err = nil
			if by == "a later pass" {
				if res, err := e.m.ReconcileSpecs(ctx, cluster); err != nil || len(res.Rebuilt) != 1 || res.Unconfirmed != 0 {
					t.Fatalf("second pass = %+v, %v; want the claim rebuilt", res, err)
				}
			} else {
				again := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
				if again.Err != nil || devicesString(again.Devices) != devicesString(first.Devices) {
					t.Fatalf("prepare of the kept claim = %+v, want %+v", again, first)
				}
			}
			if after := e.checkpointed(); !reflect.DeepEqual(after, before) {
				t.Errorf("checkpoint\n%+v\nwant what prepare saved\n%+v", after, before)
			}
		})
	}
}

// A kept spec's claim whose spec is not what prepare writes for it (here
// the pod's budget changed) is written anew by a prepare, as for a claim
// whose spec is gone: no offer check, since it already counts.
func TestKeptSpecRewrittenByPrepare(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	claim := newClaim(uidA, "swap", 100*mi)
	if err := e.writer.Write(cdi.ClaimEdits{ClaimUID: uidA, PodUID: otherPodID, Devices: []cdi.DeviceEdits{{Settings: swapsettings.Settings{LimitBytes: 100 * mi}, EnvLimitBytes: 100 * mi}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Update(func(cp *checkpoint.Checkpoint) error {
		cp.Claims[uidA] = checkpoint.ClaimInfo{LimitBytes: 100 * mi}
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	e.offer = 100 * mi
	r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{claim})[claim.UID]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := hookArgs(e.spec(uidA)); !strings.Contains(got, "--pod-uid="+podID) {
		t.Errorf("spec's hook %s, want it written for the pod the claim is reserved for", got)
	}
	if info := e.checkpointed()[uidA]; !info.Confirmed() || info.Name != "swap" {
		t.Errorf("entry %+v, want it confirmed", info)
	}
}

// An unconfirmed entry whose spec is gone (removed by hand, or unprepared
// by an older instance that knew nothing of it) is dropped; other drivers'
// specs and prepared claims are never touched.
func TestReconcileLeavesTheRestAlone(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	e.pods.pods["ns/pod"] = pod(map[string][]string{"a": {"swap"}}, "swap")
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidA, "swap", 300*mi)})[uidA]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := e.store.Update(func(cp *checkpoint.Checkpoint) error {
		cp.Claims[uidB] = checkpoint.ClaimInfo{LimitBytes: mi}
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(e.specDir, "vendor.example-gpu_"+uidB+".json")
	if err := os.WriteFile(other, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cluster := &fakeCluster{}
	res, err := e.m.ReconcileSpecs(ctx, cluster)
	if err != nil || len(res.Rebuilt)+len(res.Removed)+len(res.Kept)+res.Unconfirmed != 0 {
		t.Errorf("reconciled %+v, %v; want nothing but the entry dropped", res, err)
	}
	if got := slices.Sorted(maps.Keys(e.checkpointed())); !slices.Equal(got, []types.UID{uidA}) {
		t.Errorf("checkpoint holds %v, want only the prepared claim", got)
	}
	want := []string{cdiSpecFile(uidA), filepath.Base(other)}
	slices.Sort(want)
	if got := e.specFiles(); !slices.Equal(got, want) {
		t.Errorf("specs %v, want %v", got, want)
	}
	if cluster.reads != 0 {
		t.Errorf("%d claim reads for nothing to resolve", cluster.reads)
	}
}
