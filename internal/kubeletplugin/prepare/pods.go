package prepare

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
)

// A claim's swap is charged once, by the scheduler, when the claim is
// allocated. So it is granted to one pod: the first pod in the claim's
// reservedFor that still exists. The kubelet prepares a claim once per
// node, for the first pod that uses it, and never calls the plugin for
// the next; the CDI spec therefore carries that pod's UID and the hook
// refuses the containers of any other pod. Within the pod, the
// containers that use the claim share what it was charged: when they
// could together use more than the pod's claims add up to (a claim used
// by several containers), the pod's cgroup gets that sum as its budget.

// lookUpPods finds the pods in the claim's reservedFor and refuses
// critical pods unless allowed. The kubelet prepares a claim only for a pod
// bound to this node and in the claim's reservedFor, so a reserved pod that
// the cache does not show, or shows under another UID (a pod recreated
// under the same name), is one the cache has not caught up with: the
// PodGetter waits for it, and when no reserved pod turns up the claim
// fails, for the kubelet to retry, instead of being prepared without a pod
// to bound it. A claim reserved for anything but pods (a PodGroup, with
// DRAWorkloadResourceClaims) is refused: swap is granted to one pod.
func (m *Manager) lookUpPods(ctx context.Context, plan *claimPlan) error {
	claim := plan.claim
	var refs []resourceapi.ResourceClaimConsumerReference
	for _, ref := range claim.Status.ReservedFor {
		if ref.APIGroup != "" || ref.Resource != "pods" {
			return fmt.Errorf("the claim is reserved for %s %q, not for a pod: dra.swap grants a claim's swap to one pod; per-group swap is not supported",
				consumerKind(ref), ref.Name)
		}
		refs = append(refs, ref)
	}
	if len(refs) == 0 {
		return errors.New("the claim is reserved for no pod")
	}
	// Each lookup may wait for the cache: all at once, so that a claim's
	// wait is one lookup's, however many pods reserve it.
	pods := make([]*corev1.Pod, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Go(func() { pods[i], errs[i] = m.pods.GetPod(ctx, claim.Namespace, ref.Name, ref.UID) })
	}
	wg.Wait()
	var missing []string
	for i, ref := range refs {
		pod, err := pods[i], errs[i]
		if apierrors.IsNotFound(err) {
			missing = append(missing, ref.Name)
			continue
		}
		if err != nil {
			return fmt.Errorf("look up pod %s/%s that uses the claim: %w", claim.Namespace, ref.Name, err)
		}
		if isCritical(pod) && !m.opts.AllowCriticalPods {
			return fmt.Errorf("pod %s/%s has priority class %s: critical pods never swap (an admin can allow it with --allow-critical-pods)",
				pod.Namespace, pod.Name, pod.Spec.PriorityClassName)
		}
		plan.pods = append(plan.pods, pod)
	}
	if len(plan.pods) == 0 {
		return fmt.Errorf("none of the pods it is reserved for (%s) is in the plugin's cache of this node's pods yet; the kubelet retries",
			namesSummary(missing))
	}
	return nil
}

// consumerKind names a reservedFor entry's resource, with its API group.
func consumerKind(ref resourceapi.ResourceClaimConsumerReference) string {
	if ref.APIGroup == "" {
		return ref.Resource
	}
	return ref.Resource + "." + ref.APIGroup
}

// namesSummary lists up to three names and how many more there are, so
// that a message stays short however many pods reserve a claim.
func namesSummary(names []string) string {
	const shown = 3
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}

// grantedPod is the pod the claim's swap goes to: the first one that
// uses it, or nil when no pod that uses it exists.
func (p *claimPlan) grantedPod() *corev1.Pod {
	if len(p.pods) == 0 {
		return nil
	}
	return p.pods[0]
}

func isCritical(pod *corev1.Pod) bool {
	switch pod.Spec.PriorityClassName {
	case "system-node-critical", "system-cluster-critical":
		return true
	}
	return false
}

// share is one allocation result of a swap claim as a container may use
// it.
type share struct {
	claim string // the ResourceClaim's name
	index int    // the result's index in the allocation
	// request is the claim's request the result belongs to; "" when not
	// known (a recorded claim counted as a whole, or a recorded device of
	// several requests: see recordedShares).
	request    string
	limitBytes int64
}

// key identifies the share among a pod's.
func (s share) key() string { return fmt.Sprintf("%s/%d", s.claim, s.index) }

// shareSource returns the shares of a ResourceClaim by name (nil for a
// claim that grants no swap).
type shareSource func(claimName string) []share

// shares of the claims of this call first, then of those the checkpoint
// holds (prepared by earlier calls, by this or another instance).
func sharesFrom(namespace string, batch map[string]*claimPlan, cp *checkpoint.Checkpoint) shareSource {
	return func(name string) []share {
		if plan, ok := batch[name]; ok {
			var out []share
			for _, r := range plan.results {
				out = append(out, share{claim: name, index: r.index, request: r.request(), limitBytes: r.settings.LimitBytes})
			}
			return out
		}
		for uid, c := range cp.Claims {
			if c.Namespace != namespace || c.Name != name {
				continue
			}
			return recordedShares(uid, c)
		}
		return nil
	}
}

