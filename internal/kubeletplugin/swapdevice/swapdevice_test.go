package swapdevice

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
)

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
)

func TestPolicyOffer(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		total  int64
		want   int64
	}{
		{name: "ratio 1", policy: Policy{OvercommitRatio: 1}, total: 4 * gi, want: 4 * gi},
		{name: "rounded down to MiB", policy: Policy{OvercommitRatio: 1}, total: 4*gi + 4096, want: 4 * gi},
		{name: "swap file size in KiB", policy: Policy{OvercommitRatio: 1}, total: 2*gi - 4096, want: 2*gi - mi},
		{name: "overcommit 1.5", policy: Policy{OvercommitRatio: 1.5}, total: 4 * gi, want: 6 * gi},
		{name: "undercommit and reserve", policy: Policy{OvercommitRatio: 0.5, ReservedBytes: 512 * mi}, total: 4 * gi, want: 1536 * mi},
		{name: "reserve eats all", policy: Policy{OvercommitRatio: 1, ReservedBytes: 4 * gi}, total: 4 * gi, want: 0},
		{name: "less than a step", policy: Policy{OvercommitRatio: 1}, total: mi - 1, want: 0},
		{name: "no swap", policy: Policy{OvercommitRatio: 1}, total: 0, want: 0},
		{name: "huge ratio does not overflow", policy: Policy{OvercommitRatio: 100}, total: 1 << 61, want: 1 << 62},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.policy.Offer(tc.total)
			if got != tc.want {
				t.Fatalf("Offer(%d) = %d, want %d", tc.total, got, tc.want)
			}
			if got%v1alpha1.CapacityStep != 0 || got < 0 {
				t.Fatalf("Offer(%d) = %d is not a non-negative multiple of %d", tc.total, got, v1alpha1.CapacityStep)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		policy  Policy
		wantErr string
	}{
		{policy: Policy{OvercommitRatio: 1}},
		{policy: Policy{OvercommitRatio: 2.5, ReservedBytes: gi, DefaultRequestBytes: gi}},
		{policy: Policy{OvercommitRatio: 0}, wantErr: "overcommit ratio"},
		{policy: Policy{OvercommitRatio: -1}, wantErr: "overcommit ratio"},
		{policy: Policy{OvercommitRatio: 101}, wantErr: "overcommit ratio"},
		{policy: Policy{OvercommitRatio: 1, ReservedBytes: -1}, wantErr: "reserved swap"},
		{policy: Policy{OvercommitRatio: 1, DefaultRequestBytes: -1}, wantErr: "default swap request"},
		{policy: Policy{OvercommitRatio: 1, UnsafeOfferUnder: []string{"LimitedSwap", "WorkloadControlledSwap", "Unknown"}}},
		{policy: Policy{OvercommitRatio: 1, UnsafeOfferUnder: []string{"NoSwap"}}, wantErr: `"NoSwap" to offer swap under is none of LimitedSwap, WorkloadControlledSwap, Unknown (under NoSwap swap is always offered)`},
		{policy: Policy{OvercommitRatio: 1, UnsafeOfferUnder: []string{"LimitedSwap", "limitedswap"}}, wantErr: `"limitedswap"`},
		{policy: Policy{OvercommitRatio: 1, UnsafeOfferUnder: []string{""}}, wantErr: `behavior ""`},
	} {
		err := tc.policy.Validate()
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.policy, err, tc.wantErr)
		}
	}
}

func usableFacts() discovery.Facts {
	return discovery.Facts{
		Devices:       []discovery.SwapDevice{{Path: "/swapfile", Type: "file", SizeBytes: 4 * gi, Medium: discovery.MediumSSD}},
		TotalBytes:    4 * gi,
		Medium:        discovery.MediumSSD,
		Zswap:         true,
		CgroupVersion: 2,
		SwapControl:   true,
		KernelVersion: "6.1.0",
		SwapPeak:      true,
		SwapBehavior:  v1alpha1.SwapBehaviorNoSwap,
		BootID:        "b",
	}
}

