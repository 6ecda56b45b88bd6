package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// OfferSource tells the largest swap capacity any node offers.
type OfferSource interface {
	LargestOffer(ctx context.Context) (int64, error)
}

// SupportSource tells how many nodes can apply the SwapConfig fields that
// need more than cgroup v2 (their swap devices' attributes).
type SupportSource interface {
	Support(ctx context.Context) (NodeSupport, error)
}

// NodeSupport counts the nodes that publish a swap device, and those whose
// device says they offload (attribute offload) and can keep pages
// compressed only (zswap and zswapWriteback).
type NodeSupport struct {
	Nodes, Offload, CompressedOnly int
}

// ConfigValidator is the validating handler for ResourceClaims,
// ResourceClaimTemplates and DeviceClasses: it rejects dra.swap opaque
// configuration that does not decode strictly or does not validate, and
// warns about swap requests that are rounded or cannot fit any node, and
// about offload or compressed-only swap that no node can apply now.
type ConfigValidator struct {
	Decoder *v1alpha1.Decoder
	// Classes reads DeviceClasses (the cache), to tell swap requests.
	Classes client.Reader
	Offers  OfferSource
	// Support, if set, tells which nodes can apply offload and
	// compressed-only swap.
	Support SupportSource
}

var resourceGroup = resourceapi.SchemeGroupVersion.Group

// Handle implements admission.Handler.
func (v *ConfigValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var (
		errs     field.ErrorList
		warnings []string
		gk       = schema.GroupKind{Group: resourceGroup, Kind: req.Kind.Kind}
		call     = &review{v: v}
	)
	// Each object is decoded into the view of what is checked (decode.go):
	// lists are counted before they are decoded.
	switch req.Kind.Kind {
	case "ResourceClaim":
		claim := &claimView{}
		if err := json.Unmarshal(req.Object.Raw, claim); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode ResourceClaim: %w", err))
		}
		errs, warnings = call.claimSpec(ctx, &claim.Spec, field.NewPath("spec"))
	case "ResourceClaimTemplate":
		tmpl := &templateView{}
		if err := json.Unmarshal(req.Object.Raw, tmpl); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode ResourceClaimTemplate: %w", err))
		}
		errs, warnings = call.claimSpec(ctx, &tmpl.Spec.Spec, field.NewPath("spec", "spec"))
	case "DeviceClass":
		class := &classView{}
		if err := json.Unmarshal(req.Object.Raw, class); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode DeviceClass: %w", err))
		}
		if class.Spec.Config.over() {
			errs = append(errs, field.TooMany(field.NewPath("spec", "config"), class.Spec.Config.Count, MaxConfigs))
			break
		}
		for i, c := range class.Spec.Config.Items {
			path := field.NewPath("spec", "config").Index(i).Child("opaque")
			config, cerrs := v.opaque(c, path)
			errs = append(errs, cerrs...)
			warnings = append(warnings, call.supportWarnings(ctx, config, path.Child("parameters"))...)
		}
	default:
		return admission.Allowed("not a kind this webhook checks")
	}
	if len(errs) > 0 {
		status := apierrors.NewInvalid(gk, req.Name, errs).Status()
		return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}.WithWarnings(warnings...)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// opaque checks one opaque configuration, if it is the driver's, and
// returns it decoded (nil when it is another driver's or invalid).
func (v *ConfigValidator) opaque(c configView, path *field.Path) (*v1alpha1.SwapConfig, field.ErrorList) {
	if c.Opaque == nil || c.Opaque.Driver != v1alpha1.DriverName {
		return nil, nil
	}
	params := []byte(c.Opaque.Parameters)
	if string(params) == "null" {
		params = nil // as runtime.RawExtension decodes it
	}
	return v.Decoder.DecodeField(params, path.Child("parameters"))
}

// review is one review's state: the largest offer and the classes
// looked at, each read once.
type review struct {
	v       *ConfigValidator
	largest *int64
	classes map[string]bool
	support *NodeSupport
}

// claimSpec checks a claim spec's dra.swap configs and warns about its
// swap requests. A spec over the API's limits (more requests, subrequests
// or configs than the API server accepts, so not one it sends) is refused
// from the lists' counts, without their elements being decoded.
func (c *review) claimSpec(ctx context.Context, spec *claimSpecView, path *field.Path) (field.ErrorList, []string) {
	var errs field.ErrorList
	devPath := path.Child("devices")
	requests, configs := &spec.Devices.Requests, &spec.Devices.Config
	if requests.over() {
		errs = append(errs, field.TooMany(devPath.Child("requests"), requests.Count, MaxRequests))
	}
	if configs.over() {
		errs = append(errs, field.TooMany(devPath.Child("config"), configs.Count, MaxConfigs))
	}
	for i, r := range requests.Items {
		if r.FirstAvailable.over() {
			errs = append(errs, field.TooMany(devPath.Child("requests").Index(i).Child("firstAvailable"), r.FirstAvailable.Count, MaxSubRequests))
		}
	}
	if len(errs) > 0 {
		return errs, nil
	}
	var warnings []string
	for i, cfg := range configs.Items {
		p := devPath.Child("config").Index(i).Child("opaque")
		config, cerrs := c.v.opaque(cfg, p)
		errs = append(errs, cerrs...)
		warnings = append(warnings, c.supportWarnings(ctx, config, p.Child("parameters"))...)
	}
	check := func(r *classRequestView, p *field.Path) {
		q, ok := r.swap()
		if !ok || !c.isSwapClass(ctx, r.DeviceClassName) {
			return
		}
		warnings = append(warnings, c.requestWarnings(ctx, q, p.Child("capacity", "requests", string(v1alpha1.CapacitySwap)))...)
	}
	for i := range requests.Items {
		r := &requests.Items[i]
		p := devPath.Child("requests").Index(i)
		if r.Exactly != nil {
			check(r.Exactly, p.Child("exactly"))
		}
		for j := range r.FirstAvailable.Items {
			check(&r.FirstAvailable.Items[j], p.Child("firstAvailable").Index(j))
		}
	}
	return errs, warnings
}

