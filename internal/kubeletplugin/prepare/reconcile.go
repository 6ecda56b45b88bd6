package prepare

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
)

// A CDI spec without a confirmed checkpoint entry is one of two things: a
// spec written by a plugin killed before it saved the checkpoint, or one
// whose entry was lost with an unusable checkpoint (corrupt, or with a
// field this release does not know after a downgrade), which Open set
// aside. The kubelet holds the latter's claims as prepared and prepares a
// claim only when it creates a pod's sandbox, so a container of a running
// pod that restarts needs the spec: removing it makes the container fail with
// "unresolvable CDI devices". So a spec is removed only when the API
// server confirms that no container on this node can use it; the entry of
// a claim the API server confirms is rebuilt, exactly as prepare saved it;
// anything else is kept, with an unconfirmed entry (see
// checkpoint.ClaimInfo.Confirmed) that counts against the offer, until the
// kubelet unprepares it or a later pass confirms or removes it.

// Cluster is what ReconcileSpecs asks about the claims whose specs the
// checkpoint does not confirm.
type Cluster interface {
	// NodePods lists the pods bound to this node, from a cache that has
	// synced: a pod it does not list is not on the node.
	NodePods() ([]*corev1.Pod, error)
	// GetClaim reads a ResourceClaim from the API server.
	GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// MaxClaimReads bounds the claims one ReconcileSpecs pass reads from the
// API server. A spec names its pod, so its claim is found among that
// pod's claims (one read for a pod with one claim); only specs without a
// pod (admin access only) search every pod's claims. A claim read once is not read again in the pass. Specs that
// the bound leaves unresolved are kept, and the next pass goes on.
const MaxClaimReads = 1000

// Reconciled is what a ReconcileSpecs pass did.
type Reconciled struct {
	// Rebuilt are the claims whose checkpoint entries were rebuilt from
	// the API server's claim and their specs.
	Rebuilt []types.NamespacedName
	// Removed are the UIDs of the claims whose specs were removed, with
	// why no container on the node can use them.
	Removed map[string]string
	// Kept are the UIDs of the claims whose specs are kept without a
	// confirmed entry, with why.
	Kept map[string]string
	// Unconfirmed is the number of unconfirmed entries the checkpoint
	// holds after the pass, and UnconfirmedBytes the swap they count.
	Unconfirmed      int
	UnconfirmedBytes int64
}

// ReconcileSpecs brings the CDI specs and the checkpoint together: the
// spec of a claim the checkpoint does not hold, or holds unconfirmed, gets
// its entry rebuilt when the API server confirms the claim (found among
// the claims of the pods on this node, allocated on this node, its spec
// what prepare writes for that allocation), is removed when the API server
// confirms that no container on this node can use it (the pod it grants
// its swap to is not on the node, no pod on the node uses the claim, or
// the claim is no longer allocated on this node), and is kept, with an
// unconfirmed entry, otherwise. An unconfirmed entry whose spec is gone
// (unprepared) is dropped. The plugin runs it at start-up and then
// periodically while unconfirmed entries remain.
//
// The checkpoint and the specs are read, and the outcome applied, under
// the checkpoint's lock; the API server is asked in between, without it.
// What another plugin instance prepared or unprepared in the meantime is
// left as that instance left it.
func (m *Manager) ReconcileSpecs(ctx context.Context, cluster Cluster) (Reconciled, error) {
	out := Reconciled{Removed: map[string]string{}, Kept: map[string]string{}}
	// Specs without a confirmed entry and unconfirmed entries.
	var candidates []string
	err := m.store.Update(func(cp *checkpoint.Checkpoint) error {
		uids, err := m.specs.Claims()
		if err != nil {
			return err
		}
		for _, uid := range uids {
			if info, ok := cp.Claims[types.UID(uid)]; !ok || !info.Confirmed() {
				candidates = append(candidates, uid)
			}
		}
		for uid, info := range cp.Claims {
			if !info.Confirmed() && !slices.Contains(candidates, string(uid)) {
				candidates = append(candidates, string(uid))
			}
		}
		return errUnchanged
	}, nil)
	if err != nil && !errors.Is(err, errUnchanged) {
		return out, err
	}
	if len(candidates) == 0 {
		return out, nil
	}
	slices.Sort(candidates)
	pods, err := cluster.NodePods()
	if err != nil {
		return out, fmt.Errorf("list the node's pods: %w", err)
	}
	r := &resolver{m: m, cluster: cluster, pods: pods, byUID: map[types.UID]*corev1.Pod{}, claims: map[types.NamespacedName]claimRead{}}
	for _, p := range pods {
		r.byUID[p.UID] = p
	}
	verdicts := make([]verdict, 0, len(candidates))
	for _, uid := range candidates {
		verdicts = append(verdicts, r.resolve(ctx, uid))
	}
	// A spec that cannot be checked or removed is left for the next pass;
	// the others' outcome is saved all the same.
	var errs []error
	err = m.update(func(cp *checkpoint.Checkpoint) error {
		errs = nil
		changed := false
		for _, v := range verdicts {
			key := types.UID(v.uid)
			info, held := cp.Claims[key]
			if held && info.Confirmed() {
				continue // prepared meanwhile
			}
			has, err := m.specs.Has(v.uid)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			switch {
			case !has:
				// Unprepared meanwhile, or an unconfirmed entry whose
				// spec was removed.
				changed = changed || held
				delete(cp.Claims, key)
			case v.rebuilt != nil:
				cp.Claims[key], changed = *v.rebuilt, true
				out.Rebuilt = append(out.Rebuilt, types.NamespacedName{Namespace: v.rebuilt.Namespace, Name: v.rebuilt.Name})
			case v.remove:
				if err := m.specs.Remove(v.uid); err != nil {
					errs = append(errs, err)
					continue
				}
				changed = changed || held
				delete(cp.Claims, key)
				out.Removed[v.uid] = v.why
			default:
				changed = changed || !held || !reflect.DeepEqual(info, v.kept)
				cp.Claims[key] = v.kept
				out.Kept[v.uid] = v.why
			}
		}
		for _, info := range cp.Claims {
			if !info.Confirmed() {
				out.Unconfirmed++
				out.UnconfirmedBytes += info.LimitBytes
			}
		}
		if !changed {
			return errUnchanged
		}
		return nil
	}, nil)
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return out, errors.Join(append(errs, err)...)
}

// verdict is what the API server says of one spec.
type verdict struct {
	uid string
	// rebuilt is the claim's entry, when the API server confirmed it.
	rebuilt *checkpoint.ClaimInfo
	// remove: no container on the node can use the spec.
	remove bool
	// kept is the unconfirmed entry of a spec that is kept.
	kept checkpoint.ClaimInfo
	why  string
}

type claimRead struct {
	claim *resourceapi.ResourceClaim
	err   error
}

// resolver answers for one pass, reading each claim at most once.
type resolver struct {
	m       *Manager
	cluster Cluster
	pods    []*corev1.Pod
	byUID   map[types.UID]*corev1.Pod
	claims  map[types.NamespacedName]claimRead
	reads   int
}

// resolve decides what becomes of the spec of claim uid.
func (r *resolver) resolve(ctx context.Context, uid string) verdict {
	edits, readErr := r.m.specs.Read(uid)
	if errors.Is(readErr, fs.ErrNotExist) {
		return verdict{uid: uid, remove: true, why: "its spec is gone"}
	}
	keep := func(why string, bytes int64) verdict {
		return verdict{uid: uid, kept: r.m.unconfirmedEntry(uid, edits, readErr, bytes), why: why}
	}
	search := r.pods
	if readErr == nil && edits.PodUID != "" {
		pod, ok := r.byUID[types.UID(edits.PodUID)]
		if !ok {
			return verdict{uid: uid, remove: true, why: fmt.Sprintf("the pod it grants its swap to (UID %s) is not on this node, and the hook refuses any other pod's container", edits.PodUID)}
		}
		search = []*corev1.Pod{pod}
	}
	claim, complete, apiErr := r.find(ctx, types.UID(uid), search)
	if claim == nil {
		if !complete {
			why := fmt.Sprintf("the API server did not confirm which claim it is within %d claim reads", MaxClaimReads)
			if apiErr != nil {
				why = fmt.Sprintf("the API server did not confirm which claim it is: %v", apiErr)
			}
			return keep(why, 0)
		}
		if len(search) == 1 && search[0] != nil && readErr == nil && edits.PodUID != "" {
			return verdict{uid: uid, remove: true, why: fmt.Sprintf("its pod %s/%s uses no claim with this UID", search[0].Namespace, search[0].Name)}
		}
		return verdict{uid: uid, remove: true, why: "no pod on this node uses a claim with this UID"}
	}
	name := claim.Namespace + "/" + claim.Name
	if !r.m.allocatedHere(claim) {
		return verdict{uid: uid, remove: true, why: fmt.Sprintf("claim %s is not allocated on this node", name)}
	}
	plan, err := r.m.plan(claim)
	if err != nil {
		return keep(fmt.Sprintf("claim %s: %v", name, err), 0)
	}
	if readErr != nil {
		return keep(fmt.Sprintf("claim %s: %v", name, readErr), plan.limitBytes)
	}
	entry, err := r.m.rebuiltEntry(plan, edits, "")
	if err != nil {
		return keep(fmt.Sprintf("claim %s: %v", name, err), plan.limitBytes)
	}
	return verdict{uid: uid, rebuilt: &entry}
}

// find looks for the claim with that UID among the claims of pods.
// complete is false when a read failed (apiErr is the last failure) or
// the pass ran out of reads: the claim may then be one not read.
func (r *resolver) find(ctx context.Context, uid types.UID, pods []*corev1.Pod) (claim *resourceapi.ResourceClaim, complete bool, apiErr error) {
	complete = true
	for _, pod := range pods {
		for _, name := range podClaimNames(pod) {
			key := types.NamespacedName{Namespace: pod.Namespace, Name: name}
			read, ok := r.claims[key]
			if !ok {
				if r.reads >= MaxClaimReads || ctx.Err() != nil {
					return nil, false, ctx.Err()
				}
				r.reads++
				read.claim, read.err = r.cluster.GetClaim(ctx, key.Namespace, key.Name)
				r.claims[key] = read
			}
			switch {
			case apierrors.IsNotFound(read.err):
			case read.err != nil:
				complete, apiErr = false, read.err
			case read.claim.UID == uid:
				return read.claim, true, nil
			}
		}
	}
	return nil, complete, apiErr
}

// allocatedHere reports whether the claim is allocated a result of this
// driver in this node's pool.
func (m *Manager) allocatedHere(claim *resourceapi.ResourceClaim) bool {
	if claim.Status.Allocation == nil {
		return false
	}
	return slices.ContainsFunc(claim.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == m.opts.DriverName && r.Pool == m.opts.PoolName
	})
}

