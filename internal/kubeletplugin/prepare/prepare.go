// Package prepare turns allocated dra.swap claims into per-container swap
// limits: it reads each claim's consumed capacity and SwapConfig, writes the
// claim's CDI spec and records the claim in the checkpoint, and undoes both
// on unprepare. Both directions are idempotent, and a failed prepare leaves
// neither a spec nor a checkpoint entry behind.
//
// A Manager keeps no state between calls: the checkpoint on disk is the
// only record, read and changed under a lock shared by every plugin
// instance on the node, so that the old and the new plugin pod of a rolling
// update can both serve the kubelet.
package prepare

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
)

// SpecWriter writes and removes per-claim CDI specs (internal/kubeletplugin/cdi.Writer).
type SpecWriter interface {
	Write(edits cdi.ClaimEdits) error
	Remove(claimUID string) error
	// Has reports whether the claim has a spec.
	Has(claimUID string) (bool, error)
	// Claims lists the claims that have a spec.
	Claims() ([]string, error)
	// Read reads a claim's spec back (cdi.Writer.Read).
	Read(claimUID string) (cdi.ClaimEdits, error)
}

// CheckpointStore is the checkpoint that the plugin instances on a node
// share (internal/kubeletplugin/checkpoint.Store).
type CheckpointStore interface {
	// Update reads the checkpoint under an exclusive lock, calls change
	// and saves the result unless change fails; when the save fails, undo
	// runs before the lock is released.
	Update(change func(cp *checkpoint.Checkpoint) error, undo func() error) error
	// Read returns the checkpoint as it is on disk.
	Read() (*checkpoint.Checkpoint, error)
}

// PodGetter looks up the pods that use a claim.
type PodGetter interface {
	// GetPod returns the pod of that name and UID. One it does not see
	// yet, or sees only under another UID, it waits for a while; then it
	// returns a NotFound error. It is called concurrently.
	GetPod(ctx context.Context, namespace, name string, uid types.UID) (*corev1.Pod, error)
}

// EventSink tells a pod what prepare did that it should know.
type EventSink interface {
	PodEvent(pod *corev1.Pod, eventType, reason, message string)
}

// ReasonSwapNotGranted is the event reason for a claim that was prepared
// but grants no swap (admin access).
const ReasonSwapNotGranted = "SwapNotGranted"

// Options configure a Manager.
type Options struct {
	// DriverName is the driver whose allocation results are handled.
	DriverName string
	// PoolName is this node's pool (the node name).
	PoolName string
	// Node is what prepare reads of the node; required.
	Node Node
	// AllowCriticalPods lets system-node-critical and
	// system-cluster-critical pods use swap; the kubelet never swaps
	// them, and neither does this driver unless an admin says so.
	AllowCriticalPods bool
	// Events, if set, receives events for the pods that use a claim.
	Events EventSink
	// Observer, if set, is told what prepare and unprepare did.
	Observer Observer
}

// Node is what prepare reads of the node while it decides.
type Node interface {
	// Support is what the node can apply of a SwapConfig: its cgroup
	// version (1 or 2) and why it cannot offload or keep pages
	// compressed only, if it cannot.
	Support() v1alpha1.NodeSupport
	// Offer is the swap the node offers now, negative when not known
	// yet. A claim that would take the prepared claims above it is
	// refused: it was allocated against an earlier, larger offer.
	Offer() int64
}

// Observer is told what prepare and unprepare did.
type Observer interface {
	// Recorded is told what the checkpoint holds after each prepare or
	// unprepare (the claims prepared on the node and the swap they
	// grant), from the checkpoint that call read, for the metrics.
	Recorded(claims int, limitBytes int64)
	// Prepared is told what each prepared claim grants (after the
	// checkpoint was saved), for the claim's status.
	Prepared(ClaimReport)
}

