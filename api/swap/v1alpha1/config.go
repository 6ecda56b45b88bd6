package v1alpha1

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits of the fields, shared by validation and documentation.
const (
	MinSwapHighPercent = 1
	MaxSwapHighPercent = 100
	MinSwappiness      = 0
	MaxSwappiness      = 100
)

// Decoder decodes SwapConfig objects strictly. It is safe for concurrent
// use; create one with NewDecoder and keep it.
type Decoder struct {
	serializer *json.Serializer
}

// NewDecoder returns a strict decoder for dra.swap/v1alpha1 SwapConfig.
func NewDecoder() *Decoder {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(SchemeGroupVersion, &SwapConfig{})
	return &Decoder{serializer: json.NewSerializerWithOptions(
		json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Yaml: false, Pretty: false, Strict: true},
	)}
}

// Decode decodes raw JSON (as found in an opaque device configuration's
// parameters), applies defaults and validates the result. Unknown or
// duplicate fields, another apiVersion or kind, and invalid values are
// errors that name the field.
func (d *Decoder) Decode(raw []byte) (*SwapConfig, error) {
	if len(raw) == 0 {
		return nil, errors.New("empty parameters: expected a dra.swap/v1alpha1 SwapConfig")
	}
	obj, gvk, err := d.serializer.Decode(raw, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decode dra.swap/v1alpha1 SwapConfig: %w", err)
	}
	config, ok := obj.(*SwapConfig)
	if !ok {
		return nil, fmt.Errorf("decode dra.swap/v1alpha1 SwapConfig: unexpected kind %s", gvk)
	}
	config.Default()
	if errs := config.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid dra.swap/v1alpha1 SwapConfig: %w", errs.ToAggregate())
	}
	return config, nil
}

// DecodeField is Decode for admission: the errors are field errors rooted
// at fldPath (the opaque parameters' path in the object under review), so
// that a rejection names the exact field and the reason.
func (d *Decoder) DecodeField(raw []byte, fldPath *field.Path) (*SwapConfig, field.ErrorList) {
	if len(raw) == 0 {
		return nil, field.ErrorList{field.Required(fldPath, "a dra.swap/v1alpha1 SwapConfig")}
	}
	obj, gvk, err := d.serializer.Decode(raw, nil, nil)
	if err != nil {
		return nil, field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, fmt.Sprintf("decode dra.swap/v1alpha1 SwapConfig: %v", err))}
	}
	config, ok := obj.(*SwapConfig)
	if !ok {
		return nil, field.ErrorList{field.Invalid(fldPath, gvk.String(), "expected a dra.swap/v1alpha1 SwapConfig")}
	}
	config.Default()
	errs := config.Validate()
	for _, e := range errs {
		e.Field = fldPath.String() + "." + e.Field
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return config, nil
}

// Default fills in the defaults of unset fields.
func (c *SwapConfig) Default() {
	if c.Zswap == "" {
		c.Zswap = ZswapInherit
	}
}

// Validate checks every field and returns all problems found, each naming
// its field.
func (c *SwapConfig) Validate() field.ErrorList {
	var errs field.ErrorList
	if p := c.SwapHighPercent; p != nil && (*p < MinSwapHighPercent || *p > MaxSwapHighPercent) {
		errs = append(errs, field.Invalid(field.NewPath("swapHighPercent"), *p,
			fmt.Sprintf("must be between %d and %d", MinSwapHighPercent, MaxSwapHighPercent)))
	}
	switch c.Zswap {
	case "", ZswapInherit, ZswapEnabled, ZswapDisabled, ZswapCompressedOnly:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("zswap"), c.Zswap,
			[]ZswapMode{ZswapInherit, ZswapEnabled, ZswapDisabled, ZswapCompressedOnly}))
	}
	if s := c.Swappiness; s != nil && (*s < MinSwappiness || *s > MaxSwappiness) {
		errs = append(errs, field.Invalid(field.NewPath("swappiness"), *s,
			fmt.Sprintf("must be between %d and %d", MinSwappiness, MaxSwappiness)))
	}
	if c.Offload != nil {
		if p := c.Offload.MaxStallPercent; p != nil && (*p < MinStallPercent || *p > MaxStallPercent) {
			errs = append(errs, field.Invalid(field.NewPath("offload", "maxStallPercent"), p.String(),
				fmt.Sprintf("must be between %s and %s (percent of wall time)", MinStallPercent, MaxStallPercent)))
		}
	}
	return errs
}

