package installcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
)

// Bounds of one run.
const (
	// MaxMaxNodes bounds Config.MaxNodes: two probes per node.
	MaxMaxNodes = 1000
	// listPage is the page size of every list, maxPages the most pages
	// one list reads (listPage × maxPages objects).
	listPage = 500
	maxPages = 200
	// repeatedFailures is how often the kubelet must report a failed
	// prepare or sandbox before the runner stops waiting for the probe:
	// it retries both, and one failure may be transient.
	repeatedFailures = 3
	// cleanupTimeout bounds the deletion of the probes.
	cleanupTimeout = 30 * time.Second
)

// Config is one run of the check.
type Config struct {
	// Namespace is where the probes run (the chart's).
	Namespace string
	// TestPodName and TestPodUID are the test pod's, which owns the
	// probes (the garbage collector deletes them with it); none outside
	// a pod.
	TestPodName string
	TestPodUID  types.UID
	// RunID labels the probes of this run (LabelRun).
	RunID string
	// Image is the driver's image, which the probes run.
	Image       string
	PullPolicy  corev1.PullPolicy
	PullSecrets []string
	// ClaimTemplate is the ResourceClaimTemplate of the probe's claim,
	// which requests RequestBytes.
	ClaimTemplate string
	RequestBytes  int64
	// PluginSelector selects the kubelet plugin's pods in Namespace.
	PluginSelector string
	// NodeSelector selects the nodes to check; when empty, every node
	// with a ResourceSlice of the driver or a kubelet plugin pod.
	NodeSelector string
	// MaxNodes bounds the nodes one run checks (the first by name).
	MaxNodes int
	// Timeout bounds the wait for the probes, Poll is how often they
	// are read.
	Timeout time.Duration
	Poll    time.Duration
}

// Validate checks that c can run.
func (c Config) Validate() error {
	var errs []error
	for name, v := range map[string]string{"namespace": c.Namespace, "image": c.Image, "claim template": c.ClaimTemplate, "run ID": c.RunID} {
		if v == "" {
			errs = append(errs, fmt.Errorf("no %s", name))
		}
	}
	if c.RequestBytes <= 0 {
		errs = append(errs, fmt.Errorf("swap request %d: want a positive number of bytes", c.RequestBytes))
	}
	if c.MaxNodes < 1 || c.MaxNodes > MaxMaxNodes {
		errs = append(errs, fmt.Errorf("max nodes %d: want 1 to %d", c.MaxNodes, MaxMaxNodes))
	}
	if c.Timeout <= 0 || c.Poll <= 0 {
		errs = append(errs, fmt.Errorf("timeout %v and poll interval %v: want both positive", c.Timeout, c.Poll))
	}
	if _, err := labels.Parse(c.PluginSelector); err != nil {
		errs = append(errs, fmt.Errorf("plugin selector: %w", err))
	}
	if _, err := labels.Parse(c.NodeSelector); err != nil {
		errs = append(errs, fmt.Errorf("node selector: %w", err))
	}
	return errors.Join(errs...)
}

// Result is a run's outcome.
type Result struct {
	// Verdicts are the checked nodes', by node name.
	Verdicts []Verdict
	// NotChecked are the nodes beyond Config.MaxNodes.
	NotChecked []string
	// RequestBytes is the probes' claim.
	RequestBytes int64
	MaxNodes     int
}

// Passed reports whether every checked node passed.
func (r Result) Passed() bool {
	for _, v := range r.Verdicts {
		if !v.Passed() {
			return false
		}
	}
	return len(r.Verdicts) > 0
}

