package scale

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/test/noopdriver"
)

// Mode is what the pods of one measurement claim.
type Mode struct {
	Name string
	// Driver is the driver of the pods' claims ("" for pods without one),
	// the name of its DeviceClass too; Capacity is the consumable
	// capacity the claims request.
	Driver   string
	Capacity resourceapi.QualifiedName
	// ControllerQPS, when set, restarts the controller with that
	// --kube-api-qps (and twice the burst) before the mode; 0 keeps the
	// chart's 50 QPS, burst 100.
	ControllerQPS int
}

// Modes are the measurements, in the order they run: pods without a
// claim, with a claim of the no-op driver (the DRA floor), with a swap
// claim of the same capacity shape, and again with the controller's client
// allowed 1000 QPS: the reservation webhook labels each pod with a patch of
// the controller's client in the claim status update that precedes the
// binding, so the chart's 50 QPS bounds how fast swap pods are bound.
func Modes() []Mode {
	return []Mode{
		{Name: "no claim"},
		{Name: "no-op claim", Driver: noopdriver.DriverName, Capacity: noopdriver.CapacityName},
		{Name: "swap claim", Driver: v1alpha1.DriverName, Capacity: v1alpha1.CapacitySwap},
		{Name: "swap claim, controller at 1000 QPS", Driver: v1alpha1.DriverName, Capacity: v1alpha1.CapacitySwap, ControllerQPS: 1000},
	}
}

func (m Mode) namespace() string {
	return "scale-" + strings.ToLower(strings.NewReplacer(" ", "-", ",", "").Replace(m.Name))
}

// Config is one run: Nodes simulated nodes, Pods pods per mode.
type Config struct {
	Nodes, Pods int
}

// ModeResult is what one mode measured.
type ModeResult struct {
	Mode Mode
	Pods int
	// Throughput is pods bound per second, from the first binding to the
	// last as a pod watch sees them.
	Throughput float64
	// AttemptP50 and AttemptP99 are the quantiles of the scheduler's
	// scheduler_scheduling_attempt_duration_seconds{result="scheduled"}
	// (seconds; from buckets that double: ±50 %).
	AttemptP50, AttemptP99 float64
	// Attempts are scheduler_schedule_attempts_total by result.
	Attempts map[string]float64
	// SchedulerCPU and SchedulerPeakRSS: the kube-scheduler process,
	// started for this mode, from its start to the last pod's binding.
	SchedulerCPU     time.Duration
	SchedulerPeakRSS int64
	// NodesUsed is how many nodes the pods were bound to, MostOnANode
	// the most pods on one of them.
	NodesUsed, MostOnANode int
	// Controller: its process's CPU time and API requests
	// (rest_client_requests_total) while the mode's pods were scheduled
	// and labeled, its RSS at the end and its peak RSS so far.
	ControllerCPU          time.Duration
	ControllerRSS, PeakRSS int64
	ControllerRequests     float64
	// Busy is how many webhook reviews the controller answered 429, and
	// Deferred how many pods its webhooks left to the reconciler, by
	// reason (dra_swap_controller_webhook_labels_deferred_total).
	Busy                   float64
	DeferredNotCached      float64
	DeferredRelabel        float64
	LabelP50, LabelP99     time.Duration
	Labeled, LabeledAtBind int
	Violations             []string
	SchedulingWall         time.Duration
}

// Result is one run at one scale.
type Result struct {
	Config Config
	Modes  []ModeResult
	// Serialized (protobuf, as etcd holds them) sizes of one node's
	// objects at the end: its Node (with the controller's labels), its
	// dra.swap slice and its no-op slice.
	NodeBytes, SwapSliceBytes, NoopSliceBytes int
	// SwapChange is the time from a node's slice update (its offer grows)
	// to the binding of a pod that fits only after it, as a watch sees it.
	SwapChange time.Duration
	// Largest event note and pod condition message seen, and the writes
	// the scheduler's and controller's logs say the API server refused as
	// invalid.
	MaxEventNote        int
	MaxEventReason      string
	Events              int
	MaxConditionMessage int
	RefusedWrites       int
	// Setup is the time to start the cluster and create the nodes and
	// slices, Total the whole run's.
	Setup, Total time.Duration
}

