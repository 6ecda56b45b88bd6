package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

// fuzzKinds are the objects the chart's webhook configurations send
// (deployments/helm/dra-driver-swap/templates/webhooks.yaml): FuzzHandlers
// picks one by index.
var fuzzKinds = []struct {
	kind        metav1.GroupVersionKind
	resource    metav1.GroupVersionResource
	subResource string
}{
	{kind: metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"}, resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}},
	{kind: metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaimTemplate"}, resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaimtemplates"}},
	{kind: metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "DeviceClass"}, resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}},
	{kind: metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}, resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, subResource: "binding"},
	{kind: metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"}, resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}, subResource: "status"},
}

// fuzzPodUID is the UID of the pod the fake clients hold.
const fuzzPodUID = "3f2e1d0c-9b8a-4766-8554-433221100fed"

var fuzzOperations = []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect}

// fuzzHandler is one of the package's admission handlers with the checks
// that are particular to it; every handler also gets checkResponse.
type fuzzHandler struct {
	name    string
	handler admission.Handler
	check   func(t *testing.T, h admission.Handler, req admission.Request, resp admission.Response)
}

// fuzzHandlers builds every handler the package serves, on fake clients,
// as handlers_test.go does. A new handler belongs here.
func fuzzHandlers(t testing.TB) []fuzzHandler {
	t.Helper()
	custom := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "fast-swap"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "dra.swap"`}}},
	}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: fuzzPodUID,
		Labels:      map[string]string{"example.com/old": "x", podlabels.Zone: "z0"},
		Annotations: map[string]string{v1alpha1.AnnotationManagedLabels: "example.com/old,,bad key," + podlabels.Zone},
	}}
	reader := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(custom, pod).Build()
	swapNode := podlabels.Node{
		Labels: map[string]string{podlabels.Zone: "z1", "example.com/rack": "r1"},
		Device: &resourceapi.Device{Name: "swap", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"swapBehavior":           {StringValue: ptr.To("LimitedSwap")},
			"kubernetes.io/hostname": {StringValue: ptr.To("host-1")},
		}},
	}
	nodes := fakeNodes{"swap-node": swapNode, "plain-node": {Labels: map[string]string{podlabels.Zone: "z1"}}}
	return []fuzzHandler{
		{
			name:    "ConfigValidator",
			handler: &ConfigValidator{Decoder: v1alpha1.NewDecoder(), Classes: reader, Offers: offer(4 << 30)},
			check:   checkConfigValidator,
		},
		{
			name: "BindingLabeler",
			handler: &BindingLabeler{Pods: reader, Claims: reader, Client: &patchChecker{}, Nodes: nodes, Selector: selectAll(true),
				Policy: podlabels.Policy{Selection: podlabels.SelectAll, Allowlist: []string{"example.com/rack"}}},
			check: checkBindingLabeler,
		},
		{
			name: "ReservationLabeler",
			handler: &ReservationLabeler{Claims: reader, Pods: reader, Client: &patchChecker{}, Nodes: nodes,
				Policy: podlabels.Policy{Selection: podlabels.SelectAll, Allowlist: []string{"example.com/rack"}}},
			check: checkReservationLabeler,
		},
	}
}

func FuzzHandlers(f *testing.F) {
	good := `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":80,"zswap":"Disabled","swappiness":10}`
	claim := func(config string) string {
		return `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c","namespace":"ns"},"spec":{"devices":{` +
			`"requests":[{"name":"swap","exactly":{"deviceClassName":"dra.swap","capacity":{"requests":{"swap":"1000Ki"}}}},` +
			`{"name":"alt","firstAvailable":[{"name":"a","deviceClassName":"fast-swap","capacity":{"requests":{"swap":"8Gi"}}}]}],` +
			`"config":[{"opaque":{"driver":"dra.swap","parameters":` + config + `}},{"opaque":{"driver":"gpu.example.com","parameters":{"x":1}}}]}}}`
	}
	// reserved is a claim allocated on swap-node and reserved for pods.
	reserved := func(pods string) string {
		return `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c","namespace":"ns"},"status":{` +
			`"allocation":{"devices":{"results":[{"request":"swap","driver":"dra.swap","pool":"swap-node","device":"swap"}]}},"reservedFor":[` + pods + `]}}`
	}
	for _, seed := range []struct {
		kind, op uint8
		name     string
		raw, old string
	}{
		{0, 0, "c", claim(good), ""},
		{0, 1, "c", claim(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":101}`), claim(good)},
		{0, 0, "c", claim(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","labelAllowlist":["a"]}`), ""},
		{0, 0, "c", claim(`{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":1,"swappiness":2}`), ""},
		{0, 0, "c", claim(`null`), ""},
		{0, 2, "c", claim(`[`), ""},
		{1, 0, "t", `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"t"},"spec":{"spec":{"devices":{"config":[{"opaque":{"driver":"dra.swap","parameters":{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":"high"}}}]}}}}`, ""},
		{2, 0, "dra.swap", `{"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":"dra.swap"},"spec":{"selectors":[{"cel":{"expression":"device.driver == \"dra.swap\""}}],"config":[{"opaque":{"driver":"dra.swap","parameters":` + good + `}}]}}`, ""},
		{2, 1, "x", `{"spec":{"config":[{"opaque":{"driver":"dra.swap","parameters":{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","zswap":"Sometimes"}}}]}}`, `{}`},
		{3, 0, "p", `{"kind":"Binding","apiVersion":"v1","metadata":{"name":"p","namespace":"ns"},"target":{"kind":"Node","name":"swap-node"}}`, ""},
		{3, 0, "p", `{"metadata":{"name":"p","namespace":"ns","labels":{"a":"b"},"annotations":{"dra.swap/managed-labels":"x"}},"target":{"name":"swap-node"}}`, ""},
		{3, 0, "p", `{"metadata":{"name":"p","namespace":"ns"},"target":{"kind":"Node","name":"plain-node"}}`, ""},
		{3, 0, "gone", `{"metadata":{"name":"gone","namespace":"ns"},"target":{"kind":"Node","name":"swap-node"}}`, ""},
		{3, 0, "p", `{"metadata":{"namespace":"ns"},"target":{"kind":"Pod","name":"broken"}}`, ""},
		{3, 1, "p", `{}`, `{}`},
		{0, 0, "", ``, ``},
		{2, 0, "", `{"spec":{"config":[{"opaque":null},{}]}}`, `garbage`},
		{1, 0, "", "\x00\xff{", ""},
		{4, 1, "c", reserved(`{"uid":"` + fuzzPodUID + `","resource":"pods","name":"p"}`), reserved(``)},
		{4, 1, "c", reserved(`{"uid":"` + fuzzPodUID + `","resource":"pods","name":"p"},{"uid":"x","resource":"pods","name":"gone"}`), reserved(`{"uid":"x","resource":"pods","name":"gone"}`)},
		{4, 1, "c", reserved(`{"uid":"other","resource":"pods","name":"p"}`), `{}`},
		{4, 1, "c", strings.Replace(reserved(`{"uid":"`+fuzzPodUID+`","resource":"pods","name":"p"}`), "swap-node", "broken", 1), `{}`},
		{4, 1, "c", reserved(`{"uid":"` + fuzzPodUID + `","resource":"pods","name":"p"}`), `[`},
	} {
		f.Add(seed.kind, seed.op, seed.name, []byte(seed.raw), []byte(seed.old))
	}
	handlers := fuzzHandlers(f)
	f.Fuzz(func(t *testing.T, kind, op uint8, name string, raw, old []byte) {
		k := fuzzKinds[int(kind)%len(fuzzKinds)]
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID:         "0b5e7c1a-1111-4222-8333-444455556666",
			Kind:        k.kind,
			Resource:    k.resource,
			SubResource: k.subResource,
			Name:        name,
			Namespace:   "ns",
			Operation:   fuzzOperations[int(op)%len(fuzzOperations)],
			Object:      runtime.RawExtension{Raw: raw},
			OldObject:   runtime.RawExtension{Raw: old},
		}}
		_, ctx := ktesting.NewTestContext(t)
		for _, h := range handlers {
			resp := h.handler.Handle(ctx, req)
			checkResponse(t, h.name, req, resp)
			if h.check != nil {
				h.check(t, h.handler, req, resp)
			}
		}
	})
}

// checkResponse checks what every admission response must be: allowed
// with a success code, or denied with a failure code; patches only when
// allowed; and it completes into an AdmissionReview response.
func checkResponse(t *testing.T, name string, req admission.Request, resp admission.Response) {
	t.Helper()
	if resp.Allowed {
		if resp.Result != nil && resp.Result.Code != 0 && (resp.Result.Code < 200 || resp.Result.Code > 299) {
			t.Fatalf("%s allowed %s with code %d: %+v", name, req.Object.Raw, resp.Result.Code, resp.Result)
		}
	} else {
		if resp.Result == nil || resp.Result.Code < 400 || resp.Result.Code > 599 {
			t.Fatalf("%s denied %s without a failure code: %+v", name, req.Object.Raw, resp.Result)
		}
		if len(resp.Patches) > 0 {
			t.Fatalf("%s denied %s with patches %+v", name, req.Object.Raw, resp.Patches)
		}
	}
	if err := resp.Complete(req); err != nil {
		t.Fatalf("%s: response to %s does not complete: %v", name, req.Object.Raw, err)
	}
	if resp.UID != req.UID || (len(resp.Patch) > 0) != (resp.PatchType != nil) {
		t.Fatalf("%s: response to %s is malformed: %+v", name, req.Object.Raw, resp.AdmissionResponse)
	}
}

// checkConfigValidator: the validator allows exactly the objects whose
// dra.swap opaque configurations all decode strictly (for the kinds it
// checks, on create and update), and never patches. It decodes only what
// it checks (decode.go), so an object that does not decode whole may be
// judged on its configs too; one whose checked fields do not decode is
// refused with 400.
func checkConfigValidator(t *testing.T, _ admission.Handler, req admission.Request, resp admission.Response) {
	t.Helper()
	if len(resp.Patches) > 0 {
		t.Fatalf("validator patched %s: %+v", req.Object.Raw, resp.Patches)
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		if !resp.Allowed {
			t.Fatalf("validator denied a %s: %+v", req.Operation, resp.Result)
		}
		return
	}
	var configs []*resourceapi.OpaqueDeviceConfiguration
	var err, viewErr error
	var overLimits bool
	switch req.Kind.Kind {
	case "ResourceClaim":
		var claim resourceapi.ResourceClaim
		if err = json.Unmarshal(req.Object.Raw, &claim); err == nil {
			for _, c := range claim.Spec.Devices.Config {
				configs = append(configs, c.Opaque)
			}
		}
		view := &claimView{}
		viewErr = json.Unmarshal(req.Object.Raw, view)
		overLimits = view.Spec.overLimits()
	case "ResourceClaimTemplate":
		var tmpl resourceapi.ResourceClaimTemplate
		if err = json.Unmarshal(req.Object.Raw, &tmpl); err == nil {
			for _, c := range tmpl.Spec.Spec.Devices.Config {
				configs = append(configs, c.Opaque)
			}
		}
		view := &templateView{}
		viewErr = json.Unmarshal(req.Object.Raw, view)
		overLimits = view.Spec.Spec.overLimits()
	case "DeviceClass":
		var class resourceapi.DeviceClass
		if err = json.Unmarshal(req.Object.Raw, &class); err == nil {
			for _, c := range class.Spec.Config {
				configs = append(configs, c.Opaque)
			}
		}
		view := &classView{}
		viewErr = json.Unmarshal(req.Object.Raw, view)
		overLimits = view.Spec.Config.over()
	default:
		if !resp.Allowed {
			t.Fatalf("validator denied a %s it does not check: %+v", req.Kind.Kind, resp.Result)
		}
		return
	}
	switch {
	case viewErr != nil:
		if resp.Allowed || resp.Result.Code != http.StatusBadRequest {
			t.Fatalf("validator answered a %s whose checked fields do not decode (%v) with %+v, want code 400", req.Kind.Kind, viewErr, resp.Result)
		}
		return
	case err != nil:
		return // judged on what it checks
	case overLimits:
		if resp.Allowed {
			t.Fatalf("validator allowed a %s over the API's limits: %s", req.Kind.Kind, req.Object.Raw)
		}
		return
	}
	d := v1alpha1.NewDecoder()
	var bad []string
	for i, o := range configs {
		if o == nil || o.Driver != v1alpha1.DriverName {
			continue
		}
		if _, err := d.Decode(o.Parameters.Raw); err != nil {
			bad = append(bad, fmt.Sprintf("config %d: %v", i, err))
		}
	}
	switch {
	case resp.Allowed && len(bad) > 0:
		t.Fatalf("validator allowed a %s with dra.swap configs that do not decode strictly (%s): %s", req.Kind.Kind, strings.Join(bad, "; "), req.Object.Raw)
	case !resp.Allowed && len(bad) == 0:
		t.Fatalf("validator denied a %s whose dra.swap configs all decode: %+v: %s", req.Kind.Kind, resp.Result, req.Object.Raw)
	}
}

// checkBindingLabeler: the labeler never denies a binding whose fields it
// reads decode, and on a binding as the API server sends it (the encoding of its Go
// type) it changes nothing but labels and annotations.
func checkBindingLabeler(t *testing.T, h admission.Handler, req admission.Request, resp admission.Response) {
	t.Helper()
	var binding corev1.Binding
	decodeErr := json.Unmarshal(req.Object.Raw, &binding)
	viewErr := json.Unmarshal(req.Object.Raw, &bindingView{})
	isBinding := req.Operation == admissionv1.Create && req.SubResource == "binding"
	switch {
	case !isBinding || viewErr == nil:
		if !resp.Allowed {
			t.Fatalf("labeler denied %s %s: %+v", req.Operation, req.Object.Raw, resp.Result)
		}
	default:
		if resp.Allowed || resp.Result.Code != http.StatusBadRequest {
			t.Fatalf("labeler answered a binding whose target does not decode (%v) with %+v, want code 400", viewErr, resp.Result)
		}
	}
	if !isBinding || decodeErr != nil {
		if len(resp.Patches) > 0 {
			t.Fatalf("labeler patched %s %s: %+v", req.Operation, req.Object.Raw, resp.Patches)
		}
		return
	}
	canonical, err := json.Marshal(&binding)
	if err != nil {
		t.Fatal(err)
	}
	creq := req
	creq.Object = runtime.RawExtension{Raw: canonical}
	_, ctx := ktesting.NewTestContext(t)
	cresp := h.Handle(ctx, creq)
	if !cresp.Allowed {
		t.Fatalf("labeler denied canonical binding %s: %+v", canonical, cresp.Result)
	}
	for _, p := range cresp.Patches {
		if !strings.HasPrefix(p.Path, "/metadata/labels") && !strings.HasPrefix(p.Path, "/metadata/annotations") {
			t.Fatalf("labeler's patch of canonical binding %s touches %s: %+v", canonical, p.Path, cresp.Patches)
		}
	}
}

// checkReservationLabeler: the labeler never denies a claim whose fields
// it reads decode (it labels pods on the side; patchChecker checks those
// patches).
func checkReservationLabeler(t *testing.T, h admission.Handler, req admission.Request, resp admission.Response) {
	t.Helper()
	if pc, ok := h.(*ReservationLabeler).Client.(*patchChecker); ok && pc.problem != "" {
		problem := pc.problem
		pc.problem = ""
		t.Fatalf("reservation labeler, for %s (old %s): %s", req.Object.Raw, req.OldObject.Raw, problem)
	}
	if len(resp.Patches) > 0 {
		t.Fatalf("reservation labeler patched the claim: %+v", resp.Patches)
	}
	if resp.Allowed {
		return
	}
	isReservation := req.Operation == admissionv1.Update && req.SubResource == "status" && req.Kind.Kind == "ResourceClaim"
	if !isReservation || json.Unmarshal(req.Object.Raw, &claimStatusView{}) == nil && json.Unmarshal(req.OldObject.Raw, &claimStatusView{}) == nil {
		t.Fatalf("reservation labeler denied %s %s (old %s): %+v", req.Operation, req.Object.Raw, req.OldObject.Raw, resp.Result)
	}
	if resp.Result.Code != http.StatusBadRequest {
		t.Fatalf("reservation labeler answered an undecodable claim with %+v, want code 400", resp.Result)
	}
}

// patchChecker is the ReservationLabeler's client: it checks that every
// patch is a merge patch of the pod's labels and the driver's annotation,
// writes nothing and keeps the first problem for the fuzz target. Other
// writes panic (through the nil Writer).
type patchChecker struct {
	client.Writer
	problem string
}

func (p *patchChecker) Patch(_ context.Context, obj client.Object, patch client.Patch, _ ...client.PatchOption) error {
	if problem := checkPodPatch(obj, patch); problem != "" && p.problem == "" {
		p.problem = problem
	}
	return nil
}

func checkPodPatch(obj client.Object, patch client.Patch) string {
	data, err := patch.Data(obj)
	if err != nil {
		return fmt.Sprintf("patch of pod %s: %v", obj.GetName(), err)
	}
	var merge struct {
		Metadata struct {
			Labels      map[string]*string `json:"labels"`
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if patch.Type() != types.MergePatchType || dec.Decode(&merge) != nil {
		return fmt.Sprintf("patch of pod %s is not a merge patch of its metadata: %s %s", obj.GetName(), patch.Type(), data)
	}
	for k := range merge.Metadata.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Sprintf("patch of pod %s sets label %q: %v", obj.GetName(), k, errs)
		}
	}
	for k := range merge.Metadata.Annotations {
		if k != v1alpha1.AnnotationManagedLabels {
			return fmt.Sprintf("patch of pod %s changes annotation %q", obj.GetName(), k)
		}
	}
	return ""
}