func TestDevice(t *testing.T) {
	labels := map[string]string{
		"topology.kubernetes.io/zone":   "zone-a",
		"topology.kubernetes.io/region": "region-1",
		"kubernetes.io/hostname":        "node-a",
		"other.example.com/label":       "ignored",
	}
	dev, reason := Device(usableFacts(), labels, Policy{OvercommitRatio: 1, ReservedBytes: 512 * mi})
	if dev == nil {
		t.Fatalf("no device: %s", reason)
	}
	if dev.Name != "swap" || dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
		t.Errorf("device %q allowMultipleAllocations %v", dev.Name, dev.AllowMultipleAllocations)
	}
	c := dev.Capacity["swap"]
	if got := c.Value.Value(); got != 4*gi-512*mi {
		t.Errorf("capacity = %d", got)
	}
	p := c.RequestPolicy
	if p.Default.Value() != gi || p.ValidRange.Min.Value() != mi || p.ValidRange.Step.Value() != mi || p.ValidRange.Max.Value() != 4*gi-512*mi {
		t.Errorf("request policy = default %v range %v..%v step %v", p.Default, p.ValidRange.Min, p.ValidRange.Max, p.ValidRange.Step)
	}
	if c.Value.String() != "3584Mi" {
		t.Errorf("capacity renders as %q, want binary units", c.Value.String())
	}
	want := map[resourceapi.QualifiedName]string{
		"swapBehavior":                  "NoSwap",
		"medium":                        "ssd",
		"topology.kubernetes.io/zone":   "zone-a",
		"topology.kubernetes.io/region": "region-1",
		"kubernetes.io/hostname":        "node-a",
	}
	for name, v := range want {
		if a, ok := dev.Attributes[name]; !ok || a.StringValue == nil || *a.StringValue != v {
			t.Errorf("attribute %s = %+v, want %q", name, a, v)
		}
	}
	ints := map[resourceapi.QualifiedName]int64{"totalBytes": 4 * gi, "devices": 1, "cgroupVersion": 2}
	for name, v := range ints {
		if a := dev.Attributes[name]; a.IntValue == nil || *a.IntValue != v {
			t.Errorf("attribute %s = %+v, want %d", name, a, v)
		}
	}
	if a := dev.Attributes["zswap"]; a.BoolValue == nil || !*a.BoolValue {
		t.Errorf("zswap = %+v", a)
	}
	for name, v := range map[resourceapi.QualifiedName]bool{"tmpfsNoswap": false, "swapPeak": true, "zswapWriteback": false} {
		if a := dev.Attributes[name]; a.BoolValue == nil || *a.BoolValue != v {
			t.Errorf("%s = %+v, want %v", name, a, v)
		}
	}
	if a := dev.Attributes["kernelVersion"]; a.VersionValue == nil || *a.VersionValue != "6.1.0" {
		t.Errorf("kernelVersion = %+v", a)
	}
	if _, ok := dev.Attributes["other.example.com/label"]; ok {
		t.Error("a label outside the topology set was copied")
	}
	if n := len(dev.Attributes) + len(dev.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		t.Errorf("%d attributes and capacities exceed the API limit", n)
	}
}