// Run builds a cluster of cfg.Nodes simulated nodes and measures each mode
// with cfg.Pods pods, then the swap change and the messages. Each mode's
// pods are created before the scheduler starts (so creation does not
// limit throughput) and deleted after it stopped, but the last mode's.
func Run(ctx context.Context, t testing.TB, cfg Config) (Result, error) {
	res := Result{Config: cfg}
	start := time.Now()
	c, err := StartCluster(ctx, t, cfg.Nodes)
	if err != nil {
		return res, err
	}
	res.Setup = time.Since(start)
	modes := Modes()
	swapChanged := false
	for i, m := range modes {
		if m.ControllerQPS > 0 {
			if err := c.runController(ctx, m.ControllerQPS); err != nil {
				return res, err
			}
		}
		mr, err := c.runMode(ctx, m, cfg.Pods)
		res.Modes = append(res.Modes, mr)
		if err != nil {
			return res, fmt.Errorf("%s: %w", m.Name, err)
		}
		t.Logf("%d nodes, %s: %d pods at %.1f pods/s, attempt p99 %.1f ms", cfg.Nodes, m.Name, mr.Pods, mr.Throughput, mr.AttemptP99*1000)
		if m.Driver == v1alpha1.DriverName && !swapChanged {
			swapChanged = true
			if res.SwapChange, res.MaxConditionMessage, err = c.swapChange(ctx, m); err != nil {
				return res, fmt.Errorf("swap change: %w", err)
			}
		}
		c.stopScheduler()
		if i < len(modes)-1 {
			if err := c.cleanup(ctx, m); err != nil {
				return res, err
			}
		}
	}
	if err := c.messages(ctx, &res); err != nil {
		return res, err
	}
	err = c.sizes(ctx, &res)
	res.Total = time.Since(start)
	return res, err
}

// createPods creates n pods in m's namespace and, for a mode with a
// claim, each pod's claim from the namespace's template "dev" as the
// controller-manager's resourceclaim controller does (owned by the pod,
// named in its status), which does not run here.
func (c *Cluster) createPods(ctx context.Context, m Mode, n int) error {
	ns := m.namespace()
	if err := c.namespace(ctx, ns); err != nil {
		return err
	}
	var tmpl *resourceapi.ResourceClaimTemplate
	if m.Driver != "" {
		var err error
		if tmpl, err = c.template(ctx, m, "dev", requestBytes); err != nil {
			return err
		}
	}
	return parallel(ctx, n, func(ctx context.Context, i int) error {
		return c.createPod(ctx, ns, fmt.Sprintf("pod-%05d", i), tmpl)
	})
}

func (c *Cluster) template(ctx context.Context, m Mode, name string, request int64) (*resourceapi.ResourceClaimTemplate, error) {
	tmpl, err := c.client.ResourceV1().ResourceClaimTemplates(m.namespace()).Create(ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: m.Driver,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					m.Capacity: *resource.NewQuantity(request, resource.BinarySI),
				}},
			}}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create ResourceClaimTemplate %s/%s: %w", m.namespace(), name, err)
	}
	return tmpl, nil
}

// createPod creates a pod, with a claim from tmpl unless it is nil.
func (c *Cluster) createPod(ctx context.Context, ns, name string, tmpl *resourceapi.ResourceClaimTemplate) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "scale"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.invalid/app:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	if tmpl != nil {
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "dev"}}
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To(tmpl.Name)}}
	}
	pod, err := c.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	if tmpl == nil {
		return nil
	}
	claim, err := c.client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name + "-dev",
			Annotations: map[string]string{"resource.kubernetes.io/pod-claim-name": "dev"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: tmpl.Spec.Spec,
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the claim of pod %s/%s: %w", ns, name, err)
	}
	pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "dev", ResourceClaimName: ptr.To(claim.Name)}}
	if _, err := c.client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("name the claim in the status of pod %s/%s: %w", ns, name, err)
	}
	return nil
}

// tracker sees a namespace's pods through an informer: when each is first
// seen bound and labeled, and it marks bound pods Running as their kubelet
// would.
type tracker struct {
	mu            sync.Mutex
	bound         map[string]time.Time
	labeled       map[string]time.Time
	labeledAtBind int
	toRun         chan *corev1.Pod
	running       int
	runErr        error
}

func (tr *tracker) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	tr.mu.Lock()
	_, hasLabels := pod.Labels[podlabels.Hostname]
	if _, seen := tr.labeled[pod.Name]; hasLabels && !seen {
		tr.labeled[pod.Name] = now
	}
	_, seen := tr.bound[pod.Name]
	bound := pod.Spec.NodeName != "" && !seen
	if bound {
		tr.bound[pod.Name] = now
		if hasLabels {
			tr.labeledAtBind++
		}
	}
	tr.mu.Unlock()
	if bound {
		// Not under mu: the kubelets take it when they are done.
		tr.toRun <- pod
	}
}

func (tr *tracker) counts() (bound, labeled, running int, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.bound), len(tr.labeled), tr.running, tr.runErr
}

