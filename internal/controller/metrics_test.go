package controller

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

// TestBuildInfoMetric: NewMetrics registers dra_swap_build_info = 1 with
// this binary's version, revision and Go version (a second NewMetrics on
// the same registry, as a second controller in one process, shares it),
// and MetricNames lists it.
func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		if _, err := NewMetrics(reg); err != nil {
			t.Fatalf("NewMetrics: %v", err)
		}
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	b := version.Get()
	want := fmt.Sprintf("# TYPE %[1]s gauge\n%[1]s{goversion=%[2]q,revision=%[3]q,version=%[4]q} 1\n",
		version.MetricName, b.GoVersion, b.Revision, b.Version)
	if page := rec.Body.String(); !strings.Contains(page, want) {
		t.Errorf("metrics lack %q:\n%s", want, page)
	}
	if !slices.Contains(MetricNames(), version.MetricName) {
		t.Errorf("MetricNames() = %q, want %s among them", MetricNames(), version.MetricName)
	}
}
