package installcheck

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
)

// Cause names what is wrong on a node. docs/troubleshooting.md ("helm
// test") has an entry for each.
type Cause string

const (
	// CauseNoSlice: no ResourceSlice of the driver for the node.
	CauseNoSlice Cause = "no ResourceSlice"
	// CauseNoUsableSwap: the node's swap device cannot be allocated (no
	// usable swap, overcommitted, or tainted).
	CauseNoUsableSwap Cause = "no usable swap"
	// CauseSwapBehavior: the kubelet's swapBehavior is not NoSwap.
	CauseSwapBehavior Cause = "kubelet swapBehavior not NoSwap"
	// CauseNoCDI: the runtime did not apply the claim's CDI device.
	CauseNoCDI Cause = "runtime without CDI"
	// CauseHookNotRun: the runtime did not run the driver's OCI hook.
	CauseHookNotRun Cause = "hook not run"
	// CauseHookRefused: the hook ran and refused the container.
	CauseHookRefused Cause = "hook refused"
	// CausePrepareFailed: the kubelet plugin failed to prepare the claim.
	CausePrepareFailed Cause = "prepare failed"
	// CauseWrongLimit: a limit differs from what the claim grants.
	CauseWrongLimit Cause = "wrong limit"
	// CauseNotScheduled: a probe was not scheduled onto the node.
	CauseNotScheduled Cause = "probe not scheduled"
	// CauseProbeFailed: a probe pod failed for another reason.
	CauseProbeFailed Cause = "probe failed"
	// CauseTimeout: a probe did not finish in time.
	CauseTimeout Cause = "timed out"
)

// ToleratedTaints are the device taints the test's claim tolerates (the
// chart's ResourceClaimTemplate lists the same, a test checks): pressure
// steers new claims elsewhere but the node still applies limits, which is
// what the test checks.
var ToleratedTaints = []string{v1alpha1.TaintMemoryPressure, v1alpha1.TaintSwapFull}

// Problem is one thing wrong on a node.
type Problem struct {
	Cause   Cause
	Message string
}

// Verdict is the outcome for one node: no problems is a pass, and Summary
// then says what was seen.
type Verdict struct {
	Node     string
	Problems []Problem
	Summary  string
	// behavior is the slice's swapBehavior and behaviorSeen what showed
	// that the kubelet does not run NoSwap: one problem, given once.
	behavior     string
	behaviorSeen []string
}

// Passed reports whether the node passed.
func (v Verdict) Passed() bool { return len(v.Problems) == 0 }

// Probe is one probe pod as the runner last saw it.
type Probe struct {
	// Pod is nil when the probe was not created.
	Pod *corev1.Pod
	// CreateError says why it was not created ("" when it was, or was not
	// meant to be).
	CreateError string
	// Events are the pod's events, oldest first.
	Events []corev1.Event
	// Settled is false when the runner stopped waiting for it (timeout).
	Settled bool
}

// Node is what the runner learned about one node.
type Node struct {
	Name string
	// Device is the node's swap device (nil: no slice), SliceName the
	// slice that holds it.
	Device    *resourceapi.Device
	SliceName string
	// PluginPod is the kubelet plugin's pod on the node, nil when none.
	PluginPod *corev1.Pod
	// Claim is the probe with a swap claim, NoClaim the one without.
	Claim, NoClaim Probe
	// RequestBytes is the claim's request.
	RequestBytes int64
	// Namespace is the chart's, for the commands the messages suggest.
	Namespace string
	// Timeout is how long the runner waited.
	Timeout time.Duration
}

// Allocatable reports whether the scheduler can allocate the test's
// claim of request bytes from device, and if not, the problem: a device
// that is not usable, tainted beyond ToleratedTaints, or smaller than the
// request. The runner creates the claim's probe only when it can.
func Allocatable(device *resourceapi.Device, request int64) (bool, Problem) {
	ok, p := allocatable(device, request)
	if !ok && p.Cause == CauseSwapBehavior {
		p = swapBehaviorProblem(stringAttr(device, v1alpha1.AttrSwapBehavior), []string{p.Message})
	}
	return ok, p
}