func TestDeviceDefaultRequest(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		total  int64
		want   int64
	}{
		{name: "unset is 1Gi", policy: Policy{OvercommitRatio: 1}, total: 4 * gi, want: gi},
		{name: "configured", policy: Policy{OvercommitRatio: 1, DefaultRequestBytes: 256 * mi}, total: 4 * gi, want: 256 * mi},
		{name: "rounded down to a step", policy: Policy{OvercommitRatio: 1, DefaultRequestBytes: 256*mi + 5}, total: 4 * gi, want: 256 * mi},
		{name: "tiny is one step", policy: Policy{OvercommitRatio: 1, DefaultRequestBytes: 5}, total: 4 * gi, want: mi},
		{name: "capped at the offer", policy: Policy{OvercommitRatio: 1}, total: 300 * mi, want: 300 * mi},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := usableFacts()
			f.TotalBytes = tc.total
			dev, reason := Device(f, nil, tc.policy)
			if dev == nil {
				t.Fatal(reason)
			}
			if got := dev.Capacity["swap"].RequestPolicy.Default.Value(); got != tc.want {
				t.Errorf("default = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestUnusableDevice(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(*discovery.Facts)
		policy     Policy
		wantReason string
	}{
		{name: "swap off", mutate: func(f *discovery.Facts) { f.Devices, f.TotalBytes = nil, 0 }, policy: Policy{OvercommitRatio: 1}, wantReason: "swap"},
		{name: "no control file", mutate: func(f *discovery.Facts) { f.SwapControl = false }, policy: Policy{OvercommitRatio: 1}, wantReason: "memory.swap.max"},
		{name: "reserve takes all", mutate: func(*discovery.Facts) {}, policy: Policy{OvercommitRatio: 1, ReservedBytes: 4 * gi}, wantReason: "nothing left to offer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := usableFacts()
			f.SwapBehavior = v1alpha1.SwapBehaviorLimitedSwap
			tc.mutate(&f)
			dev, reason := Device(f, map[string]string{"topology.kubernetes.io/zone": "z1"}, tc.policy)
			if dev == nil || !strings.Contains(reason, tc.wantReason) {
				t.Fatalf("Device = %v, %q; want an unusable device because of %q", dev, reason, tc.wantReason)
			}
			c := dev.Capacity[v1alpha1.CapacitySwap]
			if !c.Value.IsZero() || c.RequestPolicy != nil {
				t.Errorf("capacity = %+v, want 0 without a request policy", c)
			}
			// Both causes are told: the swap, and the kubelet's LimitedSwap.
			if got := taintList(dev); got != v1alpha1.TaintNoUsableSwap+":NoSchedule, "+v1alpha1.TaintKubeletSwapBehavior+"=LimitedSwap:NoSchedule" {
				t.Errorf("taints = %s, want %s:NoSchedule and %s=LimitedSwap:NoSchedule", got, v1alpha1.TaintNoUsableSwap, v1alpha1.TaintKubeletSwapBehavior)
			}
			if !strings.Contains(reason, "; the kubelet's swapBehavior LimitedSwap") {
				t.Errorf("reason %q does not name the kubelet's LimitedSwap after the swap's cause", reason)
			}
			if u := dev.Attributes[v1alpha1.AttrUsable].BoolValue; u == nil || *u {
				t.Errorf("usable = %v, want false", u)
			}
			// What the controller and selectors read stays published.
			if b := dev.Attributes[v1alpha1.AttrSwapBehavior].StringValue; b == nil || *b != v1alpha1.SwapBehaviorLimitedSwap {
				t.Errorf("swapBehavior = %v, want LimitedSwap", b)
			}
			if z := dev.Attributes["topology.kubernetes.io/zone"].StringValue; z == nil || *z != "z1" {
				t.Errorf("zone = %v, want z1", z)
			}
		})
	}
	dev, reason := Device(usableFacts(), nil, Policy{OvercommitRatio: 1})
	if reason != "" || len(dev.Taints) != 0 || dev.Attributes[v1alpha1.AttrUsable].BoolValue == nil || !*dev.Attributes[v1alpha1.AttrUsable].BoolValue {
		t.Errorf("usable node: reason %q, taints %v, usable %v", reason, dev.Taints, dev.Attributes[v1alpha1.AttrUsable].BoolValue)
	}
}

// taintList renders a device's taints as "key=value:effect, ...".
func taintList(dev *resourceapi.Device) string {
	var out []string
	for _, t := range dev.Taints {
		taint := t.Key
		if t.Value != "" {
			taint += "=" + t.Value
		}
		out = append(out, taint+":"+string(t.Effect))
	}
	return strings.Join(out, ", ")
}

