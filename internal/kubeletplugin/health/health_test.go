package health

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/dra-driver-swap/dra-driver-swap/internal/httpserver"
)

func probe(t *testing.T, h http.HandlerFunc) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	return rec.Code, rec.Body.String()
}

func TestReadyz(t *testing.T) {
	tests := []struct {
		name     string
		status   *registerapi.RegistrationStatus
		started  bool
		wantCode int
		wantBody string
	}{
		{name: "helper not started", wantCode: 503, wantBody: "starting"},
		{name: "not registered", started: true, wantCode: 503, wantBody: "not registered"},
		{name: "rejected", started: true, status: &registerapi.RegistrationStatus{Error: "unsupported version"}, wantCode: 503, wantBody: "rejected the registration: unsupported version"},
		{name: "registered", started: true, status: &registerapi.RegistrationStatus{PluginRegistered: true}, wantCode: 200, wantBody: "ok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := New(context.Background())
			if tc.started {
				status := func() *registerapi.RegistrationStatus { return tc.status }
				p.registration.Store(&status)
			}
			code, body := probe(t, p.readyz)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("readyz = %d %q, want %d %q", code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

func TestReadyzWithHelper(t *testing.T) {
	p := New(context.Background())
	p.Started(&draplugin.Helper{})
	if code, body := probe(t, p.readyz); code != 503 || !strings.Contains(body, "not registered") {
		t.Errorf("readyz before registration: %d %q", code, body)
	}
}

// TestHealthz: /healthz is ok from the start, whatever the registration,
// and fails once the main loop stops.
func TestHealthz(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	p := New(ctx)
	if code, body := probe(t, p.healthz); code != 200 || body != "ok\n" {
		t.Errorf("healthz while starting = %d %q", code, body)
	}
	status := func() *registerapi.RegistrationStatus { return &registerapi.RegistrationStatus{Error: "rejected"} }
	p.registration.Store(&status)
	if code, _ := probe(t, p.healthz); code != 200 {
		t.Errorf("healthz with a rejected registration = %d, want 200", code)
	}
	cancel(errors.New("fatal background error: boom"))
	if code, body := probe(t, p.healthz); code != 503 || !strings.Contains(body, "boom") {
		t.Errorf("healthz after the main loop stopped = %d %q", code, body)
	}
}

func TestServeHTTP(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "dra_swap_node_swap_allocated_bytes 42\n")
	})
	stop, err := Serve(ctx, addr, metrics, New(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for path, want := range map[string]struct {
		code int
		body string
	}{
		"/healthz": {200, "ok"},
		"/readyz":  {503, "starting"},
		"/metrics": {200, "dra_swap_node_swap_allocated_bytes 42"},
		"/other":   {404, ""},
	} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.code || !strings.Contains(string(body), want.body) {
			t.Errorf("GET %s = %d %q, want %d %q", path, resp.StatusCode, body, want.code, want.body)
		}
	}
	if _, err := Serve(ctx, addr, metrics, New(ctx)); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("second listener on %s: %v", addr, err)
	}
	// One caller holds at most httpserver.MaxConnsPerHost connections: the
	// next is closed at once, whatever it sends. A fresh server counts them:
	// the server above may not have seen the GETs' connections close yet.
	stop()
	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	l.Close()
	stop, err = Serve(ctx, addr, metrics, New(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var conns []net.Conn
	for range httpserver.MaxConnsPerHost + 1 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	last := conns[len(conns)-1]
	_ = last.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := last.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("connection %d of one caller was kept (%v)", len(conns), err)
	}
	for i, c := range conns[:len(conns)-1] {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) {
			t.Errorf("connection %d of one caller was closed", i+1)
		}
	}
}
