package controller

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// TestProbesHandler: /healthz and /readyz answer from their checks, and
// /readyz/<check> from one, as controller-runtime's probe server did.
func TestProbesHandler(t *testing.T) {
	notReady := func(*http.Request) error { return errors.New("caches not synced") }
	h := probesHandler(map[string]healthz.Checker{"ping": healthz.Ping}, map[string]healthz.Checker{"webhook": healthz.Ping, "webhook-caches": notReady})
	for path, want := range map[string]int{
		"/healthz": 200, "/healthz/ping": 200, "/readyz": 500, "/readyz/webhook": 200, "/readyz/webhook-caches": 500, "/other": 404,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s = %d, want %d: %s", path, rec.Code, want, rec.Body)
		}
	}
}

func TestMetricsHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.labelsDeferred("not-cached")
	rec := httptest.NewRecorder()
	metricsHandler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `dra_swap_controller_webhook_labels_deferred_total{reason="not-cached"} 1`) {
		t.Errorf("GET /metrics = %d: %s", rec.Code, rec.Body)
	}
}

// selfSigned is a serving certificate for 127.0.0.1.
func selfSigned(t *testing.T) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestWebhookServer: the webhooks are served over TLS with HTTP/2 and
// HTTP/1.1, the started check dials them, and the server stops with its
// context.
func TestWebhookServer(t *testing.T) {
	cert := selfSigned(t)
	s := &webhookServer{addr: "127.0.0.1:0", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}), certificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }}
	if err := s.started(nil); err == nil {
		t.Error("started before listening")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for s.started(nil) != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.started(nil); err != nil {
		t.Fatalf("not started: %v", err)
	}
	url := "https://" + *s.listening.Load() + "/x"
	// A config each: HTTP/2's transport adds "h2" to its config's protocols.
	tlsConfig := func() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // a self-signed test certificate
	for name, transport := range map[string]*http.Transport{
		"HTTP/2.0": {TLSClientConfig: tlsConfig(), ForceAttemptHTTP2: true},
		"HTTP/1.1": {TLSClientConfig: tlsConfig(), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}},
	} {
		resp, err := (&http.Client{Transport: transport, Timeout: 5 * time.Second}).Get(url)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != name {
			t.Errorf("served over %s, want %s", body, name)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("the server did not stop with its context")
	}
}
