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
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/pkg/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/pkg/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/pkg/slice"
)

// maxSwapBytes bounds any limit the driver hands on (far above any real
// swap size, far below overflow when limits are added up).
const maxSwapBytes = int64(1) << 50

// SpecWriter writes and removes per-claim CDI specs (pkg/cdi.Writer).
type SpecWriter interface {
	Write(edits cdi.ClaimEdits) (string, error)
	Remove(claimUID string) error
	// Claims lists the claims that have a spec.
	Claims() ([]string, error)
}

// CheckpointStore is the checkpoint that the plugin instances on a node
// share (pkg/checkpoint.Store).
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
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// Options configure a Manager.
type Options struct {
	// DriverName is the driver whose allocation results are handled.
	DriverName string
	// PoolName is this node's pool (the node name).
	PoolName string
	// CgroupVersion reports the node's cgroup version (1 or 2).
	CgroupVersion func() int
	// AllowCriticalPods lets system-node-critical and
	// system-cluster-critical pods use swap; the kubelet never swaps
	// them, and neither does this driver unless an admin says so.
	AllowCriticalPods bool
	// Recorded, if set, is told what the checkpoint holds after each
	// prepare or unprepare (the claims prepared on the node and the swap
	// they grant), from the checkpoint that call read, for the metrics.
	Recorded func(claims int, swapBytes int64)
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

// RemoveOrphanSpecs removes the CDI specs of claims the checkpoint does
// not hold (left by a plugin killed between writing a spec and saving the
// checkpoint, or by a checkpoint set aside as unusable) and returns their
// claim UIDs. It holds the checkpoint's lock, so a prepare of another
// plugin instance, which writes its spec and its entry under that lock,
// is never caught in between.
func (m *Manager) RemoveOrphanSpecs() ([]string, error) {
	var removed []string
	err := m.store.Update(func(cp *checkpoint.Checkpoint) error {
		uids, err := m.specs.Claims()
		if err != nil {
			return err
		}
		var errs []error
		for _, uid := range uids {
			if _, ok := cp.Claims[types.UID(uid)]; ok {
				continue
			}
			if err := m.specs.Remove(uid); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, uid)
		}
		return errors.Join(errs...)
	}, nil)
	return removed, err
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
		swapBytes += c.SwapBytes
	}
	return len(cp.Claims), swapBytes
}

// update is store.Update, and then tells Options.Recorded what the
// checkpoint holds when the change was saved or there was nothing to save.
func (m *Manager) update(change func(cp *checkpoint.Checkpoint) error, undo func() error) error {
	var seen *checkpoint.Checkpoint
	err := m.store.Update(func(cp *checkpoint.Checkpoint) error {
		seen = cp
		return change(cp)
	}, undo)
	if m.opts.Recorded != nil && seen != nil && (err == nil || errors.Is(err, errUnchanged)) {
		m.opts.Recorded(totals(seen))
	}
	return err
}

// errUnchanged tells the checkpoint store that there is nothing to save.
var errUnchanged = errors.New("checkpoint unchanged")