// watchPods starts a tracker on ns (the pods matching selector, a field
// selector) and goroutines marking bound pods Running; it ends with ctx.
func (c *Cluster) watchPods(ctx context.Context, ns, selector string) (*tracker, error) {
	tr := &tracker{bound: map[string]time.Time{}, labeled: map[string]time.Time{}, toRun: make(chan *corev1.Pod, 1024)}
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	informer := factory.Core().V1().Pods().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    tr.observe,
		UpdateFunc: func(_, obj any) { tr.observe(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watch pods of %s: %w", ns, err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("pods of %s: %v cache not synced", ns, typ)
		}
	}
	const kubelets = 4
	for range kubelets {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case pod := <-tr.toRun:
					err := c.markRunning(ctx, pod)
					tr.mu.Lock()
					tr.running++
					if err != nil && tr.runErr == nil && ctx.Err() == nil {
						tr.runErr = err
					}
					tr.mu.Unlock()
				}
			}
		}()
	}
	return tr, nil
}

// markRunning writes the status a kubelet would once the pod's container
// started.
func (c *Cluster) markRunning(ctx context.Context, pod *corev1.Pod) error {
	for attempt := 0; ; attempt++ {
		p := pod.DeepCopy()
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &now
		p.Status.HostIP = "10.64.0.1"
		p.Status.PodIP = fmt.Sprintf("10.128.%d.%d", attempt, len(p.Name))
		for _, typ := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
			setCondition(&p.Status, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "app", Image: "registry.invalid/app:1", ImageID: "registry.invalid/app@sha256:0", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}}
		_, err := c.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) || attempt == 4 {
			if err != nil {
				return fmt.Errorf("mark pod %s/%s running: %w", p.Namespace, p.Name, err)
			}
			return nil
		}
		if pod, err = c.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("mark pod %s/%s running: %w", p.Namespace, p.Name, err)
		}
	}
}

func setCondition(s *corev1.PodStatus, cond corev1.PodCondition) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == cond.Type {
			s.Conditions[i] = cond
			return
		}
	}
	s.Conditions = append(s.Conditions, cond)
}

