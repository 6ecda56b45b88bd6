package plugin

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/pkg/version"
)

// TestBuildInfoMetric: the plugin's registry exports dra_swap_build_info
// = 1 with this binary's version, revision and Go version, and lists it
// among its names.
func TestBuildInfoMetric(t *testing.T) {
	m := NewMetrics()
	b := version.Get()
	want := fmt.Sprintf("dra_swap_build_info{goversion=%q,revision=%q,version=%q} 1\n", b.GoVersion, b.Revision, b.Version)
	if page := scrapeHandler(t, m); !strings.Contains(page, want) {
		t.Errorf("metrics lack %q:\n%s", want, page)
	}
	if !slices.Contains(m.Names(), version.MetricName) {
		t.Errorf("Names() = %q, want %s among them", m.Names(), version.MetricName)
	}
}