// requestWarnings: rounding up to the step, and more than any node offers.
func (c *review) requestWarnings(ctx context.Context, q resource.Quantity, p *field.Path) []string {
	var out []string
	b := q.Value()
	if rem := b % v1alpha1.CapacityStep; rem != 0 && b > 0 {
		rounded := resource.NewQuantity((b/v1alpha1.CapacityStep+1)*v1alpha1.CapacityStep, resource.BinarySI)
		out = append(out, fmt.Sprintf("%s: %s is not a multiple of 1Mi; it is rounded up to %s", p, q.String(), rounded.String()))
	}
	largest, ok := c.largestOffer(ctx)
	if !ok {
		return out
	}
	if b > largest {
		if largest == 0 {
			out = append(out, fmt.Sprintf("%s: %s exceeds the largest swap any node offers: no node offers swap now", p, q.String()))
		} else {
			out = append(out, fmt.Sprintf("%s: %s exceeds the largest swap any node offers (%s); the claim stays unallocated until a node offers that much",
				p, q.String(), resource.NewQuantity(largest, resource.BinarySI).String()))
		}
	}
	return out
}

// supportWarnings: offload or compressed-only swap that no node can apply
// now. The claim would be allocated on a node whatever it asks (unless
// its selectors choose the capable ones) and fail to prepare there.
func (c *review) supportWarnings(ctx context.Context, config *v1alpha1.SwapConfig, p *field.Path) []string {
	if config == nil || config.Offload == nil && config.Zswap != v1alpha1.ZswapCompressedOnly || c.v.Support == nil {
		return nil
	}
	if c.support == nil {
		s, err := c.v.Support.Support(ctx)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot tell which nodes offload")
			s = NodeSupport{Nodes: -1}
		}
		c.support = &s
	}
	s := c.support
	if s.Nodes <= 0 {
		return nil // no node publishes yet (or unknown): nothing to tell
	}
	var out []string
	if config.Offload != nil && s.Offload == 0 {
		out = append(out, fmt.Sprintf("%s: no node offloads now (none of the %d nodes' swap devices has %s true: cgroup v2, memory.reclaim, pressure stall information and the plugin's offload loop); "+
			"select such nodes with device.attributes[%q].%s, or the claim fails to prepare where it is allocated", p.Child("offload"), s.Nodes, v1alpha1.AttrOffload, v1alpha1.DriverName, v1alpha1.AttrOffload))
	}
	if config.Zswap == v1alpha1.ZswapCompressedOnly && s.CompressedOnly == 0 {
		out = append(out, fmt.Sprintf("%s: no node can keep pages compressed only now (none of the %d nodes' swap devices has %s and %s true: zswap on, Linux 6.8 or later); "+
			"the claim fails to prepare where it is allocated", p.Child("zswap"), s.Nodes, v1alpha1.AttrZswap, v1alpha1.AttrZswapWriteback))
	}
	return out
}

// largestOffer asks the OfferSource once per review; false when there is
// none or it fails.
func (c *review) largestOffer(ctx context.Context) (int64, bool) {
	if c.v.Offers == nil {
		return 0, false
	}
	if c.largest == nil {
		largest, err := c.v.Offers.LargestOffer(ctx)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot tell the largest swap offer")
			largest = -1
		}
		c.largest = &largest
	}
	return *c.largest, *c.largest >= 0
}

// isSwapClass is ConfigValidator.isSwapClass, once per class name.
func (c *review) isSwapClass(ctx context.Context, name string) bool {
	if c.classes == nil {
		c.classes = map[string]bool{}
	}
	is, ok := c.classes[name]
	if !ok {
		is = c.v.isSwapClass(ctx, name)
		c.classes[name] = is
	}
	return is
}

// isSwapClass tells a DeviceClass that selects the driver's devices: one
// named after the driver, or whose CEL selectors or config name it.
func (v *ConfigValidator) isSwapClass(ctx context.Context, name string) bool {
	if name == v1alpha1.DriverName {
		return true
	}
	if v.Classes == nil || name == "" {
		return false
	}
	class := &resourceapi.DeviceClass{}
	if err := v.Classes.Get(ctx, types.NamespacedName{Name: name}, class); err != nil {
		return false
	}
	for _, s := range class.Spec.Selectors {
		if s.CEL != nil && (strings.Contains(s.CEL.Expression, `"`+v1alpha1.DriverName+`"`) || strings.Contains(s.CEL.Expression, `'`+v1alpha1.DriverName+`'`)) {
			return true
		}
	}
	for _, c := range class.Spec.Config {
		if c.Opaque != nil && c.Opaque.Driver == v1alpha1.DriverName {
			return true
		}
	}
	return false
}