// claimPlan is what prepare decided for one claim before any I/O.
type claimPlan struct {
	claim   *resourceapi.ResourceClaim
	results []resourceapi.DeviceRequestAllocationResult
	bytes   int64
	config  *v1alpha1.SwapConfig
	// pods are the pods in the claim's reservedFor that exist.
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
	batch := map[types.NamespacedName]int64{}
	for _, claim := range claims {
		plan, err := m.plan(claim)
		if err != nil {
			results[claim.UID] = kubeletplugin.PrepareResult{Err: claimError(claim, err)}
			continue
		}
		plans = append(plans, plan)
		batch[types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}] = plan.bytes
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
	var added []types.UID // claims whose spec is new
	err := m.update(func(cp *checkpoint.Checkpoint) error {
		for _, plan := range ready {
			devices, isNew, err := m.apply(ctx, cp, plan, batch)
			if err != nil {
				fail(plan.claim, err)
				continue
			}
			prepared[plan.claim.UID] = devices
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
		logger.V(2).Info("Prepared swap claim", "claim", klog.KObj(claim), "uid", claim.UID, "swapBytes", plan.bytes)
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: prepared[claim.UID]}
	}
	return results
}

func claimError(claim *resourceapi.ResourceClaim, err error) error {
	return fmt.Errorf("prepare swap claim %s/%s (%s): %w", claim.Namespace, claim.Name, claim.UID, err)
}

// plan validates a claim's allocation and configuration without I/O.
func (m *Manager) plan(claim *resourceapi.ResourceClaim) (*claimPlan, error) {
	if claim.Status.Allocation == nil {
		return nil, errors.New("claim is not allocated")
	}
	plan := &claimPlan{claim: claim}
	requests := map[string]bool{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != m.opts.DriverName {
			continue
		}
		if r.Pool != m.opts.PoolName || r.Device != slice.DeviceName {
			return nil, fmt.Errorf("request %q was allocated device %s/%s, which is not this node's swap device %s/%s",
				r.Request, r.Pool, r.Device, m.opts.PoolName, slice.DeviceName)
		}
		q, ok := r.ConsumedCapacity[slice.CapacitySwap]
		if !ok {
			return nil, fmt.Errorf("request %q has no consumed %q capacity: the cluster must allocate consumable capacity (DRAConsumableCapacity, on by default from Kubernetes 1.36)", r.Request, slice.CapacitySwap)
		}
		b := q.Value()
		if b == 0 {
			return nil, fmt.Errorf("request %q consumed no swap: the node offers none (its device carries the taint %s, which the claim tolerates)", r.Request, slice.TaintNoUsableSwap)
		}
		if b < 0 || b > maxSwapBytes {
			return nil, fmt.Errorf("request %q consumed %s of swap, outside 1..%d bytes", r.Request, q.String(), maxSwapBytes)
		}
		plan.bytes += b
		plan.results = append(plan.results, r)
		requests[r.Request] = true
	}
	if len(plan.results) == 0 {
		return nil, fmt.Errorf("no device of driver %s is allocated to the claim", m.opts.DriverName)
	}
	config, err := m.config(claim.Status.Allocation.Devices.Config, requests)
	if err != nil {
		return nil, err
	}
	plan.config = config
	return plan, nil
}

// config decodes and merges the driver's opaque configs that apply to the
// claim's swap requests: those of the DeviceClass first, then the claim's.
func (m *Manager) config(configs []resourceapi.DeviceAllocationConfiguration, requests map[string]bool) (*v1alpha1.SwapConfig, error) {
	configs = slices.Clone(configs)
	slices.SortStableFunc(configs, func(a, b resourceapi.DeviceAllocationConfiguration) int {
		return cmp.Compare(sourceRank(a.Source), sourceRank(b.Source))
	})
	var decoded []*v1alpha1.SwapConfig
	for i, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != m.opts.DriverName {
			continue
		}
		if len(c.Requests) > 0 && !slices.ContainsFunc(c.Requests, func(r string) bool { return requests[r] }) {
			continue
		}
		sc, err := m.decoder.Decode(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("config %d (from %s): %w", i, c.Source, err)
		}
		decoded = append(decoded, sc)
	}
	merged := v1alpha1.Merge(decoded...)
	if errs := merged.ValidateForCgroupVersion(m.opts.CgroupVersion()); len(errs) > 0 {
		return nil, fmt.Errorf("config does not fit this node: %w", errs.ToAggregate())
	}
	return merged, nil
}

func sourceRank(s resourceapi.AllocationConfigSource) int {
	if s == resourceapi.AllocationConfigSourceClass {
		return 0
	}
	return 1
}

// apply writes the claim's spec and records it in cp; isNew reports that
// cp did not hold the claim before. On failure cp is unchanged.
func (m *Manager) apply(ctx context.Context, cp *checkpoint.Checkpoint, plan *claimPlan, batch map[types.NamespacedName]int64) (devices []kubeletplugin.Device, isNew bool, err error) {
	claim := plan.claim
	envBytes := m.envBytes(ctx, cp, plan, batch)
	edits := cdi.ClaimEdits{ClaimUID: string(claim.UID), SwapLimitBytes: plan.bytes, EnvBytes: envBytes}
	if p := plan.config.SwapHighPercent; p != nil {
		high := plan.bytes * int64(*p) / 100
		edits.SwapHighBytes = &high
	}
	switch plan.config.Zswap {
	case v1alpha1.ZswapEnabled:
		edits.Zswap = cdi.ZswapOn
	case v1alpha1.ZswapDisabled:
		edits.Zswap = cdi.ZswapOff
	}
	edits.Swappiness = plan.config.Swappiness

	_, wasPrepared := cp.Claims[claim.UID]
	id, err := m.specs.Write(edits)
	if err != nil {
		return nil, false, err
	}
	devices = make([]kubeletplugin.Device, 0, len(plan.results))
	saved := make([]checkpoint.PreparedDevice, 0, len(plan.results))
	for _, r := range plan.results {
		d := kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, ShareID: r.ShareID, CDIDeviceIDs: []string{id}}
		devices = append(devices, d)
		saved = append(saved, checkpoint.PreparedDevice{
			Requests: d.Requests, PoolName: d.PoolName, DeviceName: d.DeviceName, ShareID: d.ShareID, CDIDeviceIDs: d.CDIDeviceIDs,
		})
	}
	cp.Claims[claim.UID] = checkpoint.ClaimInfo{
		Namespace: claim.Namespace, Name: claim.Name, SwapBytes: plan.bytes, EnvBytes: envBytes, Devices: saved,
	}
	return devices, !wasPrepared, nil
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

