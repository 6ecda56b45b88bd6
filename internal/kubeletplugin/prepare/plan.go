package prepare

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// resultPlan is what prepare decided for one allocation result of the
// driver in a claim.
type resultPlan struct {
	// index is the result's index in the claim's allocation: it names the
	// result's CDI device and the hook's record of its share.
	index  int
	result resourceapi.DeviceRequestAllocationResult
	// settings are what the result grants each container it reaches: its
	// consumed capacity and its config's knobs (see settingsFor); none
	// for an admin-access result, which the scheduler does not charge.
	settings swapsettings.Settings
	admin    bool
	// config is the SwapConfig that applies to the result.
	config *v1alpha1.SwapConfig
}

// request is the name of the claim's request the result belongs to (a
// subrequest's parent), as containers reference it.
func (r resultPlan) request() string { return resourceclaim.BaseRequestRef(r.result.Request) }

// plan validates a claim's allocation and configuration without I/O.
func (m *Manager) plan(claim *resourceapi.ResourceClaim) (*claimPlan, error) {
	if claim.Status.Allocation == nil {
		return nil, errors.New("claim is not allocated")
	}
	alloc := claim.Status.Allocation.Devices
	plan := &claimPlan{claim: claim}
	for i, r := range alloc.Results {
		if r.Driver != m.opts.DriverName {
			continue
		}
		if r.Pool != m.opts.PoolName || r.Device != v1alpha1.DeviceName {
			return nil, fmt.Errorf("request %q was allocated device %s/%s, which is not this node's swap device %s/%s",
				r.Request, r.Pool, r.Device, m.opts.PoolName, v1alpha1.DeviceName)
		}
		rp := resultPlan{index: i, result: r}
		if r.AdminAccess != nil && *r.AdminAccess {
			rp.admin = true
			plan.results = append(plan.results, rp)
			continue
		}
		q, ok := r.ConsumedCapacity[v1alpha1.CapacitySwap]
		if !ok {
			return nil, fmt.Errorf("request %q has no consumed %q capacity: the cluster must allocate consumable capacity (DRAConsumableCapacity, on by default from Kubernetes 1.36)", r.Request, v1alpha1.CapacitySwap)
		}
		b := q.Value()
		if b == 0 {
			return nil, fmt.Errorf("request %q consumed no swap: the node offers none (its device carries the taint %s or %s, which the claim tolerates)",
				r.Request, v1alpha1.TaintNoUsableSwap, v1alpha1.TaintKubeletSwapBehavior)
		}
		if b < 0 || b > limits.MaxSwapBytes {
			return nil, fmt.Errorf("request %q consumed %s of swap, outside 1..%d bytes", r.Request, q.String(), limits.MaxSwapBytes)
		}
		config, err := m.config(claim, alloc.Config, r)
		if err != nil {
			return nil, err
		}
		rp.settings, rp.config = settingsFor(b, config), config
		plan.limitBytes += b
		plan.results = append(plan.results, rp)
	}
	if len(plan.results) == 0 {
		return nil, fmt.Errorf("no device of driver %s is allocated to the claim", m.opts.DriverName)
	}
	return plan, nil
}

// settingsFor is what a result that grants limitBytes gives each
// container it reaches under its (decoded, validated and merged) config:
// the one place where a claim's SwapConfig and allocation become the
// settings that the CDI spec carries to the hook.
func settingsFor(limitBytes int64, config *v1alpha1.SwapConfig) swapsettings.Settings {
	s := swapsettings.Settings{LimitBytes: limitBytes}
	if p := config.SwapHighPercent; p != nil {
		high := limitBytes * int64(*p) / 100
		s.HighBytes = &high
	}
	switch config.Zswap {
	case v1alpha1.ZswapEnabled:
		s.Zswap = swapsettings.ZswapOn
	case v1alpha1.ZswapDisabled:
		s.Zswap = swapsettings.ZswapOff
	case v1alpha1.ZswapCompressedOnly:
		s.ZswapWritebackOff = true
	}
	if o := config.Offload; o != nil {
		// Merge filled in the default; validated to 1..10000.
		budget := int32(v1alpha1.DefaultMaxStall)
		if o.MaxStallPercent != nil {
			budget = int32(*o.MaxStallPercent)
		}
		s.OffloadMaxStall = &budget
	}
	if v := config.Swappiness; v != nil {
		// Validated to 0..100; a negative value would turn huge here
		// and be refused by the CDI writer, not applied.
		u := uint64(*v)
		s.Swappiness = &u
	}
	return s
}

