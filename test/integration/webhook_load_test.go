package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/webhook"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// callerFrom is an HTTPS client that connects from a loopback address of
// its own (the webhooks count a caller by its address), over HTTP/1.1,
// checking nothing, as a forger would.
func callerFrom(ip string, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext:     dialer.DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // a forger does not check
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
	}}
}

// post posts body to the webhook path and returns the status and the
// Retry-After header.
func post(t *testing.T, c *http.Client, url string, body []byte) (int, string) {
	t.Helper()
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// manyRequestsReview is a ResourceClaim CREATE review whose claim has n
// requests (the API allows 32).
func manyRequestsReview(t *testing.T, n int) []byte {
	t.Helper()
	c := swapClaim("many", "1000Ki", "")
	c.Namespace = tenant
	r := c.Spec.Devices.Requests[0]
	c.Spec.Devices.Requests = nil
	for i := range n {
		r.Name = fmt.Sprintf("r%05d", i)
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, r)
	}
	return reviewBody(t, admissionv1.AdmissionRequest{
		Kind:      metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"},
		Resource:  metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"},
		Namespace: tenant, Name: c.Name, Operation: admissionv1.Create, Object: rawJSON(t, c),
	})
}

// TestWebhookInFlightCap: callers that hold every large-review slot of the
// controller (two addresses, each sending the body of a 3 MB review and
// then nothing) get a further large review answered 429 with Retry-After
// at once; the API server's own reviews, small, are served meanwhile (a
// claim with SwapConfig admitted, a reserved pod labelled); a sender that
// stalls holds its slot for no longer than webhook.BodyReadTimeout.
func TestWebhookInFlightCap(t *testing.T) {
	t.Parallel()
	env := startController(t)
	_, ctx := ktesting.NewTestContext(t)
	env.t = t
	env.node(ctx, "node-a", map[string]string{podlabels.Zone: "zone-a"}, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
	large := manyRequestsReview(t, 30000)
	url := env.webhook + webhook.ConfigPath + "?timeout=30s"

	// Stallers: each declares a large body, sends a little and stalls.
	var stalled sync.WaitGroup
	stop := make(chan struct{})
	stallStart := time.Now()
	for i := range webhook.MaxLargeReviews {
		from := fmt.Sprintf("127.0.0.%d", 2+i%2) // each address holds its half
		stalled.Add(1)
		go func() {
			defer stalled.Done()
			client := callerFrom(from, time.Minute)
			for {
				pr, pw := io.Pipe()
				go func() {
					_, _ = pw.Write(large[:1024])
					<-stop
					pw.Close()
				}()
				req, err := http.NewRequest(http.MethodPost, url, pr)
				if err != nil {
					t.Error(err)
					return
				}
				req.ContentLength = int64(len(large))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					return // served, or cut off: the slot was held
				}
				time.Sleep(20 * time.Millisecond) // a probe held a slot a moment
			}
		}()
	}
	defer func() {
		close(stop)
		stalled.Wait()
	}()
	prober := callerFrom("127.0.0.4", 10*time.Second)
	time.Sleep(500 * time.Millisecond) // the stallers' requests are in
	// Once the stallers hold every slot, a large review is refused at once.
	var status int
	var retryAfter string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		start := time.Now()
		status, retryAfter = post(t, prober, url, large)
		if status == http.StatusTooManyRequests {
			t.Logf("a large review while the large slots are held: HTTP %d, Retry-After %q, in %v", status, retryAfter, time.Since(start).Round(time.Millisecond))
			break
		}
	}
	if status != http.StatusTooManyRequests || retryAfter != "1" {
		t.Fatalf("with every large slot held: HTTP %d, Retry-After %q; want 429 and 1", status, retryAfter)
	}

	// The API server's reviews are small: served meanwhile.
	if _, err := env.client.ResourceV1().ResourceClaims(tenant).Create(ctx, swapClaim("with-config", "64Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":10}`), metav1.CreateOptions{}); err != nil {
		t.Errorf("a claim with valid SwapConfig was refused while the large slots were held: %v", err)
	}
	if _, err := env.client.ResourceV1().ResourceClaims(tenant).Create(ctx, swapClaim("bad-config", "64Mi", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swappiness":500}`), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "swappiness") {
		t.Errorf("a claim with invalid SwapConfig while the large slots were held: %v, want refused naming swappiness", err)
	}
	bound := env.bind(ctx, env.swapPod(ctx, env.client, "real", "node-a", nil, nil), "node-a")
	if want := topology("zone-a", "node-a", "LimitedSwap"); !hasLabels(bound.Labels, want) {
		t.Errorf("a pod reserved while the large slots were held was bound with labels %v, want %s", bound.Labels, show(want))
	}

	// The stallers' slots come back once their bodies are overdue.
	for deadline := stallStart.Add(webhook.BodyReadTimeout + 10*time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if status, _ = post(t, prober, url, large); status == http.StatusOK {
			break
		}
	}
	if status != http.StatusOK {
		t.Errorf("a large review %v after the stallers began: HTTP %d, want 200 (a stalled body holds its slot for %v at most)", time.Since(stallStart).Round(time.Second), status, webhook.BodyReadTimeout)
	} else {
		t.Logf("large reviews served again %v after the stallers began", time.Since(stallStart).Round(100*time.Millisecond))
	}
}

