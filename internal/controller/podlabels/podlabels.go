// Package podlabels decides which labels the controller puts on pods and
// nodes. It is pure: the webhook and the reconciler hand it the objects
// they hold and apply what it returns, so every rule is unit-tested.
package podlabels

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// Zone, Region and Hostname are the well-known topology labels. The
// driver's own keys are in api/swap/v1alpha1.
const (
	Zone     = corev1.LabelTopologyZone
	Region   = corev1.LabelTopologyRegion
	Hostname = corev1.LabelHostname
)

// TopologyKeys are the labels every selected pod gets (when its node has a
// value), read from the node's device attributes first, then from the Node.
var TopologyKeys = []string{Zone, Region, Hostname, v1alpha1.LabelSwapBehavior}

// Node is what the controller knows of a node: its labels and, when the
// kubelet plugin runs there, the device it published.
type Node struct {
	Labels map[string]string
	// Device is the node's dra.swap device; nil when the plugin does not
	// run on the node (no ResourceSlice of the driver names it).
	Device *resourceapi.Device
}

// RunsDriver reports whether the kubelet plugin published for the node.
func (n Node) RunsDriver() bool { return n.Device != nil }

// stringAttribute returns a string attribute of the device, "" when absent.
func (n Node) stringAttribute(name resourceapi.QualifiedName) string {
	if n.Device == nil {
		return ""
	}
	if a, ok := n.Device.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// SwapBehavior is the kubelet's swap behavior as the plugin published it
// (NoSwap, LimitedSwap or WorkloadControlledSwap), or "" when unknown.
func (n Node) SwapBehavior() string {
	switch b := n.stringAttribute(v1alpha1.AttrSwapBehavior); b {
	case v1alpha1.SwapBehaviorNoSwap, v1alpha1.SwapBehaviorLimitedSwap, v1alpha1.SwapBehaviorWorkloadControlledSwap:
		return b
	}
	return ""
}

// OfferBytes is the swap capacity the node's device offers (0 if none).
func (n Node) OfferBytes() int64 {
	if n.Device == nil {
		return 0
	}
	c, ok := n.Device.Capacity[v1alpha1.CapacitySwap]
	if !ok {
		return 0
	}
	return c.Value.Value()
}

// Policy is the admin's choice of what pods get: which extra Node labels
// are copied (Allowlist) and which pods are selected. It comes from the
// controller's flags only; nothing a namespace user writes widens it.
type Policy struct {
	// Allowlist holds extra Node label keys copied onto selected pods.
	Allowlist []string
	// Selection says which pods get labels.
	Selection Selection
	// NamespaceSelector picks namespaces for SelectNamespaces.
	NamespaceSelector labels.Selector
}

// Selection says which pods get labels.
type Selection string

const (
	// SelectSwapClaims selects pods with an allocated dra.swap claim.
	SelectSwapClaims Selection = "swap-claims"
	// SelectAll selects every pod on a node that runs the driver.
	SelectAll Selection = "all"
	// SelectNamespaces selects every pod in namespaces matching the
	// policy's NamespaceSelector, plus pods with swap claims.
	SelectNamespaces Selection = "namespaces"
)

// Validate checks the allowlist keys and the selection.
func (p Policy) Validate() error {
	for _, k := range p.Allowlist {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("allowlisted label key %q: %s", k, strings.Join(errs, "; "))
		}
		if k == v1alpha1.AnnotationManagedLabels || k == v1alpha1.LabelCapacity {
			return fmt.Errorf("allowlisted label key %q is the driver's own", k)
		}
	}
	switch p.Selection {
	case SelectSwapClaims, SelectAll:
	case SelectNamespaces:
		if p.NamespaceSelector == nil || p.NamespaceSelector.Empty() {
			return fmt.Errorf("pod selection %q needs a non-empty namespace selector", p.Selection)
		}
	default:
		return fmt.Errorf("pod selection %q is not one of %s, %s, %s", p.Selection, SelectSwapClaims, SelectAll, SelectNamespaces)
	}
	return nil
}

// Selects reports whether a pod gets labels. hasSwapClaim says whether
// one of its claims has a dra.swap device allocated; namespaceLabels are
// the labels of the pod's namespace (only read for SelectNamespaces).
func (p Policy) Selects(hasSwapClaim bool, namespaceLabels map[string]string) bool {
	switch p.Selection {
	case SelectAll:
		return true
	case SelectNamespaces:
		return hasSwapClaim || (p.NamespaceSelector != nil && p.NamespaceSelector.Matches(labels.Set(namespaceLabels)))
	default:
		return hasSwapClaim
	}
}

