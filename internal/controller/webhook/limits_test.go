package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

// countingBody counts the bytes read of a request body.
type countingBody struct {
	io.Reader
	read int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.Reader.Read(p)
	c.read += n
	return n, err
}

func (c *countingBody) Close() error { return nil }

// handlerFunc adapts a function to admission.Handler.
type handlerFunc func(context.Context, admission.Request) admission.Response

func (f handlerFunc) Handle(ctx context.Context, req admission.Request) admission.Response {
	return f(ctx, req)
}

// reviewOf is an AdmissionReview body of size bytes at least (padded in the
// object's annotations).
func reviewOf(t testing.TB, size int) string {
	t.Helper()
	body := func(pad int) string {
		return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":"CREATE",`+
			`"kind":{"group":"resource.k8s.io","version":"v1","kind":"ResourceClaim"},"name":"c","namespace":"ns",`+
			`"object":{"metadata":{"name":"c","annotations":{"pad":"%s"}}},"userInfo":{"username":"x"}}}`, strings.Repeat("x", pad))
	}
	return body(max(size-len(body(0)), 0))
}

// TestAdmissionBounds: a body over MaxBodyBytes is refused without being
// read when its length is declared, after MaxBodyBytes bytes otherwise;
// the handler sees the review's request and runs with the caller's
// deadline, capped.
func TestAdmissionBounds(t *testing.T) {
	tests := []struct {
		name           string
		body           string
		declared       bool
		contentType    string
		query          string
		wantStatus     int
		wantReadAtMost int
		wantDeadline   time.Duration
		wantMessage    string
	}{
		{name: "7 MB, declared", body: reviewOf(t, 7_000_000), declared: true, wantStatus: http.StatusRequestEntityTooLarge, wantReadAtMost: 0, wantMessage: "larger than the webhook's limit"},
		{name: "7 MB, chunked", body: reviewOf(t, 7_000_000), wantStatus: http.StatusRequestEntityTooLarge, wantReadAtMost: MaxBodyBytes + 1, wantMessage: "larger than the webhook's limit"},
		{name: "the limit", body: reviewOf(t, MaxBodyBytes-10), declared: true, wantStatus: http.StatusOK, wantReadAtMost: MaxBodyBytes, query: "?timeout=3s", wantDeadline: 3 * time.Second},
		{name: "a caller's long timeout is capped", body: reviewOf(t, 10), declared: true, wantStatus: http.StatusOK, wantReadAtMost: 1000, query: "?timeout=1h", wantDeadline: MaxHandlerTimeout},
		{name: "no timeout", body: reviewOf(t, 10), declared: true, wantStatus: http.StatusOK, wantReadAtMost: 1000, wantDeadline: DefaultHandlerTimeout},
		{name: "not JSON", body: reviewOf(t, 10), declared: true, contentType: "application/yaml", wantStatus: http.StatusBadRequest, wantReadAtMost: 1000, wantMessage: "content type"},
		{name: "no request", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, declared: true, wantStatus: http.StatusBadRequest, wantReadAtMost: 1000, wantMessage: "no request"},
		{name: "garbage", body: `{"request":`, declared: true, wantStatus: http.StatusBadRequest, wantReadAtMost: 1000, wantMessage: "decode the admission review"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var deadline time.Duration
			var got admission.Request
			h := NewAdmission(0, 0).Handler(handlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
				if d, ok := ctx.Deadline(); ok {
					deadline = time.Until(d)
				}
				got = req
				return admission.Allowed("")
			}))
			body := &countingBody{Reader: strings.NewReader(tc.body)}
			req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/x"+tc.query, body)
			req.Header.Set("Content-Type", "application/json")
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			req.ContentLength = -1
			if tc.declared {
				req.ContentLength = int64(len(tc.body))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus || body.read > tc.wantReadAtMost {
				t.Fatalf("status %d after reading %d bytes, want %d after at most %d: %.300s", rec.Code, body.read, tc.wantStatus, tc.wantReadAtMost, rec.Body)
			}
			var resp admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.Response == nil || resp.Kind != "AdmissionReview" {
				t.Fatalf("the answer is not an AdmissionReview (%v): %.300s", err, rec.Body)
			}
			if tc.wantMessage != "" && (resp.Response.Result == nil || !strings.Contains(resp.Response.Result.Message, tc.wantMessage)) {
				t.Errorf("response %+v, want a message saying %q", resp.Response, tc.wantMessage)
			}
			if tc.wantStatus != http.StatusOK {
				return
			}
			if resp.Response.UID != "u1" || !resp.Response.Allowed || got.Name != "c" || got.Namespace != "ns" || got.Kind.Kind != "ResourceClaim" ||
				got.Operation != admissionv1.Create || !strings.HasPrefix(string(got.Object.Raw), `{"metadata"`) {
				t.Errorf("the handler saw %+v and answered %+v", got.AdmissionRequest, resp.Response)
			}
			if deadline > tc.wantDeadline || deadline < tc.wantDeadline-time.Second {
				t.Errorf("deadline in %v, want %v", deadline, tc.wantDeadline)
			}
		})
	}
}