// TestForgedReviewAllocation: a 3 MB forged review of a claim with 30,000
// requests is refused from its request count without the requests being
// decoded: serving it allocates a small multiple of its body, measured in
// this process, where the controller runs. Not parallel: the other tests'
// allocations would count.
func TestForgedReviewAllocation(t *testing.T) {
	env := startController(t)
	body := manyRequestsReview(t, 30000)
	env.forged(t, webhook.ConfigPath, body) // warm up: connections, caches
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	status, resp, took := env.forged(t, webhook.ConfigPath, body)
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d-byte review with 30,000 requests: HTTP %d in %v, %.1f MB allocated in the process (%.1f× the body)",
		len(body), status, took, float64(allocated)/1e6, float64(allocated)/float64(len(body)))
	if resp == nil || resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "Too many: 30000") {
		t.Errorf("answer HTTP %d %+v, want refused for its 30000 requests", status, resp)
	}
	if limit := 4 * uint64(len(body)); allocated > limit {
		t.Errorf("serving the review allocated %.1f MB, want at most %.1f MB (4× the body)", float64(allocated)/1e6, float64(limit)/1e6)
	}
}

// TestForgedReviewsCostNoAPICalls: a flood of forged reservation reviews,
// naming claims and pods that do not exist, and the real claim of a
// pending pod with the node alternating, costs a bound of API requests
// (webhook.RelabelBurst patches and webhook.RelabelQPS a second beyond the
// pod's first), whatever the reviews' number; meanwhile a real pod's
// reservation is labelled in the write that binds it.
func TestForgedReviewsCostNoAPICalls(t *testing.T) {
	t.Parallel()
	counter := &requestCounter{}
	env := startController(t, func(s *controllerSetup) {
		base := s.restConfig
		s.restConfig = func(api *framework.APIServer) *rest.Config {
			cfg := base(api)
			cfg.WrapTransport = counter.wrap
			return cfg
		}
	})
	_, ctx := ktesting.NewTestContext(t)
	env.t = t
	env.node(ctx, "node-a", map[string]string{podlabels.Zone: "zone-a"}, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
	env.node(ctx, "node-b", map[string]string{podlabels.Zone: "zone-b"}, v1alpha1.SwapBehaviorLimitedSwap, 4*gi)
	// A pending pod with a real claim, not allocated yet.
	claim, err := env.client.ResourceV1().ResourceClaims(tenant).Create(ctx, swapClaim("pending", "256Mi", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := env.client.CoreV1().Pods(tenant).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pending"},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "swap"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "swap", ResourceClaimName: &claim.Name}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the cache sees them
	reserving := func(c *resourceapi.ResourceClaim, node string, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
		c = allocatedOn(c, node)
		for _, p := range pods {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
		}
		return c
	}
	missing := func(i int) []byte {
		c := claim.DeepCopy()
		c.Name, c.UID = fmt.Sprintf("missing-%d", i), apitypes.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
		return reservationReview(t, c, reserving(c, "node-a", pending))
	}
	forgedBodies := [][]byte{
		reservationReview(t, claim, reserving(claim, "node-a", pending)),
		reservationReview(t, claim, reserving(claim, "node-b", pending)),
	}

	before := counter.get()
	var sent, served atomic.Int64
	floodCtx, stopFlood := context.WithCancel(ctx)
	var flooders sync.WaitGroup
	const workers, flood = 32, 4 * time.Second
	for w := range workers {
		flooders.Add(1)
		go func() {
			defer flooders.Done()
			client := callerFrom(fmt.Sprintf("127.0.0.%d", 2+w%4), 5*time.Second)
			for i := w; floodCtx.Err() == nil; i += workers {
				body := forgedBodies[i%2]
				if i%4 == 0 {
					body = missing(i) // waited for up to a second
				}
				sent.Add(1)
				req, _ := http.NewRequestWithContext(floodCtx, http.MethodPost, env.webhook+webhook.ReservationPath+"?timeout=30s", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						served.Add(1)
					}
				}
			}
		}()
	}
	time.Sleep(time.Second)
	// A real reservation and binding, through the API server, meanwhile.
	start := time.Now()
	bound := env.bind(ctx, env.swapPod(ctx, env.client, "real", "node-a", nil, nil), "node-a")
	took := time.Since(start)
	// The controller's own: the real pod's label patch, and the node
	// reconciler's label patches of the two nodes if they land now.
	realRequests := 3
	time.Sleep(flood - time.Second - took)
	stopFlood()
	flooders.Wait()
	elapsed := time.Since(start) + time.Second
	requests := counter.get() - before
	bound2 := int(webhook.RelabelBurst + webhook.RelabelQPS*elapsed.Seconds() + 2)
	t.Logf("%d forged reviews in %v (%d answered 200): the controller made %d API requests; the real pod was reserved and bound in %v",
		sent.Load(), elapsed.Round(100*time.Millisecond), served.Load(), requests, took.Round(time.Millisecond))
	if want := topology("zone-a", "node-a", "LimitedSwap"); !hasLabels(bound.Labels, want) {
		t.Errorf("the real pod was bound with labels %v during the flood, want %s", bound.Labels, show(want))
	}
	if sent.Load() < 100 {
		t.Errorf("only %d forged reviews sent: not a flood", sent.Load())
	}
	if requests > bound2+realRequests {
		t.Errorf("%d forged reviews cost %d API requests, want at most %d (the relabel budget and the real pod's patch)", sent.Load(), requests, bound2+realRequests)
	}
}