// lookUpPods finds the pods in the claim's reservedFor (those that no
// longer exist are skipped) and refuses critical pods unless allowed.
func (m *Manager) lookUpPods(ctx context.Context, plan *claimPlan) error {
	claim := plan.claim
	for _, ref := range claim.Status.ReservedFor {
		if ref.APIGroup != "" || ref.Resource != "pods" {
			continue
		}
		pod, err := m.pods.GetPod(ctx, claim.Namespace, ref.Name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("look up pod %s/%s that uses the claim: %w", claim.Namespace, ref.Name, err)
		}
		if pod.UID != ref.UID {
			continue
		}
		if isCritical(pod) && !m.opts.AllowCriticalPods {
			return fmt.Errorf("pod %s/%s has priority class %s: critical pods never swap (an admin can allow it with --allow-critical-pods)",
				pod.Namespace, pod.Name, pod.Spec.PriorityClassName)
		}
		plan.pods = append(plan.pods, pod)
	}
	return nil
}

// envBytes is the DRA_SWAP_LIMIT_BYTES value of the claim's spec: the total
// swap limit of the containers that use it, which is the sum over all the
// swap claims of such a container (those in this call, then those in the
// checkpoint cp). When the claim reaches containers whose totals differ (a
// claim shared by containers that hold different other swap claims), no
// single value is right for all: the claim's own bytes are used and the
// cgroup limits, which the hook sums per container, stay exact.
func (m *Manager) envBytes(ctx context.Context, cp *checkpoint.Checkpoint, plan *claimPlan, batch map[types.NamespacedName]int64) int64 {
	claim := plan.claim
	totals := map[int64]bool{}
	for _, pod := range plan.pods {
		for _, t := range ContainerTotals(pod, claim.Name, func(name string) int64 { return claimBytes(cp, claim.Namespace, name, batch) }) {
			totals[t] = true
		}
	}
	if len(totals) == 1 {
		for t := range totals {
			return t
		}
	}
	if len(totals) > 1 {
		klog.FromContext(ctx).Info("Claim reaches containers with different swap totals; DRA_SWAP_LIMIT_BYTES shows the claim's own limit",
			"claim", klog.KObj(claim), "totals", slices.Sorted(maps.Keys(totals)))
	}
	return plan.bytes
}

func claimBytes(cp *checkpoint.Checkpoint, namespace, name string, batch map[types.NamespacedName]int64) int64 {
	if b, ok := batch[types.NamespacedName{Namespace: namespace, Name: name}]; ok {
		return b
	}
	for _, c := range cp.Claims {
		if c.Namespace == namespace && c.Name == name {
			return c.SwapBytes
		}
	}
	return 0 // not a swap claim of this driver
}

func isCritical(pod *corev1.Pod) bool {
	switch pod.Spec.PriorityClassName {
	case "system-node-critical", "system-cluster-critical":
		return true
	}
	return false
}

// ContainerTotals returns, for each container of the pod that uses the
// ResourceClaim named claimName, the sum of bytesOf over the distinct
// ResourceClaims that container uses. bytesOf returns 0 for claims that
// grant no swap.
func ContainerTotals(pod *corev1.Pod, claimName string, bytesOf func(claimName string) int64) []int64 {
	// Pod-level claim name -> ResourceClaim name.
	resolved := map[string]string{}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			resolved[pc.Name] = *pc.ResourceClaimName
		}
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			resolved[s.Name] = *s.ResourceClaimName
		}
	}
	var totals []int64
	visit := func(c *corev1.Container) {
		used := map[string]bool{}
		for _, ref := range c.Resources.Claims {
			if name, ok := resolved[ref.Name]; ok {
				used[name] = true
			}
		}
		if !used[claimName] {
			return
		}
		var total int64
		for name := range used {
			total += bytesOf(name)
		}
		totals = append(totals, total)
	}
	for i := range pod.Spec.InitContainers {
		visit(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		visit(&pod.Spec.Containers[i])
	}
	return totals
}
