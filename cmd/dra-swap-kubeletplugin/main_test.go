package main

import (
	"strings"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"
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
		{args: []string{"--kubeconfig=/does/not/exist"}, wantErr: "load kubeconfig /does/not/exist"},
	}
	for _, tc := range tests {
		// run applies the logging configuration, which is process-wide.
		if err := logsapi.ResetForTest(nil); err != nil {
			t.Fatal(err)
		}
		err := run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.wantErr)
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