// PodLabels are the labels a selected pod on the node gets: the topology
// keys from the device's attributes, falling back to the Node's labels,
// and the allowlisted Node labels. A node without the driver gives none.
func (p Policy) PodLabels(n Node) map[string]string {
	out := map[string]string{}
	if !n.RunsDriver() {
		return out
	}
	for _, k := range p.Allowlist {
		if v, ok := n.Labels[k]; ok {
			out[k] = v
		}
	}
	for _, k := range []string{Zone, Region, Hostname} {
		v := n.stringAttribute(resourceapi.QualifiedName(k))
		if v == "" {
			v = n.Labels[k]
		}
		if v != "" {
			out[k] = v
		}
	}
	if b := n.SwapBehavior(); b != "" {
		out[v1alpha1.LabelSwapBehavior] = b
	} else if v := n.Labels[v1alpha1.LabelSwapBehavior]; v != "" {
		out[v1alpha1.LabelSwapBehavior] = v
	}
	return out
}

// PodChange is how a pod's labels must change: labels to set, labels to
// remove (only ones the driver set before), and the new value of
// the v1alpha1.AnnotationManagedLabels annotation.
type PodChange struct {
	Set     map[string]string
	Remove  []string
	Managed string
	// ManagedChanged says the annotation differs from Managed.
	ManagedChanged bool
}

// Empty reports whether nothing changes.
func (c PodChange) Empty() bool {
	return len(c.Set) == 0 && len(c.Remove) == 0 && !c.ManagedChanged
}

// Owns reports whether a label key is one the controller may set and
// remove on pods: a topology key or an allowlisted one.
func (p Policy) Owns(key string) bool {
	return slices.Contains(TopologyKeys, key) || slices.Contains(p.Allowlist, key)
}

// OwnedKeys are the label keys the controller may set on pods, sorted.
func (p Policy) OwnedKeys() []string {
	keys := slices.Concat(TopologyKeys, p.Allowlist)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// Diff compares a pod's labels and the managed-labels annotation with the desired
// labels. A label the driver set earlier (listed in the annotation), that
// it owns (owns says; the annotation is the pod's, so anyone who can edit
// the pod can list any key in it) and no longer wants is removed; a label
// it never set is overwritten when desired, never removed.
func Diff(pod *corev1.Pod, desired map[string]string, owns func(key string) bool) PodChange {
	current := pod.Annotations[v1alpha1.AnnotationManagedLabels]
	change := PodChange{Set: map[string]string{}, Managed: Managed(desired)}
	change.ManagedChanged = current != change.Managed
	for k, v := range desired {
		if cur, ok := pod.Labels[k]; !ok || cur != v {
			change.Set[k] = v
		}
	}
	for _, k := range ParseManaged(current) {
		if !owns(k) {
			continue
		}
		if _, want := desired[k]; !want {
			if _, has := pod.Labels[k]; has {
				change.Remove = append(change.Remove, k)
			}
		}
	}
	sort.Strings(change.Remove)
	return change
}

// MergePatch is the JSON merge patch that applies the change to a pod.
func (c PodChange) MergePatch() ([]byte, error) {
	labels := map[string]any{}
	for k, v := range c.Set {
		labels[k] = v
	}
	for _, k := range c.Remove {
		labels[k] = nil
	}
	var managed any = c.Managed
	if c.Managed == "" {
		managed = nil
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      labels,
		"annotations": map[string]any{v1alpha1.AnnotationManagedLabels: managed},
	}})
}

// Managed is the v1alpha1.AnnotationManagedLabels value for a set of labels.
func Managed(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	return strings.Join(keys, ",")
}

