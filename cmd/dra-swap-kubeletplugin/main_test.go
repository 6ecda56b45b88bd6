package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin"
	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"extra"}, wantErr: "unexpected arguments"},
		{args: []string{"--no-such-flag"}, wantErr: "unknown flag"},
		{args: []string{"--reserved=-1Gi"}, wantErr: "--reserved \"-1Gi\" must not be negative"},
		{args: []string{"--reserved=lots"}, wantErr: "--reserved \"lots\""},
		{args: []string{"--default-request=1Ki"}, wantErr: "must be at least 1Mi"},
		{args: []string{"--node-name=n", "--unsafe-offer-swap-under=NoSwap"}, wantErr: `kubelet swap behavior "NoSwap" to offer swap under is none of LimitedSwap, WorkloadControlledSwap, Unknown`},
		{args: []string{"--node-name=n", "--unsafe-offer-swap-under=LimitedSwap,Bogus"}, wantErr: `kubelet swap behavior "Bogus"`},
		{args: []string{"--kubeconfig=/does/not/exist"}, wantErr: "load kubeconfig /does/not/exist"},
	}
	for _, tc := range tests {
		// run applies the logging configuration, which is process-wide.
		if err := logsapi.ResetForTest(nil); err != nil {
			t.Fatal(err)
		}
		err := run(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.wantErr)
		}
	}
}

// TestRunVersion: --version prints the version line and returns before
// anything else (no kubeconfig, no node name), with other flags too.
func TestRunVersion(t *testing.T) {
	want := version.Get().Line("dra-swap-kubeletplugin") + "\n"
	if !strings.HasPrefix(want, "dra-swap-kubeletplugin "+version.DefaultVersion+" (revision ") {
		t.Fatalf("version line %q", want)
	}
	for _, args := range [][]string{{"--version"}, {"--version", "--kubeconfig=/does/not/exist", "--reserved=1Gi"}} {
		if err := logsapi.ResetForTest(nil); err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		if err := run(args, &stdout); err != nil || stdout.String() != want {
			t.Errorf("run(%q) = %v, printed %q; want nil and %q", args, err, stdout.String(), want)
		}
	}
}

// TestUnsafeOfferSwapUnder: --unsafe-offer-swap-under reaches the
// policy as the list of behaviors it names (none by default, and none when
// the chart renders it empty).
func TestUnsafeOfferSwapUnder(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{args: nil, want: nil},
		{args: []string{"--unsafe-offer-swap-under="}, want: nil},
		{args: []string{"--unsafe-offer-swap-under=LimitedSwap"}, want: []string{"LimitedSwap"}},
		{args: []string{"--unsafe-offer-swap-under=LimitedSwap,Unknown"}, want: []string{"LimitedSwap", "Unknown"}},
		{args: []string{"--unsafe-offer-swap-under=WorkloadControlledSwap", "--unsafe-offer-swap-under=Unknown"}, want: []string{"WorkloadControlledSwap", "Unknown"}},
	} {
		o := options{}
		if err := o.flagSet().Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if err := o.complete(); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := o.cfg.Policy.UnsafeOfferUnder; len(got) != len(tc.want) || strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%q: UnsafeOfferUnder %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "512Mi": 512 << 20, "1G": 1e9, "1.5Gi": 3 << 29} {
		got, err := parseBytes("--x", in)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestProcessAndClientMetrics: after one API call through client-go, the
// plugin's /metrics has the Go runtime's, the process's and client-go's
// request series beside the plugin's own, as every Kubernetes component
// exports them.
func TestProcessAndClientMetrics(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"major":"1","minor":"37","gitVersion":"v1.37.1"}`)
	}))
	defer api.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Discovery().ServerVersion(); err != nil {
		t.Fatalf("GET /version: %v", err)
	}
	u, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/metrics", nil)
	kubeletplugin.NewMetrics().Handler().ServeHTTP(rec, req)
	page := rec.Body.String()
	for _, want := range []string{
		"go_goroutines ",
		"process_resident_memory_bytes ",
		`rest_client_requests_total{code="200",host="` + u.Host + `",method="GET"} `,
		`rest_client_request_duration_seconds_count{host="` + u.Host + `",verb="GET"} `,
		version.MetricName + "{",
	} {
		if !strings.Contains(page, "\n"+want) {
			t.Errorf("the plugin's metrics lack a series %s...", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", page)
	}
}
