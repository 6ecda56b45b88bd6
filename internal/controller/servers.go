package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/dra-driver-swap/dra-driver-swap/internal/httpserver"
)

// The controller serves its webhooks, metrics and probes itself, on
// internal/httpserver's servers (controller-runtime's have no read
// timeout and no bound on connections), as runnables of its manager.

// shutdownGrace is how long a server's requests in progress may take to
// finish once the manager stops.
const shutdownGrace = 10 * time.Second

// webhookServer serves the webhooks over TLS on every replica.
type webhookServer struct {
	addr    string
	handler http.Handler
	// certificate returns the serving certificate; with certDir the
	// admin-supplied tls.crt and tls.key there, reloaded on change.
	certificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	certDir     string
	// listening is the address once the server listens.
	listening atomic.Pointer[string]
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica serves.
func (s *webhookServer) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *webhookServer) Start(ctx context.Context) error {
	certificate := s.certificate
	if s.certDir != "" {
		watcher, err := certwatcher.New(filepath.Join(s.certDir, "tls.crt"), filepath.Join(s.certDir, "tls.key"))
		if err != nil {
			return fmt.Errorf("webhook certificate in %s: %w", s.certDir, err)
		}
		go func() {
			if err := watcher.Start(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Watching the webhook certificate failed", "dir", s.certDir)
			}
		}()
		certificate = watcher.GetCertificate
	}
	l, err := httpserver.Listen(s.addr)
	if err != nil {
		return fmt.Errorf("listen for webhooks on %s: %w", s.addr, err)
	}
	tlsListener := tls.NewListener(l, &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: certificate,
	})
	addr := l.Addr().String()
	s.listening.Store(&addr)
	klog.FromContext(ctx).Info("Serving webhooks", "address", addr)
	return httpserver.Serve(ctx, httpserver.New(s.handler), tlsListener, shutdownGrace)
}

// started is ready once the server completes TLS handshakes.
func (s *webhookServer) started(*http.Request) error {
	addr := s.listening.Load()
	if addr == nil {
		return errors.New("webhook server not listening yet")
	}
	host, port, err := net.SplitHostPort(*addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a liveness check of our own listener
	conn, err := dialer.Dial("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return fmt.Errorf("webhook server is not reachable: %w", err)
	}
	return conn.Close()
}

// httpServer serves a mux on every replica (metrics, probes).
type httpServer struct {
	addr    string
	handler http.Handler
}

func (s *httpServer) NeedLeaderElection() bool { return false }

func (s *httpServer) Start(ctx context.Context) error {
	l, err := httpserver.Listen(s.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.addr, err)
	}
	return httpserver.Serve(ctx, httpserver.New(s.handler), l, shutdownGrace)
}

// metricsHandler serves the registry at /metrics, as controller-runtime's
// metrics server does.
func metricsHandler(reg prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	return mux
}

// probesHandler serves /healthz and /readyz (and /readyz/<check> …), as
// controller-runtime's probe server does.
func probesHandler(healthChecks, readyChecks map[string]healthz.Checker) http.Handler {
	mux := http.NewServeMux()
	for path, checks := range map[string]map[string]healthz.Checker{"/healthz": healthChecks, "/readyz": readyChecks} {
		h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		mux.Handle(path, h)
		mux.Handle(path+"/", h)
	}
	return mux
}

// serving tells whether an address is to be served ("0" and "" turn a
// server off, as the flags say).
func serving(addr string) bool { return addr != "" && addr != "0" }

// webhookAddress is the webhooks' listen address.
func webhookAddress(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