// TestDeviceUnderSwapBehavior: a node whose kubelet gives containers
// without a claim swap of its own (LimitedSwap, KEP-5359's
// WorkloadControlledSwap) or may (Unknown) offers no swap, tainted
// kubelet-swap-behavior=<behavior> with a reason that says what the
// kubelet does and how to fix it, unless the policy names the behavior in
// UnsafeOfferUnder; NodeOffer agrees with the device.
func TestDeviceUnderSwapBehavior(t *testing.T) {
	tests := []struct {
		name     string
		behavior string
		unsafe   []string
		// wantReason: the reason holds each ("" for an offering device).
		wantReason []string
	}{
		{name: "NoSwap", behavior: "NoSwap"},
		{name: "NoSwap, unsafe behaviors listed", behavior: "NoSwap", unsafe: UnsafeSwapBehaviors()},
		{name: "LimitedSwap", behavior: "LimitedSwap", wantReason: []string{
			"the kubelet's swapBehavior LimitedSwap gives Burstable containers without a claim swap of their own",
			"promised twice", "set it to NoSwap"}},
		{name: "WorkloadControlledSwap", behavior: "WorkloadControlledSwap", wantReason: []string{
			"the kubelet's swapBehavior WorkloadControlledSwap (KEP-5359) sets containers' swap limits itself", "set it to NoSwap"}},
		{name: "Unknown", behavior: "Unknown", wantReason: []string{
			"the kubelet's swapBehavior is Unknown (its configuration cannot be read)", "promised twice",
			"point kubeletPlugin.kubeletConfig at a configuration with NoSwap"}},
		{name: "LimitedSwap offered, knowingly", behavior: "LimitedSwap", unsafe: []string{"LimitedSwap"}},
		{name: "WorkloadControlledSwap offered, knowingly", behavior: "WorkloadControlledSwap", unsafe: []string{"WorkloadControlledSwap"}},
		{name: "Unknown offered, knowingly", behavior: "Unknown", unsafe: []string{"Unknown", "LimitedSwap"}},
		{name: "only the behaviors listed", behavior: "WorkloadControlledSwap", unsafe: []string{"LimitedSwap", "Unknown"},
			wantReason: []string{"WorkloadControlledSwap (KEP-5359)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := usableFacts()
			f.SwapBehavior = tc.behavior
			p := Policy{OvercommitRatio: 1, UnsafeOfferUnder: tc.unsafe}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			dev, reason := Device(f, nil, p)
			offer, offerReason := p.NodeOffer(f)
			if offerReason != reason {
				t.Errorf("NodeOffer's reason %q, Device's %q", offerReason, reason)
			}
			if b := dev.Attributes[v1alpha1.AttrSwapBehavior].StringValue; b == nil || *b != tc.behavior {
				t.Errorf("swapBehavior attribute %v, want %s", b, tc.behavior)
			}
			c := dev.Capacity[v1alpha1.CapacitySwap]
			usable := dev.Attributes[v1alpha1.AttrUsable].BoolValue
			if tc.wantReason == nil {
				if reason != "" || c.Value.Value() != 4*gi || offer != 4*gi || len(dev.Taints) != 0 || usable == nil || !*usable {
					t.Errorf("reason %q, capacity %v, NodeOffer %d, taints %s, usable %v; want 4Gi offered, untainted", reason, c.Value, offer, taintList(dev), usable)
				}
				return
			}
			for _, want := range tc.wantReason {
				if !strings.Contains(reason, want) {
					t.Errorf("reason %q lacks %q", reason, want)
				}
			}
			if !c.Value.IsZero() || c.RequestPolicy != nil || offer != 0 || usable == nil || *usable {
				t.Errorf("capacity %+v, NodeOffer %d, usable %v; want 0 without a request policy, not usable", c, offer, usable)
			}
			if got, want := taintList(dev), v1alpha1.TaintKubeletSwapBehavior+"="+tc.behavior+":NoSchedule"; got != want {
				t.Errorf("taints %s, want %s", got, want)
			}
			// The reason is the device's health message: one short line.
			if len(reason) > 256 || strings.Contains(reason, "\n") {
				t.Errorf("reason %q is not one short line (%d bytes)", reason, len(reason))
			}
			if risk := SwapBehaviorRisk(tc.behavior); !strings.Contains(risk, "promised twice") || !strings.Contains(risk, "OOM-killed below its claim") {
				t.Errorf("SwapBehaviorRisk(%s) = %q does not say what it risks", tc.behavior, risk)
			}
		})
	}
}

func TestResources(t *testing.T) {
	dev, _ := Device(usableFacts(), nil, Policy{OvercommitRatio: 1})
	r := Resources("node-a", dev)
	pool, ok := r.Pools["node-a"]
	if !ok || len(r.Pools) != 1 || len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 1 {
		t.Fatalf("Resources = %+v", r)
	}
	empty := Resources("node-a", nil)
	if p := empty.Pools["node-a"]; len(p.Slices) != 1 || len(p.Slices[0].Devices) != 0 {
		t.Fatalf("Resources without device = %+v, want one empty slice", empty)
	}
}