func allocatable(device *resourceapi.Device, request int64) (bool, Problem) {
	behavior := stringAttr(device, v1alpha1.AttrSwapBehavior)
	for _, t := range device.Taints {
		if slices.Contains(ToleratedTaints, t.Key) || t.Effect == resourceapi.DeviceTaintEffectNone {
			continue
		}
		switch t.Key {
		case v1alpha1.TaintKubeletSwapBehavior:
			return false, Problem{CauseSwapBehavior, "the node offers no swap while its kubelet runs " + firstNonEmpty(t.Value, behavior) + " (device taint " + taintString(t) + ")"}
		case v1alpha1.TaintNoUsableSwap:
			return false, Problem{CauseNoUsableSwap, "the node offers no swap (device taint " + taintString(t) + "): " + unusableReason(device)}
		case v1alpha1.TaintOvercommitted:
			return false, Problem{CauseNoUsableSwap, "the node's prepared claims hold more swap than it offers (device taint " + taintString(t) +
				"): swap was turned off or shrank; no new claim is allocated there until the offer covers them (the Node's SwapOvercommitted event)"}
		default:
			return false, Problem{CauseNoUsableSwap, "the swap device has the taint " + taintString(t) + ", which the test's claim does not tolerate"}
		}
	}
	if usable := device.Attributes[v1alpha1.AttrUsable].BoolValue; usable != nil && !*usable {
		return false, Problem{CauseNoUsableSwap, "the node offers no swap (usable: false): " + unusableReason(device)}
	}
	capacity, ok := device.Capacity[v1alpha1.CapacitySwap]
	if !ok {
		return false, Problem{CauseNoUsableSwap, "the swap device has no capacity " + string(v1alpha1.CapacitySwap)}
	}
	if offer := capacity.Value.Value(); offer < request {
		return false, Problem{CauseNoUsableSwap, fmt.Sprintf("the node offers %s of swap, less than the test's claim of %s", bytesString(offer), bytesString(request))}
	}
	return true, Problem{}
}

// unusableReason says why a device that offers no swap does, from its
// attributes (the plugin's log on the node has the exact reason).
func unusableReason(device *resourceapi.Device) string {
	intAttr := func(name resourceapi.QualifiedName) (int64, bool) {
		if v := device.Attributes[name].IntValue; v != nil {
			return *v, true
		}
		return 0, false
	}
	if n, ok := intAttr(v1alpha1.AttrDevices); ok && n == 0 {
		return "swap is off (no active swap device in the node's /proc/swaps): turn swap on"
	}
	if n, ok := intAttr(v1alpha1.AttrTotalBytes); ok && n <= 0 {
		return "the node's swap devices add up to 0 bytes"
	}
	if v, ok := intAttr(v1alpha1.AttrCgroupVersion); ok && v == 0 {
		return "the plugin found neither cgroup v2 nor the v1 memory controller"
	}
	total, _ := intAttr(v1alpha1.AttrTotalBytes)
	return fmt.Sprintf("swap is on (%s), so either the cgroup swap control file is missing (v1: boot with swapaccount=1; v2: the memory controller is not enabled for child cgroups) or nothing is left after kubeletPlugin.reserved and overcommitRatio; the plugin's log on the node says which",
		bytesString(total))
}

// Diagnose decides a node's verdict from what the runner saw: its slice,
// then each probe's pod, events and report.
func Diagnose(n Node) Verdict {
	v := Verdict{Node: n.Name}
	if n.Device == nil {
		v.Problems = append(v.Problems, Problem{CauseNoSlice, noSliceMessage(n)})
		return v
	}
	v.behavior = stringAttr(n.Device, v1alpha1.AttrSwapBehavior)
	if v.behavior != v1alpha1.SwapBehaviorNoSwap {
		v.behaviorSeen = append(v.behaviorSeen, "the slice "+n.SliceName+" says "+firstNonEmpty(v.behavior, "nothing"))
	}
	if ok, p := allocatable(n.Device, n.RequestBytes); !ok {
		if p.Cause == CauseSwapBehavior {
			v.behaviorSeen = append(v.behaviorSeen, p.Message)
		} else {
			v.add(p)
		}
	}

	var claimSummary, noClaimSummary string
	if n.Claim.Pod != nil || n.Claim.CreateError != "" {
		claimSummary = v.claimProbe(n)
	}
	noClaimSummary = v.noClaimProbe(n)
	if len(v.behaviorSeen) > 0 {
		v.Problems = append([]Problem{swapBehaviorProblem(v.behavior, v.behaviorSeen)}, v.Problems...)
	}
	if v.Passed() {
		v.Summary = claimSummary + "; " + noClaimSummary
	}
	return v
}

// add adds p unless a problem of its cause is there already, in which
// case p's message is appended to it.
func (v *Verdict) add(p Problem) {
	for i := range v.Problems {
		if v.Problems[i].Cause == p.Cause {
			if !strings.Contains(v.Problems[i].Message, p.Message) {
				v.Problems[i].Message += "; " + p.Message
			}
			return
		}
	}
	v.Problems = append(v.Problems, p)
}