// TestAdmissionInFlight: a replica works on at most SmallReviewBytes of
// small reviews (each counted as at least MinReviewBytes) and
// MaxLargeReviews large ones at once, and one caller on half of either; a
// review beyond that is answered 429 with Retry-After without its body
// being read, and a small review is served while large ones fill their
// slots.
func TestAdmissionInFlight(t *testing.T) {
	a := NewAdmission(4*MinReviewBytes, 2)
	release := make(chan struct{})
	var entered sync.WaitGroup
	h := a.Handler(handlerFunc(func(context.Context, admission.Request) admission.Response {
		entered.Done()
		<-release
		return admission.Allowed("")
	}))
	post := func(size int, from string) (*httptest.ResponseRecorder, *countingBody) {
		data := reviewOf(t, size)
		body := &countingBody{Reader: strings.NewReader(data)}
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/x", body)
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = int64(len(data))
		req.RemoteAddr = from + ":40000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec, body
	}
	var done sync.WaitGroup
	hold := func(size int, from string) {
		entered.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			if rec, _ := post(size, from); rec.Code != http.StatusOK {
				t.Errorf("a held review was answered %d", rec.Code)
				entered.Done()
			}
		}()
		entered.Wait()
	}
	refused := func(what string, size int, from string) {
		t.Helper()
		rec, body := post(size, from)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || body.read > 0 {
			t.Errorf("%s: status %d, Retry-After %q after reading %d bytes; want 429, 1, unread", what, rec.Code, rec.Header().Get("Retry-After"), body.read)
		}
	}
	large := SmallBodyBytes + 1
	hold(large, "10.0.0.1")
	refused("a second large review of the same caller (its half)", large, "10.0.0.1")
	hold(large, "10.0.0.2")
	refused("a third large review", large, "10.0.0.3")
	// Small reviews have slots of their own.
	hold(1000, "10.0.0.1")
	hold(1000, "10.0.0.1")
	refused("a third small review of one caller", 1000, "10.0.0.1")
	refused("a small review larger than a caller's half, in bytes", 2*MinReviewBytes+1, "10.0.0.3")
	hold(1000, "10.0.0.3")
	hold(1000, "10.0.0.4")
	refused("a fifth small review", 1000, "10.0.0.5")
	close(release)
	done.Wait()
	// All slots are free again.
	entered.Add(1)
	if rec, _ := post(large, "10.0.0.3"); rec.Code != http.StatusOK {
		t.Errorf("after the others finished, a large review was answered %d", rec.Code)
	}
}

// manyRequests is a ResourceClaim review with n requests.
func manyRequests(t testing.TB, n int) []byte {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "many", Namespace: "ns"}, Spec: claimSpec("dra.swap", "1000Ki", "")}
	r := claim.Spec.Devices.Requests[0]
	claim.Spec.Devices.Requests = nil
	for i := range n {
		r.Name = fmt.Sprintf("r%05d", i)
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, r)
	}
	obj, err := json.Marshal(claim)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":"CREATE",` +
		`"kind":{"group":"resource.k8s.io","version":"v1","kind":"ResourceClaim"},"name":"many","namespace":"ns","object":` + string(obj) + `}}`)
}

// TestAdmissionAllocatesByTheBody: a claim with 30,000 requests (within the
// body limit) is refused from its count: serving it allocates at most
// three times its body's size (the body, the object kept raw, the views);
// decoding it whole, as before, took twenty times.
func TestAdmissionAllocatesByTheBody(t *testing.T) {
	body := manyRequests(t, 30000)
	if len(body) > MaxBodyBytes {
		t.Fatalf("%d bytes, over the limit", len(body))
	}
	h := NewAdmission(0, 0).Handler(&ConfigValidator{Decoder: v1alpha1.NewDecoder(), Offers: offer(4 << 30)})
	text := string(body)
	serve := func() *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/x", strings.NewReader(text))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	serve() // warm up
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rec := serve()
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d-byte review with 30,000 requests: %d bytes allocated (%.1f× the body), HTTP %d", len(body), allocated, float64(allocated)/float64(len(body)), rec.Code)
	if !strings.Contains(rec.Body.String(), "spec.devices.requests: Too many: 30000: must have at most 32 items") {
		t.Errorf("answer %.300s", rec.Body)
	}
	if limit := 5 * uint64(len(body)) / 2; allocated > limit {
		t.Errorf("serving the review allocated %d bytes, want at most %d (2.5 times the body)", allocated, limit)
	}
}