// ClaimReport is what prepare granted for one claim.
type ClaimReport struct {
	Claim *resourceapi.ResourceClaim
	// Pod is the pod the claim is granted to.
	Pod types.NamespacedName
	// PodLimitBytes is the pod's swap budget, when it has one.
	PodLimitBytes *int64
	Results       []ResultReport
}

// ResultReport is what one allocation result grants.
type ResultReport struct {
	Result resourceapi.DeviceRequestAllocationResult
	// LimitBytes is what the result grants (0 with admin access).
	LimitBytes  int64
	AdminAccess bool
	// Config is the SwapConfig that took effect.
	Config *v1alpha1.SwapConfig
	// Containers are the granted pod's containers that get the result's
	// device, each with its swap limit (the sum of all its claims).
	Containers map[string]int64
}

// Manager prepares and unprepares claims. It is safe for concurrent use,
// also with other Managers (in this process or another) on the same
// checkpoint and CDI directory.
type Manager struct {
	opts    Options
	specs   SpecWriter
	store   CheckpointStore
	pods    PodGetter
	decoder *v1alpha1.Decoder
}

// NewManager returns a Manager.
func NewManager(opts Options, specs SpecWriter, store CheckpointStore, pods PodGetter) *Manager {
	return &Manager{opts: opts, specs: specs, store: store, pods: pods, decoder: v1alpha1.NewDecoder()}
}

// Prepared reports the number of claims prepared on the node and the swap
// they grant, as the checkpoint records them.
func (m *Manager) Prepared() (claims int, swapBytes int64, err error) {
	cp, err := m.store.Read()
	if err != nil {
		return 0, 0, err
	}
	claims, swapBytes = totals(cp)
	return claims, swapBytes, nil
}

func totals(cp *checkpoint.Checkpoint) (claims int, swapBytes int64) {
	for _, c := range cp.Claims {
		swapBytes += c.LimitBytes
	}
	return len(cp.Claims), swapBytes
}

// update is store.Update, and then tells Options.Observer what the
// checkpoint holds when the change was saved or there was nothing to save.
func (m *Manager) update(change func(cp *checkpoint.Checkpoint) error, undo func() error) error {
	var seen *checkpoint.Checkpoint
	err := m.store.Update(func(cp *checkpoint.Checkpoint) error {
		seen = cp
		return change(cp)
	}, undo)
	if m.opts.Observer != nil && seen != nil && (err == nil || errors.Is(err, errUnchanged)) {
		m.opts.Observer.Recorded(totals(seen))
	}
	return err
}

// errUnchanged tells the checkpoint store that there is nothing to save.
var errUnchanged = errors.New("checkpoint unchanged")

// claimPlan is what prepare decided for one claim before any I/O.
type claimPlan struct {
	claim *resourceapi.ResourceClaim
	// results are the claim's allocation results of this driver.
	results []resultPlan
	// limitBytes is the swap the claim grants: what the scheduler charged.
	limitBytes int64
	// pods are the pods in the claim's reservedFor that exist, in that
	// order: the first is the one the claim is granted to.
	pods []*corev1.Pod
}