func noSliceMessage(n Node) string {
	msg := "no ResourceSlice of driver " + v1alpha1.DriverName + " for node " + n.Name + ": "
	p := n.PluginPod
	switch {
	case p == nil:
		return msg + "no kubelet plugin pod runs there (the DaemonSet's nodeSelector, tolerations or affinity leave the node out, or the node is not Linux)"
	case p.DeletionTimestamp != nil:
		return msg + "its kubelet plugin pod " + p.Name + " is being deleted"
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil && s.State.Waiting.Reason != "" {
			return msg + fmt.Sprintf("its kubelet plugin pod %s waits: %s: %s", p.Name, s.State.Waiting.Reason, truncate(s.State.Waiting.Message, 300))
		}
		if t := s.LastTerminationState.Terminated; t != nil && !podReady(p) {
			return msg + fmt.Sprintf("its kubelet plugin pod %s is not ready and its container last exited with %d (%s): kubectl -n %s logs %s --previous",
				p.Name, t.ExitCode, t.Reason, n.Namespace, p.Name)
		}
	}
	if !podReady(p) {
		return msg + fmt.Sprintf("its kubelet plugin pod %s is %s and not ready: kubectl -n %s describe pod %s", p.Name, p.Status.Phase, n.Namespace, p.Name)
	}
	return msg + fmt.Sprintf("its kubelet plugin pod %s is ready but has not published (yet): kubectl -n %s logs %s", p.Name, n.Namespace, p.Name)
}

// swapBehaviorProblem says that the kubelet does not run NoSwap
// (behavior is what the slice says), with what showed it, and the fix.
func swapBehaviorProblem(behavior string, seen []string) Problem {
	const fix = "set memorySwap.swapBehavior: NoSwap in the kubelet's configuration and restart the kubelet"
	why := strings.Join(seen, "; ")
	switch behavior {
	case v1alpha1.SwapBehaviorNoSwap:
		return Problem{CauseSwapBehavior, "a container without a claim may swap although the slice says the kubelet runs NoSwap (" + why +
			"): the plugin reads another configuration than the kubelet's (kubeletPlugin.kubeletConfig.path and .dropInDir must be the kubelet's --config and --config-dir), or the kubelet wrote no swap limit"}
	case v1alpha1.SwapBehaviorUnknown, "":
		return Problem{CauseSwapBehavior, "the plugin cannot read the kubelet's swapBehavior (" + why +
			"): set kubeletPlugin.kubeletConfig.path and .dropInDir to the kubelet's --config and --config-dir (the Node's KubeletConfigUnreadable event says what failed)"}
	case v1alpha1.SwapBehaviorLimitedSwap:
		return Problem{CauseSwapBehavior, "the kubelet runs swapBehavior LimitedSwap, not NoSwap (" + why +
			"): it gives every Burstable container without a claim swap of its own; " + fix}
	}
	return Problem{CauseSwapBehavior, "the kubelet runs swapBehavior " + behavior + ", not NoSwap (" + why + "); " + fix}
}

// claimProbe checks the probe with the claim and returns what it saw.
func (v *Verdict) claimProbe(n Node) string {
	const what = "the probe with a swap claim"
	p := n.Claim
	if p.CreateError != "" {
		v.add(Problem{CauseProbeFailed, what + " could not be created: " + p.CreateError})
		return ""
	}
	r, ok := v.probeOutcome(n, p, what)
	if !ok {
		return ""
	}
	want := n.RequestBytes
	if n.Device != nil {
		want = ConsumedBytes(n.RequestBytes, n.Device.Capacity[v1alpha1.CapacitySwap])
	}
	if !r.EnvSet {
		v.add(Problem{CauseNoCDI, fmt.Sprintf("%s started without %s (its cgroup swap limit is %s): the runtime did not apply the claim's CDI device; "+
			"enable CDI in the runtime (containerd 1.7: enable_cdi = true; containerd 2 and CRI-O: on by default) with kubeletPlugin.cdiDir among its CDI spec directories (cdi_spec_dirs)",
			what, v1alpha1.EnvSwapLimit, limitString(r.SwapLimitBytes))})
		return ""
	}
	if r.Env != strconv.FormatInt(want, 10) {
		v.add(Problem{CauseWrongLimit, fmt.Sprintf("%s got %s=%s, but the claim grants %d bytes", what, v1alpha1.EnvSwapLimit, r.Env, want)})
	}
	if r.SwapLimitBytes != want {
		if r.SwapLimitBytes == 0 {
			v.add(Problem{CauseHookNotRun, fmt.Sprintf("%s has %s=%s (the runtime applied the claim's CDI device) but its cgroup swap limit is 0, not %s (%s): "+
				"the runtime did not run the device's createRuntime hook %s, or something reset the limit; use a runtime that runs CDI hooks (runc or crun through containerd or CRI-O)",
				what, v1alpha1.EnvSwapLimit, r.Env, bytesString(want), filesString(r), hookName)})
		} else {
			v.add(Problem{CauseWrongLimit, fmt.Sprintf("the cgroup swap limit of %s is %s (%s), but the claim grants %s: something rewrote the limit the hook set "+
				"(the kubelet under LimitedSwap, systemd, a person); the plugin's verifier restores it within kubeletPlugin.verifyInterval (a SwapLimitRestored event)",
				what, limitString(r.SwapLimitBytes), filesString(r), bytesString(want))})
		}
	}
	return fmt.Sprintf("with a %s claim: %s=%s and cgroup v%d swap limit %s (%s)", bytesString(want), v1alpha1.EnvSwapLimit, r.Env, r.CgroupVersion, bytesString(r.SwapLimitBytes), filesString(r))
}