// rebuiltEntry is the checkpoint entry prepare saved for the claim of
// plan with the spec it wrote, edits: the spec must be what prepare
// writes for the claim's allocation (a device per result of the driver,
// by index, with the result's settings, granted to podUID when that is
// not empty), so that a repeated prepare answers with the devices the
// kubelet holds and unprepare finds what it removes.
func (m *Manager) rebuiltEntry(plan *claimPlan, edits cdi.ClaimEdits, podUID string) (checkpoint.ClaimInfo, error) {
	if len(edits.Devices) != len(plan.results) {
		return checkpoint.ClaimInfo{}, fmt.Errorf("its spec has %d devices, its allocation %d results of this driver", len(edits.Devices), len(plan.results))
	}
	if podUID != "" && edits.PodUID != "" && edits.PodUID != podUID {
		return checkpoint.ClaimInfo{}, fmt.Errorf("its spec grants its swap to pod UID %s, not %s", edits.PodUID, podUID)
	}
	for i, r := range plan.results {
		d := edits.Devices[i]
		if d.ResultIndex != r.index || d.AdminAccess != r.admin || !reflect.DeepEqual(d.Settings, r.settings) {
			return checkpoint.ClaimInfo{}, fmt.Errorf("its spec's device %s is not what result %d of its allocation grants", cdi.DeviceName(edits.ClaimUID, d.ResultIndex), r.index)
		}
	}
	return m.entry(plan, edits.Devices[0].EnvLimitBytes), nil
}

// unconfirmedEntry is the entry of a spec kept without the API server's
// confirmation: no name, the devices the spec has and the swap its hooks
// grant (or bytes, when the spec cannot be read).
func (m *Manager) unconfirmedEntry(uid string, edits cdi.ClaimEdits, readErr error, bytes int64) checkpoint.ClaimInfo {
	info := checkpoint.ClaimInfo{LimitBytes: bytes}
	if readErr != nil {
		return info
	}
	var granted int64
	for _, d := range edits.Devices {
		if !d.AdminAccess {
			granted += d.LimitBytes
		}
		info.Devices = append(info.Devices, checkpoint.PreparedDevice{PoolName: m.opts.PoolName, DeviceName: v1alpha1.DeviceName,
			CDIDeviceIDs: []string{cdi.DeviceID(uid, d.ResultIndex)}})
	}
	info.LimitBytes = max(granted, bytes)
	info.EnvLimitBytes = edits.Devices[0].EnvLimitBytes
	return info
}
