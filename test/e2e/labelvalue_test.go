package e2e

import "testing"

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