// hookName is the hook binary the CDI specs name.
const hookName = "dra-swap-hook"

// noClaimProbe checks the probe without a claim and returns what it saw.
func (v *Verdict) noClaimProbe(n Node) string {
	const what = "the probe without a claim"
	p := n.NoClaim
	if p.CreateError != "" {
		v.add(Problem{CauseProbeFailed, what + " could not be created: " + p.CreateError})
		return ""
	}
	if p.Pod == nil {
		return ""
	}
	r, ok := v.probeOutcome(n, p, what)
	if !ok {
		return ""
	}
	if r.EnvSet {
		v.add(Problem{CauseWrongLimit, fmt.Sprintf("%s got %s=%s", what, v1alpha1.EnvSwapLimit, r.Env)})
	}
	switch {
	case r.SwapLimitBytes == 0:
		return fmt.Sprintf("without a claim: no swap (%s)", filesString(r))
	case r.SwapLimitBytes < 0:
		v.behaviorSeen = append(v.behaviorSeen, fmt.Sprintf("%s may swap without limit: %s", what, filesString(r)))
	default:
		v.behaviorSeen = append(v.behaviorSeen, fmt.Sprintf("%s may swap %s: %s", what, bytesString(r.SwapLimitBytes), filesString(r)))
	}
	return ""
}

// probeOutcome reads a probe's report, or adds the problem that kept it
// from reporting.
func (v *Verdict) probeOutcome(n Node, p Probe, what string) (Report, bool) {
	pod := p.Pod
	if pod == nil {
		return Report{}, false
	}
	if e := lastEvent(p.Events, "SwapNotApplied"); e != nil {
		v.add(Problem{CauseHookRefused, fmt.Sprintf("the hook refused %s: %s", what, truncate(e.Message, 500))})
		return Report{}, false
	}
	for _, s := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if t := s.State.Terminated; t != nil {
			if t.Reason == "StartError" || t.Reason == "ContainerCannotRun" || t.Reason == "OOMKilled" {
				v.add(containerProblem(n, what, t.Reason, fmt.Sprintf("exit code %d", t.ExitCode), t.Message))
				return Report{}, false
			}
			r, err := ParseReport(t.Message)
			switch {
			case err != nil && t.ExitCode != 0:
				v.add(containerProblem(n, what, t.Reason, fmt.Sprintf("exit code %d", t.ExitCode), t.Message))
				return Report{}, false
			case err != nil:
				v.add(Problem{CauseProbeFailed, what + ": " + err.Error()})
				return Report{}, false
			case r.Error != "":
				v.add(Problem{CauseProbeFailed, what + " could not read its cgroup: " + r.Error})
				return Report{}, false
			}
			return r, true
		}
		if w := s.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			v.add(containerProblem(n, what, w.Reason, "waiting", w.Message))
			return Report{}, false
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			msg := fmt.Sprintf("the scheduler did not place %s on the node: %s", what, truncate(c.Message, 500))
			if e := lastEvent(p.Events, "SwapUnavailable"); e != nil {
				msg += "; " + truncate(e.Message, 500)
			}
			v.add(Problem{CauseNotScheduled, msg})
			return Report{}, false
		}
	}
	if e := lastEvent(p.Events, "FailedResourceClaimCreation"); e != nil {
		v.add(Problem{CauseProbeFailed, fmt.Sprintf("no claim could be made for %s from the chart's ResourceClaimTemplate: %s", what, truncate(e.Message, 500))})
		return Report{}, false
	}
	if e := lastEvent(p.Events, "FailedPrepareDynamicResources"); e != nil {
		v.add(Problem{CausePrepareFailed, fmt.Sprintf("the kubelet plugin failed to prepare the claim of %s: %s", what, truncate(e.Message, 500))})
		return Report{}, false
	}
	if pod.Status.Phase == corev1.PodFailed {
		v.add(Problem{CauseProbeFailed, fmt.Sprintf("%s failed: %s %s", what, pod.Status.Reason, truncate(pod.Status.Message, 300))})
		return Report{}, false
	}
	state := "phase " + string(pod.Status.Phase)
	if pod.Spec.NodeName == "" {
		state += ", not scheduled"
	}
	if events := eventsString(p.Events); events != "" {
		state += "; events: " + events
	}
	v.add(Problem{CauseTimeout, fmt.Sprintf("%s did not finish in %v (%s)", what, n.Timeout, state)})
	return Report{}, false
}

