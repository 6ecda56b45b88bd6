// Package report is the format of the workload image's START and RESULT
// lines, shared by the image and the tests that read its logs.
package report

// Report is one line of the workload's output, after its "START " or
// "RESULT " prefix.
type Report struct {
	AllocatedMiB     int   `json:"allocatedMiB"`
	SwapLimitBytes   int64 `json:"swapLimitBytes"`
	MemoryLimitBytes int64 `json:"memoryLimitBytes"`
	SwapUsageBytes   int64 `json:"swapUsageBytes"`
	// MemoryUsageBytes is the memory in use now (v2 memory.current, v1
	// memory.usage_in_bytes).
	MemoryUsageBytes int64  `json:"memoryUsageBytes,omitempty"`
	EnvSwapLimit     string `json:"envSwapLimit"`
	CgroupVersion    int    `json:"cgroupVersion"`
	// Downward holds the environment variables named DOWNWARD_*, which
	// tests fill from the Downward API.
	Downward map[string]string `json:"downward,omitempty"`
	// Files holds the raw cgroup files the values came from.
	Files map[string]string `json:"files,omitempty"`
}
