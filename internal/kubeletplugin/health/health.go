// Package health serves the kubelet plugin's /healthz and /readyz (the
// DaemonSet's probes, Probes) and its /metrics (Serve).
package health

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dra-driver-swap/dra-driver-swap/internal/httpserver"
)

// Probes answer the DaemonSet's probes of the plugin's pod.
type Probes struct {
	// main is Run's main context: canceled when the plugin stops, on a
	// signal or a fatal error.
	main context.Context
	// registration reports the kubelet's answer to the plugin's
	// registration; nil until the kubelet plugin helper has started.
	registration atomic.Pointer[func() *registerapi.RegistrationStatus]
	// NRI, if set, says whether the NRI plugin guards the limits; /readyz
	// prints it (it does not decide readiness: without NRI the CDI hook
	// and the verifier still hold the limits).
	NRI func() string
}

// New returns the probes of the plugin whose main context is main.
func New(main context.Context) *Probes {
	return &Probes{main: main}
}

// Started hands the probes the helper once it runs.
func (p *Probes) Started(helper *draplugin.Helper) {
	status := helper.RegistrationStatus
	p.registration.Store(&status)
}

// healthz answers /healthz, the liveness probe: ok from start-up while
// Run's main loop runs, failing once it stops. It does not depend on the
// kubelet's registration, so that a kubelet that is restarting, or has
// not yet picked up the socket, does not get the plugin killed.
func (p *Probes) healthz(w http.ResponseWriter, _ *http.Request) {
	if err := context.Cause(p.main); err != nil {
		http.Error(w, "the plugin is stopping: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// readyz answers /readyz: ready once the kubelet has accepted the plugin's
// registration, so a DaemonSet's readiness probe (and a restart in the e2e
// tests) can tell when new claims can be prepared.
func (p *Probes) readyz(w http.ResponseWriter, _ *http.Request) {
	registration := p.registration.Load()
	if registration == nil {
		http.Error(w, "starting: the kubelet plugin is not running yet", http.StatusServiceUnavailable)
		return
	}
	status := (*registration)()
	switch {
	case status == nil:
		http.Error(w, "not registered with the kubelet yet", http.StatusServiceUnavailable)
	case !status.PluginRegistered:
		http.Error(w, "the kubelet rejected the registration: "+status.Error, http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ok")
		fmt.Fprintln(w, "limits: set by the CDI hook at create, verified on an interval")
		if p.NRI != nil {
			fmt.Fprintln(w, "nri: "+p.NRI())
		} else {
			fmt.Fprintln(w, "nri: off (--nri-socket is empty)")
		}
	}
}

// Serve serves /metrics, /readyz and /healthz on addr until the
// returned stop is called, within internal/httpserver's deadlines and
// connection bounds: every plugin pod's address is listed by the metrics
// Service, and whoever reaches it must not hold its memory (128 MiB) with
// idle or slow connections.
func Serve(ctx context.Context, addr string, metrics http.Handler, p *Probes) (stop func(), err error) {
	l, err := httpserver.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics and probes on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/readyz", p.readyz)
	mux.HandleFunc("/healthz", p.healthz)
	srv := httpserver.New(mux)
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := httpserver.Serve(serveCtx, srv, l, 5*time.Second); err != nil {
			klog.FromContext(ctx).Error(err, "Metrics and probes server failed", "address", addr)
		}
	}()
	return func() {
		cancel()
		<-done
	}, nil
}
