package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// flood posts forged AdmissionReviews of about FLOOD_BYTES bytes to each of
// the webhook servers in FLOOD_TARGETS (https://host:port, comma-separated)
// from FLOOD_WORKERS workers per target for FLOOD_SECONDS, as any pod that
// reaches the controller could: half the workers over HTTP/2 (many streams
// on few connections), half over HTTP/1.1 (a connection each), each
// alternating a claim with tens of thousands of requests (config webhook)
// and a claim status with tens of thousands of reservations (reservation
// webhook). It prints one FLOOD line: the answers by HTTP status, and the
// requests that got none.
func flood() {
	targets := strings.Split(os.Getenv("FLOOD_TARGETS"), ",")
	workers := envInt("FLOOD_WORKERS", 32)
	size := envInt("FLOOD_BYTES", 3_000_000)
	seconds := envInt("FLOOD_SECONDS", 30)
	bodies := []struct{ path, body string }{
		{"/validate-swap-config", claimReview(size)},
		{"/label-reserved-pods", reservationReview(size)},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second)
	defer cancel()
	// A TLS config each: the HTTP/2 transport adds "h2" to its config's
	// protocols, which the HTTP/1.1 one must not offer.
	tlsConfig := func() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // a forger checks nothing
	h2 := &http.Transport{TLSClientConfig: tlsConfig(), ForceAttemptHTTP2: true, MaxIdleConnsPerHost: workers}
	h1 := &http.Transport{TLSClientConfig: tlsConfig(), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}, MaxIdleConnsPerHost: workers}
	var (
		mu       sync.Mutex
		statuses = map[string]int{}
		sent     atomic.Int64
		wg       sync.WaitGroup
	)
	count := func(key string) {
		mu.Lock()
		statuses[key]++
		mu.Unlock()
	}
	for _, target := range targets {
		for w := range workers {
			client := &http.Client{Transport: h2, Timeout: 15 * time.Second}
			if w%2 == 1 {
				client.Transport = h1
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; ctx.Err() == nil; i++ {
					b := bodies[i%len(bodies)]
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+b.path+"?timeout=30s", strings.NewReader(b.body))
					if err != nil {
						count("error")
						return
					}
					req.Header.Set("Content-Type", "application/json")
					sent.Add(1)
					resp, err := client.Do(req)
					if err != nil {
						if ctx.Err() == nil {
							count("no answer")
							time.Sleep(10 * time.Millisecond) // a refused connection: try again
						}
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					count(strconv.Itoa(resp.StatusCode))
				}
			}()
		}
	}
	wg.Wait()
	data, _ := json.Marshal(map[string]any{"sent": sent.Load(), "answers": statuses, "bytes": len(bodies[0].body)})
	fmt.Printf("FLOOD %s\n", data)
}

// claimReview is a ResourceClaim CREATE review whose claim has as many
// requests as fit in size bytes (the API allows 32).
func claimReview(size int) string {
	var b bytes.Buffer
	b.WriteString(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"0b5e7c1a-1111-4222-8333-444455556666",` +
		`"kind":{"group":"resource.k8s.io","version":"v1","kind":"ResourceClaim"},"resource":{"group":"resource.k8s.io","version":"v1","resource":"resourceclaims"},` +
		`"namespace":"forged","name":"many","operation":"CREATE","object":{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",` +
		`"metadata":{"name":"many","namespace":"forged"},"spec":{"devices":{"requests":[`)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"r%05d","exactly":{"deviceClassName":"dra.swap","capacity":{"requests":{"swap":"1000Ki"}}}}`, i)
	}
	b.WriteString(`]}}}}}`)
	return b.String()
}

// reservationReview is a claim status UPDATE review reserving the claim
// for as many pods as fit in size bytes (the API allows 256).
func reservationReview(size int) string {
	var refs bytes.Buffer
	for i := 0; refs.Len() < size/2-400; i++ {
		if i > 0 {
			refs.WriteByte(',')
		}
		fmt.Fprintf(&refs, `{"resource":"pods","name":"pod-%05d","uid":"00000000-0000-4000-8000-%012d"}`, i, i)
	}
	claim := func(reserved string) string {
		return `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c","namespace":"forged","uid":"1b5e7c1a-1111-4222-8333-444455556666","resourceVersion":"1"},` +
			`"status":{"allocation":{"devices":{"results":[{"request":"swap","driver":"dra.swap","pool":"node","device":"swap"}]}},"reservedFor":[` + reserved + `]}}`
	}
	return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"0b5e7c1a-1111-4222-8333-444455556667",` +
		`"kind":{"group":"resource.k8s.io","version":"v1","kind":"ResourceClaim"},"resource":{"group":"resource.k8s.io","version":"v1","resource":"resourceclaims"},` +
		`"subResource":"status","namespace":"forged","name":"c","operation":"UPDATE","object":` + claim(refs.String()) + `,"oldObject":` + claim(refs.String()) + `}}`
}