// swapLimitExact says whether the container's swap limit bounds its swap
// alone (cgroup v2 memory.swap.max) or memory and swap together (v1
// memory.memsw.limit_in_bytes, under which global reclaim may swap out up
// to the memory limit on top of the claim). Published on every node,
// usable or not, so a DeviceClass can require it.
func TestSwapLimitExactAttribute(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cgroupVersion int
		totalBytes    int64
		want          bool
	}{
		{name: "cgroup v2", cgroupVersion: 2, totalBytes: 4 * gi, want: true},
		{name: "cgroup v1", cgroupVersion: 1, totalBytes: 4 * gi, want: false},
		{name: "cgroup v2 without swap", cgroupVersion: 2, want: true},
		{name: "cgroup version unknown", cgroupVersion: 0, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			facts := usableFacts()
			facts.CgroupVersion, facts.TotalBytes = tc.cgroupVersion, tc.totalBytes
			dev, _ := Device(facts, nil, Policy{OvercommitRatio: 1})
			a, ok := dev.Attributes[v1alpha1.AttrSwapLimitExact]
			if !ok || a.BoolValue == nil || *a.BoolValue != tc.want {
				t.Errorf("attribute %s = %+v (present %v), want %v", v1alpha1.AttrSwapLimitExact, a, ok, tc.want)
			}
		})
	}
}

// TestSupport: why a node cannot offload or keep pages compressed only,
// and the offload attribute that follows.
func TestSupport(t *testing.T) {
	capable := func() discovery.Facts {
		f := usableFacts()
		f.MemoryReclaim, f.MemoryPressure, f.ZswapWriteback = true, true, true
		return f
	}
	tests := []struct {
		name                    string
		facts                   func(*discovery.Facts)
		noLoop                  bool
		offload, compressedOnly string
	}{
		{name: "capable", facts: func(*discovery.Facts) {}},
		{name: "cgroup v1", facts: func(f *discovery.Facts) { f.CgroupVersion, f.MemoryReclaim, f.MemoryPressure = 1, false, false },
			offload: "it runs cgroup v1; offload needs cgroup v2", compressedOnly: "it runs cgroup v1; memory.zswap.writeback needs cgroup v2"},
		{name: "no memory.reclaim", facts: func(f *discovery.Facts) { f.MemoryReclaim = false },
			offload: "the kernel has no memory.reclaim (Linux 5.19 or later)"},
		{name: "PSI off", facts: func(f *discovery.Facts) { f.MemoryPressure = false },
			offload: "its cgroups have no memory.pressure: pressure stall information is off (boot with psi=1)"},
		{name: "the loop off", facts: func(*discovery.Facts) {}, noLoop: true,
			offload: "the kubelet plugin runs without its offload loop (--offload-interval=0; the chart's kubeletPlugin.offload.interval)"},
		{name: "no memory.zswap.writeback", facts: func(f *discovery.Facts) { f.ZswapWriteback = false },
			compressedOnly: "the kernel has no memory.zswap.writeback (Linux 6.8 or later)"},
		{name: "zswap off", facts: func(f *discovery.Facts) { f.Zswap = false },
			compressedOnly: "zswap is disabled (/sys/module/zswap/parameters/enabled; boot with zswap.enabled=1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := capable()
			tc.facts(&f)
			p := Policy{OvercommitRatio: 1, Offload: !tc.noLoop}
			s := Support(f, p)
			if s.CgroupVersion != f.CgroupVersion || s.Offload != tc.offload || s.CompressedOnly != tc.compressedOnly {
				t.Errorf("Support = %+v, want offload %q, compressed only %q", s, tc.offload, tc.compressedOnly)
			}
			dev, _ := Device(f, nil, p)
			if a := dev.Attributes[v1alpha1.AttrOffload]; a.BoolValue == nil || *a.BoolValue != (tc.offload == "") {
				t.Errorf("offload attribute = %+v, want %v", a, tc.offload == "")
			}
		})
	}
}