// recordedShares turns a checkpoint entry back into shares. The entry has
// no bytes per device: a claim with one device grants all its bytes
// through it; one with several is counted as a whole (its devices' IDs
// name their result indexes), which can only overstate a container's
// DRA_SWAP_LIMIT_BYTES, never a cgroup limit (the hook's arguments carry
// each result's own bytes).
func recordedShares(uid types.UID, c checkpoint.ClaimInfo) []share {
	if len(c.Devices) == 1 {
		d := c.Devices[0]
		s := share{claim: c.Name, index: resultIndexOf(uid, d.CDIDeviceIDs), limitBytes: c.LimitBytes}
		if len(d.Requests) == 1 {
			s.request = resourceclaim.BaseRequestRef(d.Requests[0])
		}
		return []share{s}
	}
	return []share{{claim: c.Name, index: -1, limitBytes: c.LimitBytes}}
}

// resultIndexOf reads the result index out of the claim's CDI device ID;
// -1 when none of the IDs is one of the claim's.
func resultIndexOf(uid types.UID, ids []string) int {
	for _, id := range ids {
		if claim, index, ok := cdi.ParseDeviceID(id); ok && claim == string(uid) {
			return index
		}
	}
	return -1
}

// containerShares returns, for each container of the pod (init containers
// first), the shares it uses: every result of a claim it references as a
// whole, the results of one request for a reference naming a request, and
// the results of the requests that the pod's extended-resource claim maps
// to it.
func containerShares(pod *corev1.Pod, sharesOf shareSource) [][]share {
	var out [][]share
	for _, c := range namedContainerShares(pod, sharesOf) {
		out = append(out, c.shares)
	}
	return out
}

// containerUse is what one container of a pod uses.
type containerUse struct {
	name   string
	shares []share
}

// namedContainerShares is containerShares with the containers' names.
//
// A container that asks for an extended resource backed by DRA (such as
// deviceclass.resource.kubernetes.io/dra.swap) uses the claim the scheduler
// created for the pod's extended resources, named in
// status.extendedResourceClaimStatus: the requests its requestMappings map
// to the container, for a resource the container requests, as the
// kubelet's DRA manager hands their CDI devices to it.
func namedContainerShares(pod *corev1.Pod, sharesOf shareSource) []containerUse {
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
	extended := pod.Status.ExtendedResourceClaimStatus
	var out []containerUse
	visit := func(c *corev1.Container) {
		used := map[string]share{}
		for _, ref := range c.Resources.Claims {
			name, ok := resolved[ref.Name]
			if !ok {
				continue
			}
			for _, s := range sharesOf(name) {
				if ref.Request == "" || s.request == "" || s.request == ref.Request {
					used[s.key()] = s
				}
			}
		}
		if extended != nil {
			for _, m := range extended.RequestMappings {
				q, ok := c.Resources.Requests[corev1.ResourceName(m.ResourceName)]
				if m.ContainerName != c.Name || !ok || q.IsZero() {
					continue
				}
				for _, s := range sharesOf(extended.ResourceClaimName) {
					if s.request == m.RequestName {
						used[s.key()] = s
					}
				}
			}
		}
		keys := slices.Sorted(maps.Keys(used))
		shares := make([]share, 0, len(keys))
		for _, k := range keys {
			shares = append(shares, used[k])
		}
		out = append(out, containerUse{name: c.Name, shares: shares})
	}
	for i := range pod.Spec.InitContainers {
		visit(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		visit(&pod.Spec.Containers[i])
	}
	return out
}

func sum(shares []share) int64 {
	var total int64
	for _, s := range shares {
		total += s.limitBytes
	}
	return total
}

// podTotals are what prepare tells the containers of the granted pod.
type podTotals struct {
	// env maps a share's key to DRA_SWAP_LIMIT_BYTES for its device: the
	// total of the containers that use it, when they agree.
	env map[string]int64
	// budget, if set, is the pod's swap budget: the sum of its claims,
	// when its containers could together use more.
	budget *int64
	// containers maps a share's key to the containers that use it and
	// each one's total.
	containers map[string]map[string]int64
}

// totalsFor works out what the granted pod's containers get.
func totalsFor(pod *corev1.Pod, sharesOf shareSource) (podTotals, []string) {
	t := podTotals{env: map[string]int64{}, containers: map[string]map[string]int64{}}
	var conflicts []string
	perShare := map[string]map[int64]bool{}
	var containers int64
	for _, c := range namedContainerShares(pod, sharesOf) {
		total := sum(c.shares)
		containers += total
		for _, s := range c.shares {
			if perShare[s.key()] == nil {
				perShare[s.key()] = map[int64]bool{}
				t.containers[s.key()] = map[string]int64{}
			}
			perShare[s.key()][total] = true
			t.containers[s.key()][c.name] = total
		}
	}
	for k, totals := range perShare {
		if len(totals) == 1 {
			for v := range totals {
				t.env[k] = v
			}
		} else {
			conflicts = append(conflicts, k)
		}
	}
	// The pod's claims, each counted once.
	var claims int64
	seen := map[string]bool{}
	for _, pc := range podClaimNames(pod) {
		if seen[pc] {
			continue
		}
		seen[pc] = true
		claims += sum(sharesOf(pc))
	}
	if containers > claims {
		t.budget = &claims
	}
	slices.Sort(conflicts)
	return t, conflicts
}

// podClaimNames are the names of the ResourceClaims the pod uses, its
// extended-resource claim included.
func podClaimNames(pod *corev1.Pod) []string {
	var names []string
	resolved := map[string]bool{}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			names = append(names, *s.ResourceClaimName)
			resolved[s.Name] = true
		}
	}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil && !resolved[pc.Name] {
			names = append(names, *pc.ResourceClaimName)
		}
	}
	if e := pod.Status.ExtendedResourceClaimStatus; e != nil && e.ResourceClaimName != "" {
		names = append(names, e.ResourceClaimName)
	}
	return names
}