// ValidateForCgroupVersion reports the fields that the node's cgroup
// version (1 or 2) cannot apply.
func (c *SwapConfig) ValidateForCgroupVersion(version int) field.ErrorList {
	var errs field.ErrorList
	switch version {
	case 1:
		if c.SwapHighPercent != nil {
			errs = append(errs, field.Forbidden(field.NewPath("swapHighPercent"),
				"memory.swap.high exists only on cgroup v2; this node uses cgroup v1"))
		}
		switch c.Zswap {
		case "", ZswapInherit:
		case ZswapCompressedOnly:
			errs = append(errs, field.Forbidden(field.NewPath("zswap"),
				"CompressedOnly needs memory.zswap.writeback, which exists only on cgroup v2; this node uses cgroup v1"))
		default:
			errs = append(errs, field.Forbidden(field.NewPath("zswap"),
				"memory.zswap.max exists only on cgroup v2; this node uses cgroup v1"))
		}
		if c.Offload != nil {
			errs = append(errs, field.Forbidden(field.NewPath("offload"),
				"offload needs cgroup v2 (memory.reclaim and memory.pressure); this node uses cgroup v1"))
		}
	case 2:
		if c.Swappiness != nil {
			errs = append(errs, field.Forbidden(field.NewPath("swappiness"),
				"cgroup v2 has no per-cgroup swappiness; this node uses cgroup v2"))
		}
	default:
		errs = append(errs, field.InternalError(nil, fmt.Errorf("unknown cgroup version %d", version)))
	}
	return errs
}

// NodeSupport is what a node can apply of a SwapConfig: its cgroup
// version, and for each feature that depends on more than that, why the
// node cannot apply it ("" when it can).
type NodeSupport struct {
	CgroupVersion int
	// Offload says why the node cannot offload (no memory.reclaim, no
	// PSI, the plugin's loop off), "" when it can.
	Offload string
	// CompressedOnly says why the node cannot keep pages compressed only
	// (no memory.zswap.writeback, zswap disabled), "" when it can.
	CompressedOnly string
}

// ValidateForNode reports the fields that the node cannot apply: those
// of ValidateForCgroupVersion, then the features NodeSupport says it
// lacks, each naming its field and the reason.
func (c *SwapConfig) ValidateForNode(n NodeSupport) field.ErrorList {
	errs := c.ValidateForCgroupVersion(n.CgroupVersion)
	if len(errs) > 0 || n.CgroupVersion != 2 {
		return errs
	}
	if c.Offload != nil && n.Offload != "" {
		errs = append(errs, field.Forbidden(field.NewPath("offload"), "this node cannot offload: "+n.Offload))
	}
	if c.Zswap == ZswapCompressedOnly && n.CompressedOnly != "" {
		errs = append(errs, field.Forbidden(field.NewPath("zswap"), "this node cannot keep pages compressed only: "+n.CompressedOnly))
	}
	return errs
}

// Merge overlays configs in order: a field set in a later config replaces
// the same field of an earlier one (offload's fields one by one). DeviceClass configs come first, then
// the claim's, so a claim can refine what its class sets. Merge returns a
// defaulted config; nil inputs are skipped.
func Merge(configs ...*SwapConfig) *SwapConfig {
	out := &SwapConfig{}
	out.APIVersion, out.Kind = SchemeGroupVersion.String(), Kind
	for _, c := range configs {
		if c == nil {
			continue
		}
		if c.SwapHighPercent != nil {
			v := *c.SwapHighPercent
			out.SwapHighPercent = &v
		}
		if c.Zswap != "" && c.Zswap != ZswapInherit {
			out.Zswap = c.Zswap
		}
		if c.Swappiness != nil {
			v := *c.Swappiness
			out.Swappiness = &v
		}
		if c.Offload != nil {
			if out.Offload == nil {
				out.Offload = &Offload{}
			}
			if p := c.Offload.MaxStallPercent; p != nil {
				v := *p
				out.Offload.MaxStallPercent = &v
			}
		}
	}
	out.Default()
	// The config in effect says what applies: the budget's default too
	// (not in Default, which each config gets, so that a claim's
	// "offload: {}" keeps its class's budget).
	if out.Offload != nil && out.Offload.MaxStallPercent == nil {
		v := DefaultMaxStall
		out.Offload.MaxStallPercent = &v
	}
	return out
}
