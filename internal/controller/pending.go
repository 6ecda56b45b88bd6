package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
)

// ReasonSwapUnavailable is the event on a pod that waits for swap: the
// scheduler says only "cannot allocate all claims"; the event says which
// nodes' swap devices are tainted (pressure, full swap, overcommitted, no
// swap) or offer too little.
const ReasonSwapUnavailable = "SwapUnavailable"

// pendingRecheck is how often a pod that still waits is looked at again
// (taints come and go without touching the pod).
const pendingRecheck = 5 * time.Second

// PendingExplainer tells a pod that the scheduler cannot place because of
// its swap claim, or its swap asked for as an extended resource, why no
// node's swap device can take it.
type PendingExplainer struct {
	Client   client.Reader
	Recorder events.EventRecorder
	mu       sync.Mutex
	// told is the last explanation given to each pod, by name: a request
	// for a pod that is gone names it, and its entry goes with it.
	told map[types.NamespacedName]toldPod
}

// toldPod is the explanation given to one pod (of this UID).
type toldPod struct {
	uid     types.UID
	message string
}

// Bounds of the SwapUnavailable event's note, which must fit in
// eventmsg.NoteLimit bytes: the claims and extended resources named take
// at most pendingClaimsBytes, the nodes the rest.
const (
	pendingClaimsNamed = 3
	pendingClaimsBytes = 256
	pendingNodesNamed  = 5
)

