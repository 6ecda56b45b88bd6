package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Limits on the work one admission review, and all of them together, may
// cause. Anyone who reaches the webhook Service can post a review, so the
// handlers take nothing in it at its word and bound every loop by what the
// API server itself allows in an object it sends (a review outside these
// limits was not sent by the API server: it is refused or ignored, never
// worked through), and a replica works on a bounded number of reviews at
// once, whatever the callers' number or speed.
const (
	// MaxBodyBytes is the largest review body read. etcd stores objects of
	// up to ~1.5 MiB and a review carries the object and the old object;
	// a larger body is refused before it is read or decoded.
	// (controller-runtime itself reads up to 7 MiB and decodes it all.)
	MaxBodyBytes = 3 << 20
	// SmallBodyBytes: a review that declares a body of at most this many
	// bytes is small. The reviews the API server sends for this driver are
	// a few kilobytes (a claim with the API's 256 reservations, old and new,
	// is about 80 KiB), so a flood of large bodies never holds what small
	// ones are served from.
	SmallBodyBytes = 256 << 10
	// SmallReviewBytes is how many declared bytes of small reviews one
	// replica works on at once, each counted as at least MinReviewBytes
	// (so at most 4,096 reviews), and MaxLargeReviews how many large
	// reviews; one caller (one remote address) holds at most half of
	// either. A review beyond them is answered 429 with Retry-After at
	// once, unread (the API server's client retries it after a second,
	// within the webhook's timeout). Together they bound the bodies that
	// reviews hold in memory to SmallReviewBytes + MaxLargeReviews ×
	// MaxBodyBytes (28 MiB), each decoded only into the views of
	// decode.go, while the API server, one caller sending reviews of a
	// few KiB, can have some 2,000 in flight.
	SmallReviewBytes = 16 << 20
	MinReviewBytes   = 4 << 10
	MaxLargeReviews  = 4
	// BodyReadTimeout is how long a review's body may take to arrive once
	// its slot is taken (3 MiB at 600 KiB/s), so that a slow sender holds
	// a slot for no longer.
	BodyReadTimeout = 5 * time.Second
	// MaxReservedFor is the API's limit on a claim's status.reservedFor
	// (resourceapi.ResourceClaimReservedForMaxSize).
	MaxReservedFor = resourceapi.ResourceClaimReservedForMaxSize
	// MaxResults is the API's limit on an allocation's results.
	MaxResults = resourceapi.AllocationResultsMaxSize
	// MaxNewReservations is how many newly reserved pods one review
	// labels. The scheduler reserves a claim for one pod per status
	// update; more are left to the reconciler.
	MaxNewReservations = 4
	// MaxRequests and MaxSubRequests are the API's limits on a claim's
	// requests and on a request's firstAvailable subrequests.
	MaxRequests    = resourceapi.DeviceRequestsMaxSize
	MaxSubRequests = resourceapi.FirstAvailableDeviceRequestMaxSize
	// MaxConfigs is the API's limit on a claim's or class's configs.
	MaxConfigs = resourceapi.DeviceConfigMaxSize
	// DefaultHandlerTimeout is a handler's deadline when the caller sends
	// none; MaxHandlerTimeout caps the caller's (the API server sends its
	// webhook timeout as ?timeout=; the chart's are 3 s and 5 s).
	DefaultHandlerTimeout = 5 * time.Second
	MaxHandlerTimeout     = 10 * time.Second
)

// Admission serves admission handlers within the limits above, in place
// of controller-runtime's admission.Webhook.ServeHTTP, which reads and
// decodes any body of up to 7 MiB at any concurrency. One Admission per
// replica: its slots are shared by every handler it serves.
type Admission struct {
	small, large inFlight
}

// NewAdmission returns an Admission with room for smallBytes of small
// reviews and large large ones at once (SmallReviewBytes and
// MaxLargeReviews when zero).
func NewAdmission(smallBytes, large int) *Admission {
	if smallBytes <= 0 {
		smallBytes = SmallReviewBytes
	}
	if large <= 0 {
		large = MaxLargeReviews
	}
	return &Admission{small: newInFlight(int64(smallBytes)), large: newInFlight(int64(large))}
}

// Handler serves h. In order, before h sees anything: a body declared
// larger than MaxBodyBytes is refused (413) unread, and one that is not
// JSON (400); the review takes room
// (its declared size, at least MinReviewBytes, of SmallReviewBytes when it
// declares at most SmallBodyBytes, else one of MaxLargeReviews) or is
// refused (429, Retry-After: 1) unread; its body is read within
// BodyReadTimeout and MaxBodyBytes and decoded into an admission.Request
// (its objects kept raw for the handler's own views); h runs with a
// deadline: the API server's ?timeout=, at most MaxHandlerTimeout, else
// DefaultHandlerTimeout.
func (a *Admission) Handler(h admission.Handler) http.Handler {
	wh := &admission.Webhook{Handler: h}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBodyBytes {
			tooLarge(w, r.ContentLength)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			writeReview(w, http.StatusBadRequest, admission.Errored(http.StatusBadRequest, fmt.Errorf("content type %q, want application/json", ct)))
			return
		}
		slots, weight := &a.small, max(r.ContentLength, MinReviewBytes)
		if r.ContentLength < 0 || r.ContentLength > SmallBodyBytes {
			slots, weight = &a.large, 1
		}
		source := remoteHost(r)
		if !slots.acquire(source, weight) {
			busy(w)
			return
		}
		defer slots.release(source, weight)
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyReadTimeout))
		body, err := readBody(r.Body, r.ContentLength)
		if errors.Is(err, errBodyTooLarge) {
			tooLarge(w, MaxBodyBytes+1)
			return
		}
		if err != nil {
			writeReview(w, http.StatusBadRequest, admission.Errored(http.StatusBadRequest, fmt.Errorf("read the admission review: %w", err)))
			return
		}
		req, err := decodeReview(body) // the body is garbage once decoded: its objects are copied
		if err != nil {
			writeReview(w, http.StatusBadRequest, admission.Errored(http.StatusBadRequest, err))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), handlerTimeout(r))
		defer cancel()
		writeReview(w, http.StatusOK, wh.Handle(ctx, req))
	})
}