// runMode creates the mode's pods, starts the scheduler, waits until every
// pod is bound, marked Running and (swap claims) labeled, and measures.
// The scheduler keeps running.
func (c *Cluster) runMode(ctx context.Context, m Mode, n int) (ModeResult, error) {
	res := ModeResult{Mode: m, Pods: n}
	if err := c.createPods(ctx, m, n); err != nil {
		return res, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr, err := c.watchPods(wctx, m.namespace(), "")
	if err != nil {
		return res, err
	}
	before, err := c.controller.usage()
	if err != nil {
		return res, err
	}
	ctrlBefore, err := scrape(ctx, c.controllerMetrics)
	if err != nil {
		return res, fmt.Errorf("controller metrics: %w", err)
	}
	if err := c.startScheduler(ctx); err != nil {
		return res, err
	}
	start := time.Now()
	wantLabels := 0
	if m.Driver == v1alpha1.DriverName {
		wantLabels = n
	}
	// Generous: the harness asserts that every pod gets there, not when.
	limit := 5*time.Minute + time.Duration(n)*100*time.Millisecond
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, limit, true, func(context.Context) (bool, error) {
		bound, labeled, running, runErr := tr.counts()
		if runErr != nil {
			return false, runErr
		}
		if c.scheduler.Exited() {
			return false, fmt.Errorf("kube-scheduler exited: %w (log %s)", c.scheduler.Err(), c.scheduler.Log())
		}
		if c.controller.Exited() {
			return false, fmt.Errorf("dra-swap-controller exited: %w (log %s)", c.controller.Err(), c.controller.Log())
		}
		return bound >= n && running >= n && labeled >= wantLabels, nil
	})
	res.SchedulingWall = time.Since(start)
	tr.mu.Lock()
	bound := slices.SortedFunc(maps.Values(tr.bound), time.Time.Compare)
	var labelDelays []time.Duration
	for name, b := range tr.bound {
		if l, ok := tr.labeled[name]; ok {
			labelDelays = append(labelDelays, max(0, l.Sub(b)))
		}
	}
	res.Labeled, res.LabeledAtBind = len(tr.labeled), tr.labeledAtBind
	tr.mu.Unlock()
	if err != nil {
		bound, labeled, running, _ := tr.counts()
		return res, fmt.Errorf("after %v: %d of %d pods bound, %d running, %d labeled (%s): %w", res.SchedulingWall.Round(time.Second), bound, n, running, labeled, c.unbound(ctx, m), err)
	}
	if len(bound) > 1 {
		res.Throughput = float64(len(bound)-1) / bound[len(bound)-1].Sub(bound[0]).Seconds()
	}
	slices.Sort(labelDelays)
	res.LabelP50, res.LabelP99 = quantile(labelDelays, 0.5), quantile(labelDelays, 0.99)

	after, err := c.controller.usage()
	if err != nil {
		return res, err
	}
	res.ControllerCPU, res.ControllerRSS, res.PeakRSS = after.CPU-before.CPU, after.RSS, after.PeakRSS
	ctrlAfter, err := scrape(ctx, c.controllerMetrics)
	if err != nil {
		return res, fmt.Errorf("controller metrics: %w", err)
	}
	res.ControllerRequests = sum(ctrlAfter, "rest_client_requests_total", nil) - sum(ctrlBefore, "rest_client_requests_total", nil)
	delta := func(name string, labels map[string]string) float64 {
		return sum(ctrlAfter, name, labels) - sum(ctrlBefore, name, labels)
	}
	res.Busy = delta("controller_runtime_webhook_requests_total", map[string]string{"code": "429"})
	res.DeferredNotCached = delta("dra_swap_controller_webhook_labels_deferred_total", map[string]string{"reason": "not-cached"})
	res.DeferredRelabel = delta("dra_swap_controller_webhook_labels_deferred_total", map[string]string{"reason": "relabel-budget"})

	su, err := c.scheduler.usage()
	if err != nil {
		return res, err
	}
	res.SchedulerCPU, res.SchedulerPeakRSS = su.CPU, su.PeakRSS
	sched, err := scrape(ctx, c.schedulerURL+"/metrics")
	if err != nil {
		return res, fmt.Errorf("scheduler metrics: %w", err)
	}
	h, err := histogramOf(sched, "scheduler_scheduling_attempt_duration_seconds", map[string]string{"result": "scheduled"})
	if err != nil {
		return res, err
	}
	res.AttemptP50, res.AttemptP99 = h.quantile(0.5), h.quantile(0.99)
	res.Attempts = map[string]float64{}
	for _, r := range []string{"scheduled", "unschedulable", "error"} {
		res.Attempts[r] = sum(sched, "scheduler_schedule_attempts_total", map[string]string{"result": r})
	}
	snap, err := c.snapshot(ctx, m)
	if err != nil {
		return res, err
	}
	res.Violations = check(snap)
	perNode := map[string]int{}
	for _, p := range snap.pods {
		if p.Spec.NodeName != "" {
			perNode[p.Spec.NodeName]++
		}
	}
	res.NodesUsed = len(perNode)
	for _, n := range perNode {
		res.MostOnANode = max(res.MostOnANode, n)
	}
	return res, nil
}

// quantile of sorted durations (nearest rank); 0 when empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// snapshot lists what check needs.
func (c *Cluster) snapshot(ctx context.Context, m Mode) (snapshot, error) {
	s := snapshot{mode: m}
	pods, err := c.client.CoreV1().Pods(m.namespace()).List(ctx, metav1.ListOptions{LabelSelector: "app=scale"})
	if err != nil {
		return s, fmt.Errorf("list pods: %w", err)
	}
	claims, err := c.client.ResourceV1().ResourceClaims(m.namespace()).List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list claims: %w", err)
	}
	rs, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list ResourceSlices: %w", err)
	}
	nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list nodes: %w", err)
	}
	s.pods, s.claims, s.slices, s.nodes = pods.Items, claims.Items, rs.Items, nodes.Items
	return s, nil
}

// cleanup deletes the mode's pods and claims (a claim's finalizer, which
// the controller-manager would remove, first).
func (c *Cluster) cleanup(ctx context.Context, m Mode) error {
	ns := m.namespace()
	pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods of %s: %w", ns, err)
	}
	if err := parallel(ctx, len(pods.Items), func(ctx context.Context, i int) error {
		err := c.client.CoreV1().Pods(ns).Delete(ctx, pods.Items[i].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s/%s: %w", ns, pods.Items[i].Name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	claims, err := c.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list claims of %s: %w", ns, err)
	}
	return parallel(ctx, len(claims.Items), func(ctx context.Context, i int) error {
		name := claims.Items[i].Name
		if len(claims.Items[i].Finalizers) > 0 {
			if _, err := c.client.ResourceV1().ResourceClaims(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("remove the finalizers of claim %s/%s: %w", ns, name, err)
			}
		}
		if err := c.client.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete claim %s/%s: %w", ns, name, err)
		}
		return nil
	})
}

