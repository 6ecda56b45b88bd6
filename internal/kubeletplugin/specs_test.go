package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/prepare"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish/publishtest"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

const specsNode = "node-a"

// specsCluster is the API server as the reconciliation asks it: pods on
// the node and claims by namespace/name; down fails every claim read.
type specsCluster struct {
	pods   []*corev1.Pod
	claims map[string]*resourceapi.ResourceClaim
	down   bool
}

func (c *specsCluster) NodePods() ([]*corev1.Pod, error) { return c.pods, nil }

func (c *specsCluster) GetClaim(_ context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	if c.down {
		return nil, apierrors.NewServiceUnavailable("the API server is down")
	}
	if claim, ok := c.claims[namespace+"/"+name]; ok {
		return claim, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
}

// GetPod serves prepare's pod lookups from the same pods.
func (c *specsCluster) GetPod(_ context.Context, namespace, name string, uid types.UID) (*corev1.Pod, error) {
	for _, p := range c.pods {
		if p.Namespace == namespace && p.Name == name && p.UID == uid {
			return p, nil
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

type specsNodeInfo struct{}

func (specsNodeInfo) Support() v1alpha1.NodeSupport { return v1alpha1.NodeSupport{CgroupVersion: 2} }
func (specsNodeInfo) Offer() int64                  { return -1 }

// swapPod is a pod on the node whose container uses the claim of the same
// name (a pod and a claim per index).
func swapPod(i int) (*corev1.Pod, *resourceapi.ResourceClaim) {
	name := fmt.Sprintf("w%d", i)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "swap"}},
			Containers:     []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "swap"}}}}},
		},
		Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "swap", ResourceClaimName: ptr.To(name)}}},
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(fmt.Sprintf("11111111-0000-4000-8000-%012d", i))},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "swap", Driver: "dra.swap", Pool: specsNode, Device: "swap",
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"swap": *resource.NewQuantity(64<<20, resource.BinarySI)},
			}}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: p.UID}},
		},
	}
	return p, claim
}

// TestSpecReconcilerTellsTheNode: after an unusable checkpoint, the Node
// hears once what became of the specs (rebuilt, removed, kept with why),
// dra_swap_kept_cdi_specs counts what is kept, a later pass that keeps
// nothing new says nothing, and one that resolves the last kept spec says
// so.
func TestSpecReconcilerTellsTheNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	writer, err := cdi.NewWriter(filepath.Join(dir, "cdi"), "/opt/dra-swap/bin/dra-swap-hook", "/run/dra-swap/hook")
	if err != nil {
		t.Fatal(err)
	}
	store := checkpoint.NewStore(filepath.Join(dir, "checkpoint.json"), "boot")
	cluster := &specsCluster{claims: map[string]*resourceapi.ResourceClaim{}}
	// Claims 0 and 1 run; claim 2's pod is gone. The API server then
	// confirms claim 0 and fails for claim 1.
	var claims []*resourceapi.ResourceClaim
	for i := range 3 {
		p, c := swapPod(i)
		cluster.pods = append(cluster.pods, p)
		cluster.claims["ns/"+c.Name] = c
		claims = append(claims, c)
	}
	manager := prepare.NewManager(prepare.Options{DriverName: "dra.swap", PoolName: specsNode, Node: specsNodeInfo{}}, writer, store, cluster)
	for _, c := range claims {
		if r := manager.Prepare(ctx, []*resourceapi.ResourceClaim{c})[c.UID]; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	cluster.pods = cluster.pods[:2]
	if err := os.WriteFile(store.Path(), []byte(`{"version":1,"bootID":"boot","claims":{"`), 0o600); err != nil {
		t.Fatal(err)
	}
	opened, err := openCheckpoint(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	events := &publishtest.EventRecorder{}
	metrics := NewMetrics()
	r := &specReconciler{manager: manager, cluster: failingFor{cluster, "w1"}, events: events, metrics: metrics}
	r.startUp(ctx, opened, store.Path())

	if len(events.Events) != 1 {
		t.Fatalf("events %+v, want one", events.Events)
	}
	e := events.Events[0]
	t.Logf("%s %s: %s", e.EventType, e.Reason, e.Message)
	for _, want := range []string{"set aside as " + store.Path() + ".unusable", "Rebuilt 1 prepared claims", "removed 1 specs", "kept 1 CDI specs",
		"claim " + string(claims[1].UID) + " (the API server did not confirm which claim it is: "} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("event note %q lacks %q", e.Message, want)
		}
	}
	if e.EventType != corev1.EventTypeWarning || e.Reason != reasonCheckpointUnusable || e.Action != actionReconcileSpecs || len(e.Message) > eventmsg.NoteLimit {
		t.Errorf("event %+v, want a Warning %s within %d bytes", e, reasonCheckpointUnusable, eventmsg.NoteLimit)
	}
	if page := scrapeHandler(t, metrics); !strings.Contains(page, "\ndra_swap_kept_cdi_specs 1\n") {
		t.Errorf("metrics lack dra_swap_kept_cdi_specs 1:\n%s", page)
	}
	for i, want := range []bool{true, true, false} {
		if has, _ := writer.Has(string(claims[i].UID)); has != want {
			t.Errorf("claim %d's spec present %v, want %v", i, has, want)
		}
	}

	// Still kept: nothing new to say.
	r.tellKept(mustPass(t, ctx, r))
	if len(events.Events) != 1 {
		t.Errorf("events %+v after a pass that kept nothing new", events.Events[1:])
	}
	// The API server answers: the last kept spec is confirmed.
	r.cluster = cluster
	r.tellKept(mustPass(t, ctx, r))
	if n := len(events.Events); n != 2 || events.Events[1].Reason != reasonSpecsResolved || events.Events[1].EventType != corev1.EventTypeNormal {
		t.Errorf("events %+v, want a Normal %s last", events.Events, reasonSpecsResolved)
	}
	if page := scrapeHandler(t, metrics); !strings.Contains(page, "\ndra_swap_kept_cdi_specs 0\n") {
		t.Errorf("metrics lack dra_swap_kept_cdi_specs 0:\n%s", page)
	}
}

