package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	swapwebhook "github.com/dra-driver-swap/dra-driver-swap/internal/controller/webhook"
)

// FieldManager names the controller's writes.
const FieldManager = swapwebhook.FieldManager

// PodReconciler copies the node's topology and swap labels onto selected
// pods, and removes the ones it set that the node no longer has.
type PodReconciler struct {
	Client client.Client
	Nodes  Nodes
	Pods   Pods
	Policy podlabels.Policy
	// Metrics counts the patches (may be nil).
	Metrics *Metrics
}

// Reconcile implements reconcile.Reconciler for one pod.
func (r *PodReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !wantsLabels(pod) {
		return reconcile.Result{}, nil
	}
	node, err := r.Nodes.Node(ctx, pod.Spec.NodeName)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !node.RunsDriver() {
		return reconcile.Result{}, nil
	}
	selected, err := r.Pods.Selected(ctx, pod)
	if err != nil || !selected {
		return reconcile.Result{}, err
	}
	change := podlabels.Diff(pod, r.Policy.PodLabels(node), r.Policy.Owns)
	if change.Empty() {
		return reconcile.Result{}, nil
	}
	patch, err := change.MergePatch()
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("build label patch for pod %s: %w", req.NamespacedName, err)
	}
	if err := r.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("patch labels of pod %s: %w", req.NamespacedName, err)
	}
	r.Metrics.podPatched()
	logger.V(2).Info("Updated pod labels", "pod", klog.KObj(pod), "node", pod.Spec.NodeName, "set", change.Set, "removed", change.Remove)
	return reconcile.Result{}, nil
}

// wantsLabels: bound, not finished, not being deleted.
func wantsLabels(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// NodeReconciler keeps node.kubernetes.io/swap-behavior and
// dra.swap/capacity on nodes where the kubelet plugin runs.
type NodeReconciler struct {
	Client client.Client
	Nodes  Nodes
	// RemoveWithoutDriver removes the labels from nodes whose plugin left.
	RemoveWithoutDriver bool
	Metrics             *Metrics
}

// Reconcile implements reconcile.Reconciler for one node.
func (r *NodeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	node, err := r.Nodes.Node(ctx, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node.Labels == nil && !node.RunsDriver() {
		return reconcile.Result{}, nil // no such node
	}
	change := podlabels.NodeLabels(node, r.RemoveWithoutDriver)
	if len(change) == 0 {
		return reconcile.Result{}, nil
	}
	patch, err := change.MergePatch()
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("build label patch for node %s: %w", req.Name, err)
	}
	obj := &corev1.Node{}
	obj.Name = req.Name
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("patch labels of node %s: %w", req.Name, err))
	}
	r.Metrics.nodePatched()
	logger.V(1).Info("Updated node labels", "node", req.Name, "patch", string(patch))
	return reconcile.Result{}, nil
}

// Options configure Setup.
type Options struct {
	Policy              podlabels.Policy
	RemoveWithoutDriver bool
	// Workers per reconciler.
	Workers int
	Metrics *Metrics
}

// Indexes registers the field indexes the reconcilers and webhooks use.
func Indexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &corev1.Pod{}, IndexNodeName, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	if err := idx.IndexField(ctx, &resourceapi.ResourceSlice{}, IndexNodeName, func(o client.Object) []string {
		s := o.(*resourceapi.ResourceSlice)
		if s.Spec.Driver == v1alpha1.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
			return []string{*s.Spec.NodeName}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index ResourceSlices by node: %w", err)
	}
	if err := idx.IndexField(ctx, &resourceapi.ResourceSlice{}, IndexDriver, sliceDriver); err != nil {
		return fmt.Errorf("index ResourceSlices by driver: %w", err)
	}
	return nil
}

// Setup registers both reconcilers with the manager (they run on the
// leader only). Call Indexes first.
func Setup(mgr ctrl.Manager, opts Options) error {
	c := mgr.GetClient()
	nodes := Nodes{Reader: c}
	pods := Pods{Reader: c, Policy: opts.Policy}
	workers := max(opts.Workers, 1)

	podsOnNode := func(ctx context.Context, node string) []reconcile.Request {
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.MatchingFields{IndexNodeName: node}); err != nil {
			klog.FromContext(ctx).Error(err, "List pods of node", "node", node)
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return reqs
	}
	sliceNode := func(o client.Object) string {
		s, ok := o.(*resourceapi.ResourceSlice)
		if !ok || s.Spec.Driver != v1alpha1.DriverName || s.Spec.NodeName == nil {
			return ""
		}
		return *s.Spec.NodeName
	}
	ourSlices := predicate.NewPredicateFuncs(func(o client.Object) bool { return sliceNode(o) != "" })
	nodeLabelsChanged := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !mapsEqual(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
		CreateFunc:  func(event.CreateEvent) bool { return true },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}

	b := ctrl.NewControllerManagedBy(mgr).Named("pod-labels")
	if opts.Policy.Selection == podlabels.SelectNamespaces {
		// A namespace that starts or stops matching the selector.
		b = b.Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			list := &corev1.PodList{}
			if err := c.List(ctx, list, client.InNamespace(o.GetName())); err != nil {
				klog.FromContext(ctx).Error(err, "List pods of namespace", "namespace", o.GetName())
				return nil
			}
			var reqs []reconcile.Request
			for i := range list.Items {
				if list.Items[i].Spec.NodeName != "" {
					reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				}
			}
			return reqs
		}), builder.WithPredicates(nodeLabelsChanged))
	}
	err := b.
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.(*corev1.Pod).Spec.NodeName != ""
		}))).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return podsOnNode(ctx, o.GetName())
		}), builder.WithPredicates(nodeLabelsChanged)).
		Watches(&resourceapi.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return podsOnNode(ctx, sliceNode(o))
		}), builder.WithPredicates(ourSlices)).
		Watches(&resourceapi.ResourceClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			claim := o.(*resourceapi.ResourceClaim)
			if !podlabels.HasSwapDevice(claim) {
				return nil
			}
			var reqs []reconcile.Request
			for _, ref := range claim.Status.ReservedFor {
				if ref.Resource == "pods" && ref.APIGroup == "" {
					reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: ref.Name}})
				}
			}
			return reqs
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&PodReconciler{Client: c, Nodes: nodes, Pods: pods, Policy: opts.Policy, Metrics: opts.Metrics})
	if err != nil {
		return fmt.Errorf("set up the pod label reconciler: %w", err)
	}

	err = ctrl.NewControllerManagedBy(mgr).Named("pending-swap").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			p := o.(*corev1.Pod)
			return p.Spec.NodeName == "" && (len(p.Spec.ResourceClaims) > 0 || len(podlabels.ExtendedResources(p)) > 0)
		}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&PendingExplainer{Client: c, Recorder: mgr.GetEventRecorder("dra-swap-controller")})
	if err != nil {
		return fmt.Errorf("set up the pending swap pod explainer: %w", err)
	}

	err = ctrl.NewControllerManagedBy(mgr).Named("node-labels").
		For(&corev1.Node{}, builder.WithPredicates(nodeLabelsChanged)).
		Watches(&resourceapi.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: sliceNode(o)}}}
		}), builder.WithPredicates(ourSlices)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&NodeReconciler{Client: c, Nodes: nodes, RemoveWithoutDriver: opts.RemoveWithoutDriver, Metrics: opts.Metrics})
	if err != nil {
		return fmt.Errorf("set up the node label reconciler: %w", err)
	}
	return nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