// containerProblem classifies why a probe's container did not run.
func containerProblem(n Node, what, reason, state, message string) Problem {
	msg := truncate(message, 600)
	lower := strings.ToLower(message)
	switch {
	case strings.Contains(lower, "cdi"):
		return Problem{CauseNoCDI, fmt.Sprintf("the runtime could not apply the claim's CDI device to %s (%s): %s; "+
			"kubeletPlugin.cdiDir must be one of the runtime's CDI spec directories (cdi_spec_dirs) and CDI enabled (containerd 1.7: enable_cdi = true)", what, reason, msg)}
	case strings.Contains(lower, "hook"):
		fix := "the kubelet plugin installs " + hookName + " into kubeletPlugin.hookDir when it starts: restart its pod on the node"
		if n.PluginPod != nil {
			fix += fmt.Sprintf(" (kubectl -n %s delete pod %s)", n.Namespace, n.PluginPod.Name)
		}
		fix += ", and keep that directory on a file system the runtime may execute from"
		if strings.Contains(lower, "no such file") {
			return Problem{CauseHookNotRun, fmt.Sprintf("the runtime could not run the driver's OCI hook for %s: the hook binary is missing on the node (%s: %s); %s", what, reason, msg, fix)}
		}
		return Problem{CauseHookNotRun, fmt.Sprintf("the runtime could not run the driver's OCI hook for %s (%s: %s); %s", what, reason, msg, fix)}
	case strings.Contains(reason, "Image"):
		return Problem{CauseProbeFailed, fmt.Sprintf("the node could not pull the driver's image for %s (%s: %s)", what, reason, msg)}
	}
	return Problem{CauseProbeFailed, fmt.Sprintf("%s did not run (%s, %s): %s", what, reason, state, msg)}
}

// ConsumedBytes is what the scheduler charges for a request of request
// bytes from capacity: the request rounded up to the request policy's
// range (min, then steps above it), as k8s.io/dynamic-resource-allocation
// does for integer quantities.
func ConsumedBytes(request int64, capacity resourceapi.DeviceCapacity) int64 {
	p := capacity.RequestPolicy
	if p == nil || p.ValidRange == nil || p.ValidRange.Min == nil {
		return request
	}
	lo := p.ValidRange.Min.Value()
	if request < lo {
		return lo
	}
	if p.ValidRange.Step == nil || p.ValidRange.Step.Value() <= 0 {
		return request
	}
	step := p.ValidRange.Step.Value()
	n := (request - lo + step - 1) / step
	return lo + n*step
}

func stringAttr(d *resourceapi.Device, name resourceapi.QualifiedName) string {
	if v := d.Attributes[name].StringValue; v != nil {
		return *v
	}
	return ""
}

func taintString(t resourceapi.DeviceTaint) string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	return s + ":" + string(t.Effect)
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// bytesString is n in binary units when it is a whole number of them
// ("1Mi"), else in bytes.
func bytesString(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	return resource.NewQuantity(n, resource.BinarySI).String()
}

func limitString(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	return bytesString(n)
}

// filesString names the raw cgroup files of a report.
func filesString(r Report) string {
	keys := make([]string, 0, len(r.Files))
	for k := range r.Files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+" "+r.Files[k])
	}
	return strings.Join(parts, ", ")
}

func lastEvent(events []corev1.Event, reason string) *corev1.Event {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Reason == reason {
			return &events[i]
		}
	}
	return nil
}

// eventsString lists the reasons and messages of the last few events.
func eventsString(events []corev1.Event) string {
	var items []string
	for i := len(events) - 1; i >= 0 && len(items) < 3; i-- {
		items = append(items, events[i].Reason+": "+truncate(events[i].Message, 200))
	}
	return strings.Join(items, "; ")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func truncate(s string, limit int) string {
	return eventmsg.Truncate(strings.TrimSpace(s), limit)
}