func mustPass(t *testing.T, ctx context.Context, r *specReconciler) prepare.Reconciled {
	t.Helper()
	res, err := r.pass(ctx, "interval")
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// failingFor fails the reads of one claim.
type failingFor struct {
	*specsCluster
	name string
}

func (f failingFor) GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	if name == f.name {
		return nil, errors.New("connection refused")
	}
	return f.specsCluster.GetClaim(ctx, namespace, name)
}

// TestKeptNoteIsBounded: however many specs are kept, and however long
// why, the event's note fits the API's limit and counts what it leaves
// out; a clean start-up that keeps specs says so as CDISpecsKept.
func TestKeptNoteIsBounded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	writer, err := cdi.NewWriter(filepath.Join(dir, "cdi"), "/opt/dra-swap/bin/dra-swap-hook", "/run/dra-swap/hook")
	if err != nil {
		t.Fatal(err)
	}
	store := checkpoint.NewStore(filepath.Join(dir, "checkpoint.json"), "boot")
	cluster := &specsCluster{down: true}
	for i := range 40 {
		p, c := swapPod(i)
		cluster.pods = append(cluster.pods, p)
		if err := writer.Write(cdi.ClaimEdits{ClaimUID: string(c.UID), PodUID: string(p.UID),
			Devices: []cdi.DeviceEdits{{Settings: swapsettings.Settings{LimitBytes: 1 << 20}, EnvLimitBytes: 1 << 20}}}); err != nil {
			t.Fatal(err)
		}
	}
	manager := prepare.NewManager(prepare.Options{DriverName: "dra.swap", PoolName: specsNode, Node: specsNodeInfo{}}, writer, store, cluster)
	events := &publishtest.EventRecorder{}
	r := &specReconciler{manager: manager, cluster: cluster, events: events, metrics: NewMetrics()}
	r.startUp(ctx, checkpoint.Opened{}, store.Path())
	if len(events.Events) != 1 || events.Events[0].Reason != reasonSpecsKept {
		t.Fatalf("events %+v, want one %s", events.Events, reasonSpecsKept)
	}
	note := events.Events[0].Message
	if len(note) > eventmsg.NoteLimit || !strings.Contains(note, "Kept 40 CDI specs") || !strings.Contains(note, "claim 11111111-0000-4000-8000-000000000000 (") ||
		!strings.Contains(note, " more.") {
		t.Errorf("note (%d bytes) %q, want 40 counted, the first named and the rest counted, within %d bytes", len(note), note, eventmsg.NoteLimit)
	}
}
