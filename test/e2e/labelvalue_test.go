package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// TestLabelValue: the kubelet metric lines that BenchmarkPodStartup reads
// its per-driver prepare times from; a line cut short yields what is there
// instead of a panic.
func TestLabelValue(t *testing.T) {
	tests := []struct {
		line, name, want string
	}{
		{`kubelet_dra_grpc_operations_duration_seconds_count{driver_name="dra.swap",method_name="/v1.DRAPlugin/NodePrepareResources"} 12`, "driver_name", "dra.swap"},
		{`kubelet_dra_grpc_operations_duration_seconds_count{driver_name="dra.swap",method_name="/v1.DRAPlugin/NodePrepareResources"} 12`, "method_name", "/v1.DRAPlugin/NodePrepareResources"},
		{`kubelet_dra_grpc_operations_duration_seconds_count{driver_name="dra.swap"} 12`, "method_name", ""},
		{`kubelet_dra_grpc_operations_duration_seconds_count{driver_name="dra.sw`, "driver_name", "dra.sw"},
		{`kubelet_dra_grpc_operations_duration_seconds_count{driver_name="`, "driver_name", ""},
	}
	for _, tc := range tests {
		if got := labelValue(tc.line, tc.name); got != tc.want {
			t.Errorf("labelValue(%q, %q) = %q, want %q", tc.line, tc.name, got, tc.want)
		}
	}
}

// TestGuestTestsExist: every test that guestTests names is a test of this
// package, so that a renamed test cannot silently stop running on the
// emulated node.
func TestGuestTestsExist(t *testing.T) {
	if cluster.Emulated() {
		t.Skip("the emulated node runs the compiled suite without its sources; this host's node checks them")
	}
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("the package's test files: %v, %v", files, err)
	}
	var src strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(data)
	}
	for name := range guestTests {
		if !strings.Contains(src.String(), "\nfunc "+name+"(t *testing.T) {") {
			t.Errorf("guestTests names %s, which is no test of this package", name)
		}
	}
}