// ParseManaged splits an annotation value; anything that is not a
// qualified label key is ignored, so a user-edited annotation can only
// make the driver remove its own kind of labels.
func ParseManaged(v string) []string {
	var out []string
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if k != "" && len(validation.IsQualifiedName(k)) == 0 && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// NodeChange is how a Node's labels must change: nil values remove.
type NodeChange map[string]*string

// NodeLabels compares a Node's labels with what its device says: the
// swap behavior (left alone while unknown) and the offered capacity
// (removed when the node offers none). When the plugin no longer runs on
// the node, the labels are removed only if removeWithoutDriver is set.
func NodeLabels(n Node, removeWithoutDriver bool) NodeChange {
	change := NodeChange{}
	set := func(k, v string) {
		if n.Labels[k] != v {
			change[k] = &v
		}
	}
	remove := func(k string) {
		if _, ok := n.Labels[k]; ok {
			change[k] = nil
		}
	}
	if !n.RunsDriver() {
		if removeWithoutDriver {
			remove(v1alpha1.LabelSwapBehavior)
			remove(v1alpha1.LabelCapacity)
		}
		return change
	}
	if b := n.SwapBehavior(); b != "" {
		set(v1alpha1.LabelSwapBehavior, b)
	}
	if offer := n.OfferBytes(); offer > 0 {
		set(v1alpha1.LabelCapacity, resource.NewQuantity(offer, resource.BinarySI).String())
	} else {
		remove(v1alpha1.LabelCapacity)
	}
	return change
}

// NodeKeys are the labels the controller sets on Nodes (NodeLabels): the
// only ones RemoveNodeLabels removes.
func NodeKeys() []string { return []string{v1alpha1.LabelSwapBehavior, v1alpha1.LabelCapacity} }

// RemoveNodeLabels is the change that removes the controller's labels
// (NodeKeys) from a Node with these labels, as the driver's uninstall
// does; every other label stays.
func RemoveNodeLabels(nodeLabels map[string]string) NodeChange {
	change := NodeChange{}
	for _, k := range NodeKeys() {
		if _, ok := nodeLabels[k]; ok {
			change[k] = nil
		}
	}
	return change
}

// MergePatch is the JSON merge patch that applies the change to a Node.
func (c NodeChange) MergePatch() ([]byte, error) {
	labels := map[string]any{}
	for k, v := range c {
		if v == nil {
			labels[k] = nil
		} else {
			labels[k] = *v
		}
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
}

// ClaimNames are the names of the ResourceClaims a pod uses: those it
// names, those generated from its templates, and the one the scheduler
// made for its extended resources backed by DRA (each once the pod's
// status says so). Claims whose names are not known yet are left out.
func ClaimNames(pod *corev1.Pod) []string {
	var names []string
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err == nil && name != nil {
			names = append(names, *name)
		}
	}
	if e := pod.Status.ExtendedResourceClaimStatus; e != nil && e.ResourceClaimName != "" && !slices.Contains(names, e.ResourceClaimName) {
		names = append(names, e.ResourceClaimName)
	}
	return names
}

// UsesClaim reports whether the pod uses the claim: one of ClaimNames, or
// the claim the scheduler creates for the pod's extended resources backed
// by DRA, which it allocates and reserves before it writes the claim's
// name into the pod's status. The scheduler finds that claim as this does
// (k8s.io/kubernetes' dynamicresources plugin, findExtendedResourceClaim):
// annotated resourceapi.ExtendedResourceClaimAnnotation "true" and
// controlled by the pod (name and UID); the pod must also request an
// extended resource, so a claim of a namespace's user cannot make a pod
// that asks for none its own.
func UsesClaim(pod *corev1.Pod, claim *resourceapi.ResourceClaim) bool {
	if pod.Namespace != claim.Namespace {
		return false
	}
	if slices.Contains(ClaimNames(pod), claim.Name) {
		return true
	}
	if claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" || len(ExtendedResources(pod)) == 0 {
		return false
	}
	if e := pod.Status.ExtendedResourceClaimStatus; e != nil && e.ResourceClaimName != "" {
		return false // the pod's status names its claim, another one
	}
	for _, ref := range claim.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.APIVersion == "v1" && ref.Kind == "Pod" && ref.Name == pod.Name && ref.UID == pod.UID {
			return true
		}
	}
	return false
}

// ExtendedResources are the extended resources that the pod's containers
// (init containers included) request with a non-zero quantity and that a
// DeviceClass may back (the scheduler's IsDRAExtendedResourceName: a
// name outside the kubernetes.io namespace, or deviceclass.resource.kubernetes.io/<class>),
// with the largest quantity any one container requests, sorted by name.
// Limits count as requests (the API server defaults an extended
// resource's request to its limit).
func ExtendedResources(pod *corev1.Pod) []ExtendedResource {
	largest := map[corev1.ResourceName]int64{}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			for _, rl := range []corev1.ResourceList{list[i].Resources.Requests, list[i].Resources.Limits} {
				for name, q := range rl {
					if v := q.Value(); v > 0 && IsDRAExtendedResourceName(name) {
						largest[name] = max(largest[name], v)
					}
				}
			}
		}
	}
	out := make([]ExtendedResource, 0, len(largest))
	for _, name := range slices.Sorted(maps.Keys(largest)) {
		out = append(out, ExtendedResource{Name: name, Quantity: largest[name]})
	}
	return out
}

// ExtendedResource is an extended resource a pod requests: its name and
// the largest quantity one container asks for.
type ExtendedResource struct {
	Name     corev1.ResourceName
	Quantity int64
}

// IsDRAExtendedResourceName reports whether a DeviceClass can back the
// resource: a name with a domain outside kubernetes.io (an extended
// resource; a class names it in spec.extendedResourceName), or the
// implicit deviceclass.resource.kubernetes.io/<class>.
func IsDRAExtendedResourceName(name corev1.ResourceName) bool {
	n := string(name)
	if strings.HasPrefix(n, resourceapi.ResourceDeviceClassPrefix) {
		return true
	}
	return strings.Contains(n, "/") && !strings.Contains(n, corev1.ResourceDefaultNamespacePrefix) && !strings.HasPrefix(n, corev1.DefaultResourceRequestsPrefix)
}

// HasSwapDevice reports whether a claim has a dra.swap device allocated.
func HasSwapDevice(claim *resourceapi.ResourceClaim) bool {
	if claim == nil || claim.Status.Allocation == nil {
		return false
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == v1alpha1.DriverName {
			return true
		}
	}
	return false
}