// Write prints a line per node (PASS with what was seen, or FAIL with
// each problem), the nodes not checked and a last line with the count.
func (r Result) Write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "dra.swap helm test: %d node(s), a probe with a %s swap claim and one without on each\n", len(r.Verdicts), bytesString(r.RequestBytes))
	for _, v := range r.Verdicts {
		if v.Passed() {
			fmt.Fprintf(&b, "PASS %s: %s\n", v.Node, v.Summary)
			continue
		}
		for _, p := range v.Problems {
			fmt.Fprintf(&b, "FAIL %s: %s: %s\n", v.Node, p.Cause, p.Message)
		}
	}
	if len(r.NotChecked) > 0 {
		fmt.Fprintf(&b, "not checked (more than helmTest.maxNodes %d): %s\n", r.MaxNodes, eventmsg.List(r.NotChecked, ", ", 10, 1024))
	}
	fmt.Fprintf(&b, "%s\n", r.Outcome())
	_, err := io.WriteString(w, b.String())
	return err
}

// Outcome is the last line of Write.
func (r Result) Outcome() string {
	failed := 0
	for _, v := range r.Verdicts {
		if !v.Passed() {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Sprintf("FAILED: %d of %d node(s)", failed, len(r.Verdicts))
	}
	return fmt.Sprintf("PASSED: %d node(s)", len(r.Verdicts))
}

// Brief is a short form of the result, within limit bytes (a termination
// message): a line per node with its causes, and the outcome.
func (r Result) Brief(limit int) string {
	var lines []string
	for _, v := range r.Verdicts {
		if v.Passed() {
			lines = append(lines, "PASS "+v.Node)
			continue
		}
		var causes []string
		for _, p := range v.Problems {
			causes = append(causes, string(p.Cause))
		}
		lines = append(lines, "FAIL "+v.Node+": "+strings.Join(causes, ", "))
	}
	out := r.Outcome() + "\n"
	return out + eventmsg.List(lines, "\n", 0, limit-len(out))
}

// nodeState is what the runner tracks per node.
type nodeState struct {
	node           Node
	claim, noClaim string // the probes' pod names, "" when none
}

// Run checks the nodes: for each, it reads the driver's ResourceSlice,
// creates a probe with the claim (where the device can be allocated) and
// one without, pinned to the node, waits until both settled or the
// timeout, and diagnoses what it saw. It deletes the probes before it
// returns, also on failure. An error means the check could not run; a
// failed node is a verdict.
func Run(ctx context.Context, client kubernetes.Interface, cfg Config) (Result, error) {
	logger := klog.FromContext(ctx)
	res := Result{RequestBytes: cfg.RequestBytes, MaxNodes: cfg.MaxNodes}
	if err := cfg.Validate(); err != nil {
		return res, fmt.Errorf("configuration: %w", err)
	}
	devices, err := listDevices(ctx, client)
	if err != nil {
		return res, err
	}
	plugins, err := listPluginPods(ctx, client, cfg)
	if err != nil {
		return res, err
	}
	names, err := nodesToCheck(ctx, client, cfg, devices, plugins)
	if err != nil {
		return res, err
	}
	if len(names) == 0 {
		if cfg.NodeSelector != "" {
			return res, fmt.Errorf("no node matches the node selector %q (helmTest.nodeSelector)", cfg.NodeSelector)
		}
		return res, fmt.Errorf("no node to check: no node has a ResourceSlice of driver %s or a kubelet plugin pod (%s in namespace %s): is the DaemonSet scheduled anywhere?",
			v1alpha1.DriverName, cfg.PluginSelector, cfg.Namespace)
	}
	if len(names) > cfg.MaxNodes {
		res.NotChecked = names[cfg.MaxNodes:]
		names = names[:cfg.MaxNodes]
	}
	logger.Info("Checking nodes", "nodes", names, "notChecked", len(res.NotChecked), "swapRequest", bytesString(cfg.RequestBytes))

	states := make([]*nodeState, 0, len(names))
	var created []string
	defer func() { deleteProbes(ctx, client, cfg, created) }()
	for _, name := range names {
		s := &nodeState{node: Node{Name: name, RequestBytes: cfg.RequestBytes, Namespace: cfg.Namespace, Timeout: cfg.Timeout}}
		if d, ok := devices[name]; ok {
			s.node.Device, s.node.SliceName = d.device, d.slice
		}
		s.node.PluginPod = plugins[name]
		states = append(states, s)
		if s.node.Device == nil {
			continue
		}
		kinds := []bool{false}
		if ok, _ := Allocatable(s.node.Device, cfg.RequestBytes); ok {
			kinds = append(kinds, true)
		}
		for _, withClaim := range kinds {
			p, err := client.CoreV1().Pods(cfg.Namespace).Create(ctx, ProbePod(cfg, name, withClaim), metav1.CreateOptions{})
			probe, podName := &s.node.NoClaim, &s.noClaim
			if withClaim {
				probe, podName = &s.node.Claim, &s.claim
			}
			if err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				probe.CreateError = err.Error()
				probe.Settled = true
				continue
			}
			probe.Pod, *podName = p, p.Name
			created = append(created, p.Name)
		}
	}

	waitCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var observed bool
	var observeErr error
	err = wait.PollUntilContextCancel(waitCtx, cfg.Poll, true, func(ctx context.Context) (bool, error) {
		if observeErr = observe(ctx, client, cfg, states); observeErr != nil {
			logger.Error(observeErr, "Reading the probes; retrying")
			return false, nil //nolint:nilerr // retried until the timeout; observeErr is reported after the poll
		}
		observed = true
		for _, s := range states {
			if !s.node.Claim.Settled && s.claim != "" || !s.node.NoClaim.Settled && s.noClaim != "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && ctx.Err() != nil {
		return res, ctx.Err()
	}
	if !observed && len(created) > 0 {
		// Not one read: what the probes did is unknown, not timed out.
		return res, fmt.Errorf("reading the probes for %v: %w", cfg.Timeout, observeErr)
	}
	for _, s := range states {
		res.Verdicts = append(res.Verdicts, Diagnose(s.node))
	}
	return res, nil
}

// device is a node's swap device and the slice holding it.
type device struct {
	device     *resourceapi.Device
	slice      string
	generation int64
}

// listDevices reads the driver's slices: per node, the swap device of the
// pool named after it (the newest pool generation).
func listDevices(ctx context.Context, client kubernetes.Interface) (map[string]device, error) {
	out := map[string]device{}
	opts := metav1.ListOptions{FieldSelector: resourceapi.ResourceSliceSelectorDriver + "=" + v1alpha1.DriverName, Limit: listPage}
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("listing ResourceSlices of driver %s: more than %d", v1alpha1.DriverName, listPage*maxPages)
		}
		list, err := client.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing ResourceSlices of driver %s: %w", v1alpha1.DriverName, err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			node := ptr.Deref(s.Spec.NodeName, "")
			if s.Spec.Driver != v1alpha1.DriverName || node == "" || s.Spec.Pool.Name != node {
				continue
			}
			if have, ok := out[node]; ok && have.generation > s.Spec.Pool.Generation {
				continue
			}
			for j := range s.Spec.Devices {
				if s.Spec.Devices[j].Name == v1alpha1.DeviceName {
					out[node] = device{device: &s.Spec.Devices[j], slice: s.Name, generation: s.Spec.Pool.Generation}
				}
			}
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// listPluginPods maps each node to the kubelet plugin's newest pod there.
func listPluginPods(ctx context.Context, client kubernetes.Interface, cfg Config) (map[string]*corev1.Pod, error) {
	out := map[string]*corev1.Pod{}
	opts := metav1.ListOptions{LabelSelector: cfg.PluginSelector, Limit: listPage}
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("listing the kubelet plugin's pods: more than %d", listPage*maxPages)
		}
		list, err := client.CoreV1().Pods(cfg.Namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the kubelet plugin's pods (%s) in %s: %w", cfg.PluginSelector, cfg.Namespace, err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.Spec.NodeName == "" {
				continue
			}
			if have, ok := out[p.Spec.NodeName]; ok && have.CreationTimestamp.After(p.CreationTimestamp.Time) {
				continue
			}
			out[p.Spec.NodeName] = p
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// nodesToCheck are the nodes NodeSelector selects or, without one, the
// nodes with a slice or a plugin pod; sorted by name.
func nodesToCheck(ctx context.Context, client kubernetes.Interface, cfg Config, devices map[string]device, plugins map[string]*corev1.Pod) ([]string, error) {
	if cfg.NodeSelector == "" {
		names := slices.Collect(maps.Keys(devices))
		for n := range plugins {
			if _, ok := devices[n]; !ok {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		return names, nil
	}
	var names []string
	opts := metav1.ListOptions{LabelSelector: cfg.NodeSelector, Limit: listPage}
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("listing nodes (%s): more than %d", cfg.NodeSelector, listPage*maxPages)
		}
		list, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing nodes (%s): %w", cfg.NodeSelector, err)
		}
		for _, n := range list.Items {
			names = append(names, n.Name)
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	slices.Sort(names)
	return names, nil
}

// observe reads the run's probes and their events and marks those that
// settled.
func observe(ctx context.Context, client kubernetes.Interface, cfg Config, states []*nodeState) error {
	pods, err := client.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelRun + "=" + cfg.RunID})
	if err != nil {
		return fmt.Errorf("listing the probes: %w", err)
	}
	byName := map[string]*corev1.Pod{}
	uids := map[types.UID]bool{}
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
		uids[pods.Items[i].UID] = true
	}
	events := map[types.UID][]corev1.Event{}
	opts := metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod", Limit: listPage}
	for page := 0; ; page++ {
		if page == maxPages {
			return fmt.Errorf("listing pod events in %s: more than %d", cfg.Namespace, listPage*maxPages)
		}
		list, err := client.CoreV1().Events(cfg.Namespace).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("listing the probes' events: %w", err)
		}
		for _, e := range list.Items {
			if uids[e.InvolvedObject.UID] {
				events[e.InvolvedObject.UID] = append(events[e.InvolvedObject.UID], e)
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	for _, s := range states {
		for _, pr := range []struct {
			name  string
			probe *Probe
		}{{s.claim, &s.node.Claim}, {s.noClaim, &s.node.NoClaim}} {
			if pr.name == "" || pr.probe.Settled {
				continue
			}
			p, ok := byName[pr.name]
			if !ok {
				pr.probe.CreateError = "the probe pod " + pr.name + " disappeared"
				pr.probe.Pod, pr.probe.Settled = nil, true
				continue
			}
			ev := events[p.UID]
			slices.SortStableFunc(ev, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
			pr.probe.Pod, pr.probe.Events = p, ev
			pr.probe.Settled = settled(p, ev)
		}
	}
	return nil
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// settled reports whether a probe will not change any more for the
// check: it ended, its container cannot run, the scheduler gave up on it,
// the hook refused it, or the kubelet failed its claim's prepare or its
// sandbox repeatedly.
func settled(p *corev1.Pod, events []corev1.Event) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Terminated != nil {
			return true
		}
		if w := s.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			return true
		}
	}
	counts := map[string]int32{}
	for _, e := range events {
		counts[e.Reason] += max(e.Count, 1)
	}
	return counts["SwapNotApplied"] > 0 || counts["FailedResourceClaimCreation"] > 0 ||
		counts["FailedPrepareDynamicResources"] >= repeatedFailures || counts["FailedCreatePodSandBox"] >= repeatedFailures
}

// deleteProbes deletes the probes, also when ctx is done; the test pod's
// ownerReference is the fallback for what fails here.
func deleteProbes(ctx context.Context, client kubernetes.Interface, cfg Config, names []string) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	for _, name := range names {
		err := client.CoreV1().Pods(cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Deleting a probe; the garbage collector deletes it with the test pod", "pod", klog.KRef(cfg.Namespace, name))
		}
	}
	if len(names) > 0 {
		logger.V(2).Info("Deleted the probes", "count", len(names))
	}
}

// ParseQuantity reads a swap request such as 1Mi as bytes.
func ParseQuantity(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("swap request %q: %w", s, err)
	}
	v, ok := q.AsInt64()
	if !ok || v <= 0 {
		return 0, fmt.Errorf("swap request %q: want a positive whole number of bytes", s)
	}
	return v, nil
}