var errBodyTooLarge = errors.New("body too large")

// readBody reads a body of the declared size (-1: unknown), in one
// allocation of that size when it is declared, and at most MaxBodyBytes.
func readBody(body io.Reader, declared int64) ([]byte, error) {
	if body == nil || body == http.NoBody {
		return nil, errors.New("the request has no body")
	}
	if declared >= 0 {
		buf := make([]byte, declared) // declared ≤ MaxBodyBytes, and the server reads no more
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	buf, err := io.ReadAll(io.LimitReader(body, MaxBodyBytes+1))
	if err != nil {
		return nil, err
	}
	if len(buf) > MaxBodyBytes {
		return nil, errBodyTooLarge
	}
	return buf, nil
}

// reviewEnvelope is what is decoded of an AdmissionReview: the request's
// fields the handlers read, and its objects raw (each handler decodes
// them into its own view). The user info and options are skipped.
type reviewEnvelope struct {
	Request *struct {
		UID         types.UID                   `json:"uid"`
		Kind        metav1.GroupVersionKind     `json:"kind"`
		Resource    metav1.GroupVersionResource `json:"resource"`
		SubResource string                      `json:"subResource"`
		Name        string                      `json:"name"`
		Namespace   string                      `json:"namespace"`
		Operation   admissionv1.Operation       `json:"operation"`
		Object      json.RawMessage             `json:"object"`
		OldObject   json.RawMessage             `json:"oldObject"`
		DryRun      *bool                       `json:"dryRun"`
	} `json:"request"`
}

func decodeReview(body []byte) (admission.Request, error) {
	var env reviewEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return admission.Request{}, fmt.Errorf("decode the admission review: %w", err)
	}
	if env.Request == nil {
		return admission.Request{}, errors.New("the admission review has no request")
	}
	in := env.Request
	raw := func(m json.RawMessage) runtime.RawExtension {
		if len(m) == 0 || string(m) == "null" {
			return runtime.RawExtension{}
		}
		return runtime.RawExtension{Raw: m}
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: in.UID, Kind: in.Kind, Resource: in.Resource, SubResource: in.SubResource,
		Name: in.Name, Namespace: in.Namespace, Operation: in.Operation,
		Object: raw(in.Object), OldObject: raw(in.OldObject), DryRun: in.DryRun,
	}}, nil
}

// writeReview answers with the response in an admission.k8s.io/v1
// AdmissionReview.
func writeReview(w http.ResponseWriter, status int, resp admission.Response) {
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: &resp.AdmissionResponse,
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(review)
}

func handlerTimeout(r *http.Request) time.Duration {
	d, err := time.ParseDuration(r.URL.Query().Get("timeout"))
	if err != nil || d <= 0 {
		return DefaultHandlerTimeout
	}
	return min(d, MaxHandlerTimeout)
}

// tooLarge answers with an AdmissionReview that refuses the request.
func tooLarge(w http.ResponseWriter, size int64) {
	w.Header().Set("Connection", "close")
	writeReview(w, http.StatusRequestEntityTooLarge, admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusRequestEntityTooLarge, Reason: metav1.StatusReasonRequestEntityTooLarge,
		Message: fmt.Sprintf("admission review of %d bytes is larger than the webhook's limit of %d bytes", size, MaxBodyBytes),
	}}})
}

// busy answers 429 with Retry-After, which client-go (the API server's
// webhook client) retries after that many seconds.
func busy(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(1))
	writeReview(w, http.StatusTooManyRequests, admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
		Message: "the webhook is working on as many reviews as it takes at once; retry",
	}}})
}

// remoteHost is the caller's address without its port.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// inFlight counts what the reviews being worked on hold (a number of
// reviews, or their bytes), in all and per caller: a caller holds at most
// half (at least one unit).
type inFlight struct {
	mu        sync.Mutex
	max       int64
	perSource int64
	n         int64
	bySource  map[string]int64
}

func newInFlight(n int64) inFlight {
	return inFlight{max: n, perSource: max(n/2, 1), bySource: map[string]int64{}}
}

func (f *inFlight) acquire(source string, weight int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n+weight > f.max || f.bySource[source]+weight > f.perSource {
		return false
	}
	f.n += weight
	f.bySource[source] += weight
	return true
}

func (f *inFlight) release(source string, weight int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n -= weight
	if f.bySource[source] -= weight; f.bySource[source] <= 0 {
		delete(f.bySource, source)
	}
}