// Prepare prepares claims, which the kubelet passes for one pod at a
// time. Every claim gets an entry in the result; a per-claim error names
// the claim and the cause.
//
// Claims are planned and their pods looked up first, without the
// checkpoint lock; then, under the lock, the specs are written and the
// checkpoint saved once for all of them. If that save fails, the specs of
// the claims that were not prepared before are removed before the lock is
// released, and those claims fail.
func (m *Manager) Prepare(ctx context.Context, claims []*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	logger := klog.FromContext(ctx)
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	fail := func(claim *resourceapi.ResourceClaim, err error) {
		logger.Error(err, "Prepare failed", "claim", klog.KObj(claim), "uid", claim.UID)
		results[claim.UID] = kubeletplugin.PrepareResult{Err: claimError(claim, err)}
	}

	var plans []*claimPlan
	// The kubelet passes the claims of one pod, so of one namespace.
	batch := map[types.NamespacedName]*claimPlan{}
	for _, claim := range claims {
		plan, err := m.plan(claim)
		if err != nil {
			results[claim.UID] = kubeletplugin.PrepareResult{Err: claimError(claim, err)}
			continue
		}
		plans = append(plans, plan)
		batch[types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}] = plan
	}
	// Pod lookups go to the API server: not while holding the lock.
	ready := plans[:0]
	for _, plan := range plans {
		if err := m.lookUpPods(ctx, plan); err != nil {
			fail(plan.claim, err)
			continue
		}
		ready = append(ready, plan)
	}
	if len(ready) == 0 {
		return results
	}

	prepared := map[types.UID][]kubeletplugin.Device{}
	reports := map[types.UID]ClaimReport{}
	var added []types.UID // claims whose spec is new
	err := m.update(func(cp *checkpoint.Checkpoint) error {
		for _, plan := range ready {
			devices, isNew, report, err := m.apply(ctx, cp, plan, batch)
			if err != nil {
				fail(plan.claim, err)
				continue
			}
			prepared[plan.claim.UID] = devices
			reports[plan.claim.UID] = report
			if isNew {
				added = append(added, plan.claim.UID)
			}
		}
		if len(prepared) == 0 {
			return errUnchanged
		}
		return nil
	}, func() error {
		var errs []error
		for _, uid := range added {
			if err := m.specs.Remove(string(uid)); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("roll back: %w", err)
		}
		return nil
	})
	for _, plan := range ready {
		claim := plan.claim
		if _, failed := results[claim.UID]; failed {
			continue
		}
		if err != nil && !errors.Is(err, errUnchanged) {
			fail(claim, err)
			continue
		}
		logger.V(2).Info("Prepared swap claim", "claim", klog.KObj(claim), "uid", claim.UID, "swapBytes", plan.limitBytes)
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: prepared[claim.UID]}
		m.tellAdminAccess(plan)
		if m.opts.Observer != nil {
			m.opts.Observer.Prepared(reports[claim.UID])
		}
	}
	return results
}

// tellAdminAccess tells the pods of a claim with admin-access results that
// those grant no swap.
func (m *Manager) tellAdminAccess(plan *claimPlan) {
	if m.opts.Events == nil {
		return
	}
	for _, r := range plan.results {
		if !r.admin {
			continue
		}
		for _, pod := range plan.pods {
			m.opts.Events.PodEvent(pod, corev1.EventTypeNormal, ReasonSwapNotGranted, fmt.Sprintf(
				"Request %q of claim %s was allocated with admin access, which the scheduler does not charge, so it grants no swap; "+
					"the claim was prepared for observation only", r.result.Request, plan.claim.Name))
		}
	}
}

func claimError(claim *resourceapi.ResourceClaim, err error) error {
	return fmt.Errorf("prepare swap claim %s/%s (%s): %w", claim.Namespace, claim.Name, claim.UID, err)
}

// apply writes the claim's spec and records it in cp; isNew reports that
// cp did not hold the claim before. On failure cp is unchanged. A claim
// that cp holds and whose spec exists is answered as recorded: the kubelet
// may already have handed its device IDs to containers.
func (m *Manager) apply(ctx context.Context, cp *checkpoint.Checkpoint, plan *claimPlan, batch map[types.NamespacedName]*claimPlan) (devices []kubeletplugin.Device, isNew bool, report ClaimReport, err error) {
	claim := plan.claim
	edits, report := m.edits(ctx, cp, plan, batch)
	if info, ok := cp.Claims[claim.UID]; ok {
		has, err := m.specs.Has(string(claim.UID))
		if err != nil {
			return nil, false, report, err
		}
		if has && info.Confirmed() {
			return recordedDevices(info), false, report, nil
		}
		if has {
			// Kept without the API server's confirmation (see
			// ReconcileSpecs): the claim in hand confirms it when its
			// spec is what prepare wrote for it, and it is answered as
			// recorded; else its spec is written anew. Either way it
			// already counts against the offer.
			if written, err := m.specs.Read(string(claim.UID)); err == nil {
				if entry, err := m.rebuiltEntry(plan, written, edits.PodUID); err == nil {
					cp.Claims[claim.UID] = entry
					return recordedDevices(entry), false, report, nil
				}
			}
		}
	} else if err := m.checkOffer(cp, plan); err != nil {
		return nil, false, report, err
	}
	_, wasPrepared := cp.Claims[claim.UID]
	if err := m.specs.Write(edits); err != nil {
		return nil, false, report, err
	}
	var envBytes int64
	if len(edits.Devices) > 0 {
		envBytes = edits.Devices[0].EnvLimitBytes
	}
	entry := m.entry(plan, envBytes)
	cp.Claims[claim.UID] = entry
	return recordedDevices(entry), !wasPrepared, report, nil
}

