package main

import (
	"bytes"
	"strings"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

func TestRun(t *testing.T) {
	wantVersion := version.Get().Line("dra-swap-controller") + "\n"
	if !strings.HasPrefix(wantVersion, "dra-swap-controller "+version.DefaultVersion+" (revision ") {
		t.Fatalf("version line %q", wantVersion)
	}
	tests := []struct {
		args       []string
		wantStdout string
		wantErr    string
	}{
		// --version prints the version line and returns before anything
		// else, with other flags too.
		{args: []string{"--version"}, wantStdout: wantVersion},
		{args: []string{"--version", "--kubeconfig=/does/not/exist", "--workers=2"}, wantStdout: wantVersion},
		{args: []string{"--version=false", "--kubeconfig=/does/not/exist"}, wantErr: "load kubeconfig /does/not/exist"},
		{args: []string{"--cleanup-node-labels", "--kubeconfig=/does/not/exist"}, wantErr: "load kubeconfig /does/not/exist"},
		{args: []string{"extra"}, wantErr: "unexpected arguments"},
		{args: []string{"--no-such-flag"}, wantErr: "unknown flag"},
		{args: []string{"--pod-selection=namespaces", "--namespace-selector=a in (b"}, wantErr: "--namespace-selector"},
		// The subcommand check is the chart's helm test, with flags of its own.
		{args: []string{"check", "--version"}, wantStdout: version.Get().Line("dra-swap-controller check") + "\n"},
		{args: []string{"check", "--workers=2"}, wantErr: "unknown flag: --workers"},
		{args: []string{"check", "--image=x", "--claim-template=t", "--namespace=ns", "--max-nodes=0"}, wantErr: "max nodes 0"},
		{args: []string{"check", "--image=x", "--claim-template=t", "--namespace=ns", "--kubeconfig=/does/not/exist"}, wantErr: "load kubeconfig /does/not/exist"},
	}
	for _, tc := range tests {
		// run applies the logging configuration, which is process-wide.
		if err := logsapi.ResetForTest(nil); err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		err := run(tc.args, &stdout)
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.wantErr)
		}
		if stdout.String() != tc.wantStdout {
			t.Errorf("run(%q) printed %q, want %q", tc.args, stdout.String(), tc.wantStdout)
		}
	}
}
