package installcheck

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

const mi = int64(1) << 20

// swapDevice is a node's device as the plugin publishes it: usable with
// offer bytes (step 1Mi), or unusable with offer 0.
func swapDevice(behavior string, offer int64, cgroupVersion int64, taints ...resourceapi.DeviceTaint) *resourceapi.Device {
	d := &resourceapi.Device{
		Name:                     v1alpha1.DeviceName,
		AllowMultipleAllocations: ptr.To(true),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			v1alpha1.AttrSwapBehavior:  {StringValue: ptr.To(behavior)},
			v1alpha1.AttrUsable:        {BoolValue: ptr.To(offer > 0)},
			v1alpha1.AttrDevices:       {IntValue: ptr.To[int64](1)},
			v1alpha1.AttrTotalBytes:    {IntValue: ptr.To(max(offer, 1024*mi))},
			v1alpha1.AttrCgroupVersion: {IntValue: ptr.To(cgroupVersion)},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			v1alpha1.CapacitySwap: {Value: *resource.NewQuantity(offer, resource.BinarySI)},
		},
		Taints: taints,
	}
	if offer > 0 {
		c := d.Capacity[v1alpha1.CapacitySwap]
		c.RequestPolicy = &resourceapi.CapacityRequestPolicy{ValidRange: &resourceapi.CapacityRequestPolicyRange{
			Min: resource.NewQuantity(mi, resource.BinarySI), Step: resource.NewQuantity(mi, resource.BinarySI), Max: resource.NewQuantity(offer, resource.BinarySI),
		}}
		d.Capacity[v1alpha1.CapacitySwap] = c
	}
	return d
}

func taint(key, value string) resourceapi.DeviceTaint {
	return resourceapi.DeviceTaint{Key: key, Value: value, Effect: resourceapi.DeviceTaintEffectNoSchedule}
}

// finished is a probe pod that ran and reported r.
func finished(r Report) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
			Name: ProbeContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", Message: string(r.Encode())}},
		}}},
	}
}

// v2Report and v1Report are what a probe reads with a swap limit and,
// for "" env, no DRA_SWAP_LIMIT_BYTES.
func v2Report(limit int64, env string) Report {
	r := Report{CgroupVersion: 2, Cgroup: "/sys/fs/cgroup", SwapLimitBytes: limit, EnvSet: env != "", Env: env,
		Files: map[string]string{"memory.swap.max": "?", "memory.max": "67108864"}}
	if limit < 0 {
		r.Files["memory.swap.max"] = "max"
	} else {
		r.Files["memory.swap.max"] = resource.NewQuantity(limit, resource.DecimalSI).String()
	}
	return r
}

func v1Report(limit int64, env string) Report {
	return Report{CgroupVersion: 1, Cgroup: "/sys/fs/cgroup/memory", SwapLimitBytes: limit, EnvSet: env != "", Env: env,
		Files: map[string]string{"memory.memsw.limit_in_bytes": resource.NewQuantity(64*mi+limit, resource.DecimalSI).String(), "memory.limit_in_bytes": "67108864"}}
}

// waiting is a probe pod whose container waits (reason "") or has not
// been scheduled with the scheduler's message.
func waiting(reason, message string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if reason != "" {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ProbeContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}}
	}
	return p
}

func unscheduled(message string) *corev1.Pod {
	p := waiting("", "")
	p.Spec.NodeName = ""
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message}}
	return p
}

func startError(message string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodFailed,
		ContainerStatuses: []corev1.ContainerStatus{{Name: ProbeContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: "StartError", ExitCode: 128, Message: message}}}}}}
}

func event(reason, message string, count int32) corev1.Event {
	return corev1.Event{Reason: reason, Message: message, Count: count}
}

func pluginPod(ready bool, waitReason string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "dra-driver-swap-kubeletplugin-x1"}, Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}
	if ready {
		p.Status.Conditions[0].Status = corev1.ConditionTrue
	}
	if waitReason != "" {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "plugin", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: waitReason, Message: "failed to create containerd task: recursive read-only mounts are not supported"}}}}
	}
	return p
}

