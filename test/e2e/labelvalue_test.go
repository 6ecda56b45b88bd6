package e2e

import (
	"io/fs"
	"strings"
	"testing"
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
// emulated node. It reads the sources the suite was built from (embedded:
// the emulated node and the conformance suite run it without a checkout).
func TestGuestTestsExist(t *testing.T) {
	files, err := fs.Glob(sources, "*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("the package's test files: %v, %v", files, err)
	}
	var src strings.Builder
	for _, f := range files {
		data, err := fs.ReadFile(sources, f)
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