// entry is the checkpoint entry of a prepared claim: a device per result,
// as returned to the kubelet, and the swap the claim grants; envBytes is
// its first device's DRA_SWAP_LIMIT_BYTES.
func (m *Manager) entry(plan *claimPlan, envBytes int64) checkpoint.ClaimInfo {
	claim := plan.claim
	saved := make([]checkpoint.PreparedDevice, 0, len(plan.results))
	for _, r := range plan.results {
		saved = append(saved, checkpoint.PreparedDevice{Requests: []string{r.result.Request}, PoolName: r.result.Pool, DeviceName: r.result.Device,
			ShareID: r.result.ShareID, CDIDeviceIDs: []string{cdi.DeviceID(string(claim.UID), r.index)}})
	}
	return checkpoint.ClaimInfo{Namespace: claim.Namespace, Name: claim.Name, LimitBytes: plan.limitBytes, EnvLimitBytes: envBytes, Devices: saved}
}

func recordedDevices(info checkpoint.ClaimInfo) []kubeletplugin.Device {
	devices := make([]kubeletplugin.Device, 0, len(info.Devices))
	for _, d := range info.Devices {
		devices = append(devices, kubeletplugin.Device{Requests: d.Requests, PoolName: d.PoolName, DeviceName: d.DeviceName,
			ShareID: d.ShareID, CDIDeviceIDs: d.CDIDeviceIDs})
	}
	return devices
}

// checkOffer refuses a new claim when the node's offer does not cover the
// claims prepared on it and this one: swap was turned off or shrank since
// the scheduler allocated the claim, the node stopped offering swap (the
// kubelet's swap behavior changed), or claims the scheduler no longer
// counts (a force-deleted pod's) are still held until they are unprepared.
func (m *Manager) checkOffer(cp *checkpoint.Checkpoint, plan *claimPlan) error {
	if plan.limitBytes == 0 {
		return nil
	}
	offer := m.opts.Node.Offer()
	if offer < 0 {
		return nil
	}
	_, prepared := totals(cp)
	if prepared+plan.limitBytes <= offer {
		return nil
	}
	// Held more than offered: the offer shrank after they were prepared.
	// Otherwise the scheduler counted swap as free that claims prepared
	// here still hold (a force-deleted pod's claims are deallocated at
	// once but held until the kubelet unprepares them), or the offer
	// shrank after this claim was allocated: which one, only the history
	// tells.
	cause := "the node's offer shrank after they were prepared (swap turned off or made smaller); delete the pod to have it scheduled again"
	switch {
	case offer == 0:
		cause = "the node offers no swap now (its swap device's taints and health say why: swap turned off, or the kubelet's swap behavior); " +
			"the kubelet retries, and the claim is granted once the node offers swap again, or delete the pod to have it scheduled elsewhere"
	case prepared <= offer:
		cause = "a prepared claim holds its swap until the kubelet unprepares it, also after its pod was force-deleted and the scheduler " +
			"counted that swap as free again, or the node's offer shrank after this claim was allocated; the kubelet retries, and the claim " +
			"is granted once enough held claims are unprepared"
	}
	return fmt.Errorf("the node offers %s of swap and the claims prepared on it hold %s, so the %s allocated to this claim does not fit now: %s",
		quantity(offer), quantity(prepared), quantity(plan.limitBytes), cause)
}