// config decodes and merges the driver's opaque configs that apply to one
// allocation result, the way resourceclaim.ConfigForResult matches them (a
// config naming a request applies to the subrequest the scheduler chose
// for it): those of the DeviceClass first, then the claim's. Errors name
// the config the way the user wrote it.
func (m *Manager) config(claim *resourceapi.ResourceClaim, configs []resourceapi.DeviceAllocationConfiguration, result resourceapi.DeviceRequestAllocationResult) (*v1alpha1.SwapConfig, error) {
	applicable := resourceclaim.ConfigForResult(configs, result)
	slices.SortStableFunc(applicable, func(a, b resourceapi.DeviceAllocationConfiguration) int {
		return cmp.Compare(sourceRank(a.Source), sourceRank(b.Source))
	})
	var decoded []*v1alpha1.SwapConfig
	for _, c := range applicable {
		if c.Opaque == nil || c.Opaque.Driver != m.opts.DriverName {
			continue
		}
		where, path := configSource(claim, c, result)
		sc, errs := m.decoder.DecodeField(c.Opaque.Parameters.Raw, path)
		if len(errs) > 0 {
			return nil, fmt.Errorf("%s%w", where, errs.ToAggregate())
		}
		if errs = sc.ValidateForNode(m.opts.Node.Support()); len(errs) > 0 {
			for _, e := range errs {
				e.Field = path.String() + "." + e.Field
			}
			return nil, fmt.Errorf("%s%w", where, errs.ToAggregate())
		}
		decoded = append(decoded, sc)
	}
	return v1alpha1.Merge(decoded...), nil
}

// configSource names an allocation's config entry the way the user wrote
// it: a prefix for messages ("" for the claim's own config, which the
// caller's error already names) and the field path of its parameters: the
// claim's spec.devices.config[i] (found by content, since the allocation
// drops entries for other subrequests and puts the classes' first), or the
// spec.config of the DeviceClass of the result's request.
func configSource(claim *resourceapi.ResourceClaim, c resourceapi.DeviceAllocationConfiguration, result resourceapi.DeviceRequestAllocationResult) (string, *field.Path) {
	if c.Source == resourceapi.AllocationConfigSourceClass {
		return fmt.Sprintf("DeviceClass %s (its config for request %q): ", classOf(claim, result.Request), result.Request),
			field.NewPath("spec", "config").Child("opaque", "parameters")
	}
	for i, uc := range claim.Spec.Devices.Config {
		if slices.Equal(uc.Requests, c.Requests) && equality.Semantic.DeepEqual(uc.DeviceConfiguration, c.DeviceConfiguration) {
			return "", field.NewPath("spec", "devices", "config").Index(i).Child("opaque", "parameters")
		}
	}
	return "", field.NewPath("spec", "devices", "config").Child("opaque", "parameters")
}

// classOf is the DeviceClass of a request or subrequest of the claim.
func classOf(claim *resourceapi.ResourceClaim, requestRef string) string {
	base := resourceclaim.BaseRequestRef(requestRef)
	for _, r := range claim.Spec.Devices.Requests {
		if r.Name != base {
			continue
		}
		if r.Exactly != nil {
			return r.Exactly.DeviceClassName
		}
		for _, sub := range r.FirstAvailable {
			if resourceclaim.CreateSubRequestRef(base, sub.Name) == requestRef {
				return sub.DeviceClassName
			}
		}
	}
	return "(unknown)"
}

func sourceRank(s resourceapi.AllocationConfigSource) int {
	if s == resourceapi.AllocationConfigSourceClass {
		return 0
	}
	return 1
}
