package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Limits on the work one admission review may cause. Anyone who reaches
// the webhook Service can post a review, so the handlers take nothing in
// it at its word and bound every loop by what the API server itself
// allows in an object it sends (a review outside these limits was not
// sent by the API server: it is refused or ignored, never worked through).
const (
	// MaxBodyBytes is the largest review body read. etcd stores objects of
	// up to ~1.5 MiB and a review carries the object and the old object;
	// a larger body is refused before it is read or decoded.
	// (controller-runtime itself reads up to 7 MiB and decodes it all.)
	MaxBodyBytes = 3 << 20
	// MaxReservedFor is the API's limit on a claim's status.reservedFor
	// (resourceapi.ResourceClaimReservedForMaxSize).
	MaxReservedFor = resourceapi.ResourceClaimReservedForMaxSize
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
	// webhook timeout, at most 30 s, as ?timeout=).
	DefaultHandlerTimeout = 10 * time.Second
	MaxHandlerTimeout     = 30 * time.Second
)

// Bounded serves h with the limits above: a body over MaxBodyBytes is
// refused (413) without being read when its length is declared and after
// MaxBodyBytes bytes otherwise, and the handler runs with a deadline: the
// API server's ?timeout=, at most MaxHandlerTimeout, else
// DefaultHandlerTimeout.
func Bounded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBodyBytes {
			tooLarge(w, r.ContentLength)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		ctx, cancel := context.WithTimeout(r.Context(), handlerTimeout(r))
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
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
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusRequestEntityTooLarge, Reason: metav1.StatusReasonRequestEntityTooLarge,
			Message: fmt.Sprintf("admission review of %d bytes is larger than the webhook's limit of %d bytes", size, MaxBodyBytes),
		}},
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_ = json.NewEncoder(w).Encode(review)
}