func quantity(b int64) string { return resource.NewQuantity(b, resource.BinarySI).String() }

// edits are the claim's CDI edits: one device per result, each with its
// own settings; the pod the claim is granted to and, when its
// containers share claims, the pod's budget.
func (m *Manager) edits(ctx context.Context, cp *checkpoint.Checkpoint, plan *claimPlan, batch map[types.NamespacedName]*claimPlan) (cdi.ClaimEdits, ClaimReport) {
	claim := plan.claim
	edits := cdi.ClaimEdits{ClaimUID: string(claim.UID)}
	report := ClaimReport{Claim: claim}
	var pt podTotals
	if pod := plan.grantedPod(); pod != nil {
		edits.PodUID = string(pod.UID)
		report.Pod = types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		byName := map[string]*claimPlan{}
		for key, p := range batch {
			if key.Namespace == claim.Namespace {
				byName[key.Name] = p
			}
		}
		var conflicts []string
		pt, conflicts = totalsFor(pod, sharesFrom(claim.Namespace, byName, cp))
		if len(conflicts) > 0 {
			klog.FromContext(ctx).Info("Claim reaches containers with different swap totals; their DRA_SWAP_LIMIT_BYTES shows the claim's own limit",
				"claim", klog.KObj(claim), "pod", klog.KObj(pod), "shares", conflicts)
		}
		edits.PodLimitBytes = pt.budget
		report.PodLimitBytes = pt.budget
	}
	for _, r := range plan.results {
		d := cdi.DeviceEdits{ResultIndex: r.index, AdminAccess: r.admin, Settings: r.settings, EnvLimitBytes: r.settings.LimitBytes}
		key := share{claim: claim.Name, index: r.index}.key()
		if env, ok := pt.env[key]; ok {
			d.EnvLimitBytes = env
		}
		report.Results = append(report.Results, ResultReport{Result: r.result, LimitBytes: r.settings.LimitBytes, AdminAccess: r.admin, Config: r.config, Containers: pt.containers[key]})
		edits.Devices = append(edits.Devices, d)
	}
	return edits, report
}

// Unprepare removes the claims' specs and checkpoint entries. A claim that
// is not prepared is not an error: its spec is removed all the same, so
// that nothing is left even when the checkpoint was lost. Another plugin
// instance may have prepared the claim: the checkpoint on disk tells.
func (m *Manager) Unprepare(ctx context.Context, claims []kubeletplugin.NamespacedObject) map[types.UID]error {
	logger := klog.FromContext(ctx)
	results := make(map[types.UID]error, len(claims))
	fail := func(c kubeletplugin.NamespacedObject, err error) {
		results[c.UID] = fmt.Errorf("unprepare swap claim %s (%s): %w", c.NamespacedName, c.UID, err)
	}
	var removed []kubeletplugin.NamespacedObject // entries removed from the checkpoint
	err := m.update(func(cp *checkpoint.Checkpoint) error {
		for _, c := range claims {
			if err := m.specs.Remove(string(c.UID)); err != nil {
				fail(c, err)
				continue
			}
			if _, ok := cp.Claims[c.UID]; !ok {
				results[c.UID] = nil
				continue
			}
			delete(cp.Claims, c.UID)
			removed = append(removed, c)
		}
		if len(removed) == 0 {
			return errUnchanged
		}
		return nil
	}, nil)
	if err != nil && !errors.Is(err, errUnchanged) {
		// The claims whose entries were not removed, or all of them when
		// the checkpoint could not be read.
		for _, c := range claims {
			if _, done := results[c.UID]; !done {
				fail(c, err)
			}
		}
		return results
	}
	for _, c := range removed {
		logger.V(2).Info("Unprepared swap claim", "claim", c.NamespacedName, "uid", c.UID)
		results[c.UID] = nil
	}
	return results
}