// Reconcile implements reconcile.Reconciler for one pod.
func (e *PendingExplainer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := e.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			e.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !unschedulable(pod) {
		e.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	claims, err := e.waitingSwapClaims(ctx, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	resources, err := e.waitingSwapResources(ctx, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(claims) == 0 && len(resources) == 0 {
		e.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	nodes, err := e.explain(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	msg := unavailable(claims, resources, nodes)
	e.mu.Lock()
	if e.told == nil {
		e.told = map[types.NamespacedName]toldPod{}
	}
	changed := e.told[req.NamespacedName] != toldPod{pod.UID, msg}
	e.told[req.NamespacedName] = toldPod{pod.UID, msg}
	e.mu.Unlock()
	if changed {
		e.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonSwapUnavailable, "ScheduleSwapClaim", "%s", msg)
	}
	return reconcile.Result{RequeueAfter: pendingRecheck}, nil
}

func (e *PendingExplainer) forget(pod types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.told, pod)
}

// unavailable is the SwapUnavailable note: the claims, the extended
// resources and the nodes' descriptions, the first few of each and the
// count of the rest, within eventmsg.NoteLimit bytes.
func unavailable(claims, resources, nodes []string) string {
	budget := pendingClaimsBytes
	if len(claims) > 0 && len(resources) > 0 {
		budget /= 2
	}
	var what []string
	if len(claims) > 0 {
		what = append(what, "claim "+eventmsg.List(claims, ", ", pendingClaimsNamed, budget))
	}
	if len(resources) > 0 {
		what = append(what, "extended resource "+eventmsg.List(resources, ", ", pendingClaimsNamed, budget))
	}
	head := "Swap " + strings.Join(what, " and ") + " cannot be allocated on any node now: "
	if len(nodes) == 0 {
		return eventmsg.Truncate(head+"no node runs the dra.swap kubelet plugin", eventmsg.NoteLimit)
	}
	const tail = " (a claim may tolerate a taint; see the README's \"Swap pressure\")"
	return eventmsg.Truncate(head+eventmsg.List(nodes, "; ", pendingNodesNamed, eventmsg.NoteLimit-len(head)-len(tail))+tail, eventmsg.NoteLimit)
}

// unschedulable: not bound, and the scheduler said why.
func unschedulable(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// waitingSwapClaims are the pod's claims that are not allocated and ask
// for a device class of the driver.
func (e *PendingExplainer) waitingSwapClaims(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	var out []string
	for _, name := range podlabels.ClaimNames(pod) {
		claim := &resourceapi.ResourceClaim{}
		switch err := e.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, claim); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, err
		}
		if claim.Status.Allocation != nil {
			continue
		}
		for _, className := range requestedClasses(claim) {
			class, err := e.class(ctx, className)
			if err != nil {
				return nil, err
			}
			if class != nil && isSwapClass(class) {
				out = append(out, name)
				break
			}
		}
	}
	return out, nil
}

// waitingSwapResources are the extended resources the pod requests that
// a swap class backs, while no claim for them exists yet: the scheduler
// creates the pod's extended-resource claim only once it has found a node
// (then waitingSwapClaims sees it). A quantity above one says why it
// never fits: the allocator gives a node's one swap device once per
// request.
func (e *PendingExplainer) waitingSwapResources(ctx context.Context, pod *corev1.Pod) ([]string, error) {
	ext := podlabels.ExtendedResources(pod)
	if len(ext) == 0 {
		return nil, nil
	}
	if s := pod.Status.ExtendedResourceClaimStatus; s != nil && s.ResourceClaimName != "" {
		return nil, nil
	}
	var out []string
	for _, r := range ext {
		class, err := e.backingClass(ctx, r.Name)
		if err != nil {
			return nil, err
		}
		if class == nil || !isSwapClass(class) {
			continue
		}
		item := string(r.Name)
		if r.Quantity > 1 {
			item += fmt.Sprintf(": %d (each node has one swap device, so only 1 can be allocated)", r.Quantity)
		}
		out = append(out, item)
	}
	return out, nil
}

// backingClass is the DeviceClass that backs an extended resource, as the
// scheduler picks it (k8s.io/dynamic-resource-allocation's
// extendedresourcecache): deviceclass.resource.kubernetes.io/<class>, or
// the class naming it in spec.extendedResourceName (the newest, then the
// first by name, when several do); nil when none does.
func (e *PendingExplainer) backingClass(ctx context.Context, name corev1.ResourceName) (*resourceapi.DeviceClass, error) {
	if className, ok := strings.CutPrefix(string(name), resourceapi.ResourceDeviceClassPrefix); ok {
		class := &resourceapi.DeviceClass{}
		switch err := e.Client.Get(ctx, types.NamespacedName{Name: className}, class); {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("get DeviceClass %s: %w", className, err)
		}
		return class, nil
	}
	list := &resourceapi.DeviceClassList{}
	if err := e.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list DeviceClasses: %w", err)
	}
	var picked *resourceapi.DeviceClass
	for i := range list.Items {
		c := &list.Items[i]
		if c.Spec.ExtendedResourceName == nil || *c.Spec.ExtendedResourceName != string(name) {
			continue
		}
		if picked == nil || c.CreationTimestamp.After(picked.CreationTimestamp.Time) ||
			c.CreationTimestamp.Equal(&picked.CreationTimestamp) && c.Name < picked.Name {
			picked = c
		}
	}
	return picked, nil
}

func requestedClasses(claim *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range claim.Spec.Devices.Requests {
		if r.Exactly != nil {
			out = append(out, r.Exactly.DeviceClassName)
		}
		for _, s := range r.FirstAvailable {
			out = append(out, s.DeviceClassName)
		}
	}
	return out
}

// class reads a DeviceClass; nil when there is none of that name.
func (e *PendingExplainer) class(ctx context.Context, name string) (*resourceapi.DeviceClass, error) {
	class := &resourceapi.DeviceClass{}
	switch err := e.Client.Get(ctx, types.NamespacedName{Name: name}, class); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return class, nil
}

// isSwapClass: a class whose selectors name the driver.
func isSwapClass(class *resourceapi.DeviceClass) bool {
	for _, s := range class.Spec.Selectors {
		if s.CEL != nil && strings.Contains(s.CEL.Expression, `"`+v1alpha1.DriverName+`"`) {
			return true
		}
	}
	return false
}

// explain describes every node's swap device, its taints or its offer,
// sorted by node.
func (e *PendingExplainer) explain(ctx context.Context) ([]string, error) {
	list, err := driverSlices(ctx, e.Client)
	if err != nil {
		return nil, err
	}
	var nodes []string
	for i := range list {
		s := &list[i]
		if !trusted(s) {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name != v1alpha1.DeviceName {
				continue
			}
			nodes = append(nodes, "node "+*s.Spec.NodeName+": "+describeDevice(d))
		}
	}
	slices.Sort(nodes)
	return nodes, nil
}

func describeDevice(d resourceapi.Device) string {
	if len(d.Taints) > 0 {
		var taints []string
		for _, t := range d.Taints {
			taint := t.Key
			if t.Value != "" {
				taint += "=" + t.Value
			}
			taints = append(taints, taint+":"+string(t.Effect))
		}
		return "swap device tainted " + strings.Join(taints, ", ")
	}
	if c, ok := d.Capacity[v1alpha1.CapacitySwap]; ok {
		return "offers " + resource.NewQuantity(c.Value.Value(), resource.BinarySI).String() + " of swap in all (not enough left, or the claim's selectors do not match)"
	}
	return "offers no swap"
}

// remembered is how many pods the explainer keeps an explanation for.
func (e *PendingExplainer) remembered() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.told)
}