const hookMissing = `failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: ` +
	`error during container init: error running createRuntime hook #0: fork/exec /opt/dra-swap/bin/dra-swap-hook: no such file or directory: unknown`

func TestDiagnose(t *testing.T) {
	good := swapDevice(v1alpha1.SwapBehaviorNoSwap, 1024*mi, 2)
	claimOK := Probe{Pod: finished(v2Report(mi, "1048576")), Settled: true}
	noClaimOK := Probe{Pod: finished(v2Report(0, "")), Settled: true}
	for _, tc := range []struct {
		name string
		node Node
		// want are the causes in order, each with parts of its message;
		// none: a pass whose summary has wantSummary.
		want        []Problem
		wantSummary []string
	}{{
		name:        "v2 node passes",
		node:        Node{Device: good, Claim: claimOK, NoClaim: noClaimOK},
		wantSummary: []string{"with a 1Mi claim: DRA_SWAP_LIMIT_BYTES=1048576 and cgroup v2 swap limit 1Mi", "without a claim: no swap (memory.max 67108864, memory.swap.max 0)"},
	}, {
		name: "v1 node passes",
		node: Node{Device: swapDevice(v1alpha1.SwapBehaviorNoSwap, 1024*mi, 1),
			Claim: Probe{Pod: finished(v1Report(mi, "1048576"))}, NoClaim: Probe{Pod: finished(v1Report(0, ""))}},
		wantSummary: []string{"cgroup v1 swap limit 1Mi (memory.limit_in_bytes 67108864, memory.memsw.limit_in_bytes 68157440)"},
	}, {
		name:        "pressure taints are tolerated",
		node:        Node{Device: swapDevice(v1alpha1.SwapBehaviorNoSwap, 1024*mi, 2, taint(v1alpha1.TaintMemoryPressure, "some-31"), taint(v1alpha1.TaintSwapFull, "91")), Claim: claimOK, NoClaim: noClaimOK},
		wantSummary: []string{"with a 1Mi claim"},
	}, {
		name:        "a request between steps is charged the next step",
		node:        Node{RequestBytes: mi + 1, Device: good, Claim: Probe{Pod: finished(v2Report(2*mi, "2097152"))}, NoClaim: noClaimOK},
		wantSummary: []string{"with a 2Mi claim"},
	}, {
		name: "no slice, no plugin pod",
		node: Node{},
		want: []Problem{{CauseNoSlice, "no ResourceSlice of driver dra.swap for node n1: no kubelet plugin pod runs there"}},
	}, {
		name: "no slice, the plugin's pod cannot start",
		node: Node{PluginPod: pluginPod(false, "CreateContainerError")},
		want: []Problem{{CauseNoSlice, "its kubelet plugin pod dra-driver-swap-kubeletplugin-x1 waits: CreateContainerError: failed to create containerd task: recursive read-only"}},
	}, {
		name: "no slice, the plugin's pod is ready",
		node: Node{PluginPod: pluginPod(true, "")},
		want: []Problem{{CauseNoSlice, "is ready but has not published (yet): kubectl -n dra-swap logs dra-driver-swap-kubeletplugin-x1"}},
	}, {
		name: "LimitedSwap: no offer, the probe without a claim swaps",
		node: Node{Device: swapDevice(v1alpha1.SwapBehaviorLimitedSwap, 0, 2, taint(v1alpha1.TaintKubeletSwapBehavior, v1alpha1.SwapBehaviorLimitedSwap)),
			NoClaim: Probe{Pod: finished(v2Report(3*mi, ""))}},
		want: []Problem{{CauseSwapBehavior, "the kubelet runs swapBehavior LimitedSwap, not NoSwap (the slice s1 says LimitedSwap; " +
			"the node offers no swap while its kubelet runs LimitedSwap (device taint dra.swap/kubelet-swap-behavior=LimitedSwap:NoSchedule); " +
			"the probe without a claim may swap 3Mi: memory.max 67108864, memory.swap.max 3145728): it gives every Burstable container without a claim swap of its own; " +
			"set memorySwap.swapBehavior: NoSwap in the kubelet's configuration and restart the kubelet"}},
	}, {
		name: "LimitedSwap offered unsafely: the claim works, the probe without one swaps",
		node: Node{Device: swapDevice(v1alpha1.SwapBehaviorLimitedSwap, 768*mi, 2), Claim: claimOK, NoClaim: Probe{Pod: finished(v2Report(3*mi, ""))}},
		want: []Problem{{CauseSwapBehavior, "the kubelet runs swapBehavior LimitedSwap, not NoSwap (the slice s1 says LimitedSwap; the probe without a claim may swap 3Mi"}},
	}, {
		name: "the slice says NoSwap but a container without a claim swaps",
		node: Node{Device: good, Claim: claimOK, NoClaim: Probe{Pod: finished(v2Report(-1, ""))}},
		want: []Problem{{CauseSwapBehavior, "a container without a claim may swap although the slice says the kubelet runs NoSwap (the probe without a claim may swap without limit: memory.max 67108864, memory.swap.max max): the plugin reads another configuration"}},
	}, {
		name: "Unknown swap behavior",
		node: Node{Device: swapDevice(v1alpha1.SwapBehaviorUnknown, 1024*mi, 2), Claim: claimOK, NoClaim: noClaimOK},
		want: []Problem{{CauseSwapBehavior, "the plugin cannot read the kubelet's swapBehavior (the slice s1 says Unknown): set kubeletPlugin.kubeletConfig.path"}},
	}, {
		name: "swap off",
		node: func() Node {
			d := swapDevice(v1alpha1.SwapBehaviorNoSwap, 0, 2, taint(v1alpha1.TaintNoUsableSwap, ""))
			d.Attributes[v1alpha1.AttrDevices] = resourceapi.DeviceAttribute{IntValue: ptr.To[int64](0)}
			return Node{Device: d, NoClaim: noClaimOK}
		}(),
		want: []Problem{{CauseNoUsableSwap, "the node offers no swap (device taint dra.swap/no-usable-swap:NoSchedule): swap is off"}},
	}, {
		name: "swap on but not usable",
		node: Node{Device: swapDevice(v1alpha1.SwapBehaviorNoSwap, 0, 1, taint(v1alpha1.TaintNoUsableSwap, "")), NoClaim: Probe{Pod: finished(v1Report(0, ""))}},
		want: []Problem{{CauseNoUsableSwap, "swap is on (1Gi), so either the cgroup swap control file is missing (v1: boot with swapaccount=1"}},
	}, {
		name: "overcommitted",
		node: Node{Device: swapDevice(v1alpha1.SwapBehaviorNoSwap, 512*mi, 2, taint(v1alpha1.TaintOvercommitted, "held-700-offered-512")), NoClaim: noClaimOK},
		want: []Problem{{CauseNoUsableSwap, "the node's prepared claims hold more swap than it offers (device taint dra.swap/overcommitted=held-700-offered-512:NoSchedule)"}},
	}, {
		name: "the runtime did not apply the CDI device",
		node: Node{Device: good, Claim: Probe{Pod: finished(v2Report(0, ""))}, NoClaim: noClaimOK},
		want: []Problem{{CauseNoCDI, "the probe with a swap claim started without DRA_SWAP_LIMIT_BYTES (its cgroup swap limit is 0): the runtime did not apply the claim's CDI device"}},
	}, {
		name: "the runtime cannot resolve the CDI device",
		node: Node{Device: good, Claim: Probe{Pod: waiting("CreateContainerError", "failed to inject CDI devices: unresolvable CDI devices dra.swap/swap=abc-0")}, NoClaim: noClaimOK},
		want: []Problem{{CauseNoCDI, "the runtime could not apply the claim's CDI device to the probe with a swap claim (CreateContainerError): failed to inject CDI devices"}},
	}, {
		name: "the hook binary is missing",
		node: Node{Namespace: "dra-swap", Device: good, PluginPod: pluginPod(true, ""), Claim: Probe{Pod: startError(hookMissing)}, NoClaim: noClaimOK},
		want: []Problem{{CauseHookNotRun, "the runtime could not run the driver's OCI hook for the probe with a swap claim: the hook binary is missing on the node (StartError: failed to create containerd task"}},
	}, {
		name: "the hook did not run: the environment but no limit",
		node: Node{Device: good, Claim: Probe{Pod: finished(v2Report(0, "1048576"))}, NoClaim: noClaimOK},
		want: []Problem{{CauseHookNotRun, "has DRA_SWAP_LIMIT_BYTES=1048576 (the runtime applied the claim's CDI device) but its cgroup swap limit is 0, not 1Mi"}},
	}, {
		name: "another limit",
		node: Node{Device: good, Claim: Probe{Pod: finished(v2Report(5*mi, "1048576"))}, NoClaim: noClaimOK},
		want: []Problem{{CauseWrongLimit, "the cgroup swap limit of the probe with a swap claim is 5Mi (memory.max 67108864, memory.swap.max 5242880), but the claim grants 1Mi"}},
	}, {
		name: "another environment",
		node: Node{Device: good, Claim: Probe{Pod: finished(v2Report(mi, "2097152"))}, NoClaim: noClaimOK},
		want: []Problem{{CauseWrongLimit, "got DRA_SWAP_LIMIT_BYTES=2097152, but the claim grants 1048576 bytes"}},
	}, {
		name: "the hook refused",
		node: Node{Device: good, Claim: Probe{Pod: startError("error running createRuntime hook #0: exit status 1"),
			Events: []corev1.Event{event("SwapNotApplied", `container "probe" has no memory limit`, 1)}}, NoClaim: noClaimOK},
		want: []Problem{{CauseHookRefused, `the hook refused the probe with a swap claim: container "probe" has no memory limit`}},
	}, {
		name: "prepare failed",
		node: Node{Device: good, Claim: Probe{Pod: waiting("", ""),
			Events: []corev1.Event{event("FailedPrepareDynamicResources", "prepare claim: critical pods never swap", 3)}}, NoClaim: noClaimOK},
		want: []Problem{{CausePrepareFailed, "the kubelet plugin failed to prepare the claim of the probe with a swap claim: prepare claim: critical pods never swap"}},
	}, {
		name: "not scheduled",
		node: Node{Device: good, Claim: Probe{Pod: unscheduled("0/2 nodes are available: 1 cannot allocate all claims."),
			Events: []corev1.Event{event("SwapUnavailable", "no node offers swap for claim x: n1 offers 0", 1)}}, NoClaim: noClaimOK},
		want: []Problem{{CauseNotScheduled, "the scheduler did not place the probe with a swap claim on the node: 0/2 nodes are available: 1 cannot allocate all claims.; no node offers swap"}},
	}, {
		name: "the image cannot be pulled",
		node: Node{Device: good, Claim: claimOK, NoClaim: Probe{Pod: waiting("ErrImagePull", "registry.example/dra-driver-swap:0.1.0: not found")}},
		want: []Problem{{CauseProbeFailed, "the node could not pull the driver's image for the probe without a claim (ErrImagePull: registry.example"}},
	}, {
		name: "timed out",
		node: Node{Timeout: 3 * time.Minute, Device: good, Claim: Probe{Pod: waiting("", ""), Events: []corev1.Event{event("Scheduled", "assigned to n1", 1)}}, NoClaim: noClaimOK},
		want: []Problem{{CauseTimeout, "the probe with a swap claim did not finish in 3m0s (phase Pending; events: Scheduled: assigned to n1)"}},
	}, {
		name: "the probe could not read its cgroup",
		node: Node{Device: good, Claim: claimOK, NoClaim: Probe{Pod: finished(Report{Error: "cgroup v1: memory.memsw.limit_in_bytes: no such file or directory"})}},
		want: []Problem{{CauseProbeFailed, "the probe without a claim could not read its cgroup: cgroup v1: memory.memsw.limit_in_bytes"}},
	}, {
		name: "no claim template",
		node: Node{Device: good, Claim: Probe{Pod: waiting("", ""), Events: []corev1.Event{event("FailedResourceClaimCreation", `resourceclaimtemplate "t" not found`, 1)}}, NoClaim: noClaimOK},
		want: []Problem{{CauseProbeFailed, `no claim could be made for the probe with a swap claim from the chart's ResourceClaimTemplate: resourceclaimtemplate "t" not found`}},
	}, {
		name: "two problems",
		node: Node{Device: good, Claim: Probe{CreateError: "forbidden"}, NoClaim: Probe{Pod: finished(v2Report(mi, ""))}},
		want: []Problem{{CauseSwapBehavior, "a container without a claim may swap"}, {CauseProbeFailed, "the probe with a swap claim could not be created: forbidden"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.node
			n.Name, n.SliceName = "n1", "s1"
			if n.Namespace == "" {
				n.Namespace = "dra-swap"
			}
			if n.RequestBytes == 0 {
				n.RequestBytes = mi
			}
			v := Diagnose(n)
			if len(tc.want) == 0 {
				if !v.Passed() {
					t.Fatalf("problems %+v, want a pass", v.Problems)
				}
				for _, w := range tc.wantSummary {
					if !strings.Contains(v.Summary, w) {
						t.Errorf("summary %q lacks %q", v.Summary, w)
					}
				}
				t.Logf("PASS %s", v.Summary)
				return
			}
			if len(v.Problems) != len(tc.want) {
				t.Fatalf("problems %+v, want %d: %+v", v.Problems, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if got := v.Problems[i]; got.Cause != w.Cause || !strings.Contains(got.Message, w.Message) {
					t.Errorf("problem %d: %s: %s\nwant %s containing: %s", i, got.Cause, got.Message, w.Cause, w.Message)
				} else {
					t.Logf("FAIL %s: %s", got.Cause, got.Message)
				}
			}
		})
	}
}

func TestAllocatable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		device  *resourceapi.Device
		request int64
		want    Cause // "" allocatable
	}{
		{"usable", swapDevice(v1alpha1.SwapBehaviorNoSwap, 10*mi, 2), mi, ""},
		{"the whole offer", swapDevice(v1alpha1.SwapBehaviorNoSwap, 10*mi, 2), 10 * mi, ""},
		{"more than the offer", swapDevice(v1alpha1.SwapBehaviorNoSwap, 10*mi, 2), 11 * mi, CauseNoUsableSwap},
		{"pressure", swapDevice(v1alpha1.SwapBehaviorNoSwap, 10*mi, 2, taint(v1alpha1.TaintMemoryPressure, "x")), mi, ""},
		{"an effect None taint", swapDevice(v1alpha1.SwapBehaviorNoSwap, 10*mi, 2, resourceapi.DeviceTaint{Key: "k", Effect: resourceapi.DeviceTaintEffectNone}), mi, ""},
		{"another taint", swapDevice(v1alpha1.SwapBehaviorNoSwap, 10*mi, 2, taint("example.com/x", "")), mi, CauseNoUsableSwap},
		{"kubelet swap behavior", swapDevice(v1alpha1.SwapBehaviorLimitedSwap, 0, 2, taint(v1alpha1.TaintKubeletSwapBehavior, "LimitedSwap")), mi, CauseSwapBehavior},
		{"not usable without a taint", swapDevice(v1alpha1.SwapBehaviorNoSwap, 0, 2), mi, CauseNoUsableSwap},
	} {
		ok, p := Allocatable(tc.device, tc.request)
		if ok != (tc.want == "") || p.Cause != tc.want {
			t.Errorf("%s: %v, %+v; want cause %q", tc.name, ok, p, tc.want)
		}
	}
}

func TestConsumedBytes(t *testing.T) {
	c := swapDevice(v1alpha1.SwapBehaviorNoSwap, 100*mi, 2).Capacity[v1alpha1.CapacitySwap]
	for request, want := range map[int64]int64{1: mi, mi: mi, mi + 1: 2 * mi, 5 * mi: 5 * mi, 5*mi - 1: 5 * mi} {
		if got := ConsumedBytes(request, c); got != want {
			t.Errorf("ConsumedBytes(%d) = %d, want %d", request, got, want)
		}
	}
	if got := ConsumedBytes(mi+1, resourceapi.DeviceCapacity{}); got != mi+1 {
		t.Errorf("without a request policy: %d, want the request", got)
	}
}
