package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

func TestRun(t *testing.T) {
	base := t.TempDir()
	group := "/pod/ctr"
	write := func(p, c string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(base, "proc/77/cgroup"), "0::"+group+"\n")
	write(filepath.Join(base, "cg/cgroup.controllers"), "memory")
	write(filepath.Join(base, "cg", group, "memory.swap.max"), "0")
	args := []string{"--swap-limit=1048576", "--claim-uid=00000000-0000-4000-8000-00000000000a", "--result-index=0",
		"--proc-root=" + base + "/proc", "--cgroup-root=" + base + "/cg", "--state-dir=" + base + "/state"}

	var stderr bytes.Buffer
	if code := run(args, strings.NewReader(`{"id":"c1","pid":77}`), io.Discard, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if data, _ := os.ReadFile(filepath.Join(base, "cg", group, "memory.swap.max")); string(data) != "1048576" {
		t.Errorf("memory.swap.max = %q", data)
	}

	for _, stdin := range []string{"", "not json", `{"id":"c1","pid":"x"}`, `{"id":"c1"}`, strings.Repeat("{", 2<<20)} {
		stderr.Reset()
		code := run(args, strings.NewReader(stdin), io.Discard, &stderr)
		msg := stderr.String()
		if code != 1 || !strings.HasPrefix(msg, "dra-swap-hook: ") || strings.Count(msg, "\n") != 1 {
			t.Errorf("stdin %.20q: exit %d, stderr %q; want exit 1 and one line", stdin, code, msg)
		}
	}
}

// TestRunVersion: --version alone prints the version line on stdout and
// exits 0 without reading stdin; with the arguments of a spec it is an
// unknown flag, as the argument contract wants (internal/hookargs.ParseArgs).
func TestRunVersion(t *testing.T) {
	want := version.Get().Line("dra-swap-hook") + "\n"
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{args: []string{"--version"}, wantStdout: want},
		{args: []string{"-version"}, wantStdout: want},
		{args: []string{"--version", "--cleanup", "--claim-uid=00000000-0000-4000-8000-00000000000a"}, wantCode: 1,
			wantStderr: "dra-swap-hook: arguments: flag provided but not defined: -version"},
		{args: []string{"--version=false"}, wantCode: 1, wantStderr: "flag provided but not defined: -version"},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, strings.NewReader(`{"id":"c1","pid":77}`), &stdout, &stderr)
		if code != tc.wantCode || stdout.String() != tc.wantStdout || !strings.Contains(stderr.String(), tc.wantStderr) ||
			(tc.wantStderr == "") != (stderr.Len() == 0) {
			t.Errorf("run(%q): exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
				tc.args, code, stdout.String(), stderr.String(), tc.wantCode, tc.wantStdout, tc.wantStderr)
		}
	}
	if !strings.HasPrefix(want, "dra-swap-hook "+version.DefaultVersion+" (revision ") {
		t.Errorf("version line %q", want)
	}
}