// swapChange measures how long a node's swap change takes to reach the
// scheduler: a pod whose claim asks for more than any node offers waits
// (Unschedulable, and the controller's SwapUnavailable event), then node 0
// republishes its slice with a larger offer and the pod is bound there.
// It returns that time and the length of the pod's PodScheduled message.
func (c *Cluster) swapChange(ctx context.Context, m Mode) (time.Duration, int, error) {
	ns := m.namespace()
	tmpl, err := c.template(ctx, m, "big", 2*offerBytes)
	if err != nil {
		return 0, 0, err
	}
	const name = "grow"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr, err := c.watchPods(wctx, ns, "metadata.name="+name)
	if err != nil {
		return 0, 0, err
	}
	if err := c.createPod(ctx, ns, name, tmpl); err != nil {
		return 0, 0, err
	}
	var message int
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
		}
		if pod.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s/%s asks for %d bytes of swap but was bound to %s", ns, name, 2*offerBytes, pod.Spec.NodeName)
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable {
				message = len(cond.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("pod %s/%s not unschedulable: %w", ns, name, err)
	}
	// The controller explains the wait (at most every 5s per pod).
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + controller.ReasonSwapUnavailable})
		if err != nil {
			return false, fmt.Errorf("list events: %w", err)
		}
		return len(events.Items) > 0, nil
	}); err != nil {
		return 0, 0, fmt.Errorf("no %s event on pod %s/%s: %w", controller.ReasonSwapUnavailable, ns, name, err)
	}
	start := time.Now()
	if err := c.setOffer(ctx, 0, 4*offerBytes); err != nil {
		return 0, 0, err
	}
	var took time.Duration
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		b, ok := tr.bound[name]
		took = b.Sub(start)
		return ok, nil
	}); err != nil {
		return 0, 0, fmt.Errorf("pod %s/%s not bound after node %s's offer grew: %w", ns, name, nodeName(0), err)
	}
	pod, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	if pod.Spec.NodeName != nodeName(0) {
		return 0, 0, fmt.Errorf("pod %s/%s bound to %s, the only node that fits is %s", ns, name, pod.Spec.NodeName, nodeName(0))
	}
	return took, message, nil
}

// messages finds the largest event note, and counts the writes the
// scheduler's and the controller's logs say were refused as invalid.
func (c *Cluster) messages(ctx context.Context, res *Result) error {
	var cont string
	for page := 0; page < 1000; page++ {
		events, err := c.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return fmt.Errorf("list events: %w", err)
		}
		for _, e := range events.Items {
			res.Events++
			if len(e.Message) > res.MaxEventNote {
				res.MaxEventNote, res.MaxEventReason = len(e.Message), e.Reason
			}
		}
		if cont = events.Continue; cont == "" {
			break
		}
	}
	for _, p := range []*process{c.controller} {
		n, err := refused(p.Log())
		if err != nil {
			return err
		}
		res.RefusedWrites += n
	}
	n, err := refused(c.dir + "/kube-scheduler.log")
	res.RefusedWrites += n
	return err
}

// refused counts the log lines that tell of a write refused as invalid or
// too large.
func refused(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read log: %w", err)
	}
	n := 0
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, "is invalid:") || strings.Contains(line, "Too long") || strings.Contains(line, "must have at most") ||
			strings.Contains(line, "Request entity too large") {
			n++
		}
	}
	return n, nil
}

// sizes measures one node's stored objects (protobuf, as etcd holds them).
func (c *Cluster) sizes(ctx context.Context, res *Result) error {
	node := nodeName(0)
	for _, o := range []struct {
		path string
		into *int
	}{
		{"/api/v1/nodes/" + node, &res.NodeBytes},
		{"/apis/resource.k8s.io/v1/resourceslices/" + node + "-" + v1alpha1.DriverName, &res.SwapSliceBytes},
		{"/apis/resource.k8s.io/v1/resourceslices/" + node + "-noop", &res.NoopSliceBytes},
	} {
		body, err := c.client.CoreV1().RESTClient().Get().AbsPath(o.path).SetHeader("Accept", "application/vnd.kubernetes.protobuf").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("GET %s as protobuf: %w", o.path, err)
		}
		*o.into = len(body)
	}
	return nil
}

func runtimeRaw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

// unbound describes the first pod of m that is not bound, for an error.
func (c *Cluster) unbound(ctx context.Context, m Mode) string {
	// Also after ctx ended (the wait's timeout).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	pods, err := c.client.CoreV1().Pods(m.namespace()).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			return fmt.Sprintf("pod %s unbound, conditions %+v", p.Name, p.Status.Conditions)
		}
	}
	return fmt.Sprintf("all %d pods bound", len(pods.Items))
}
