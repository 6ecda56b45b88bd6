package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	args := []string{"--swap-limit=1048576", "--claim-uid=00000000-0000-4000-8000-00000000000a",
		"--proc-root=" + base + "/proc", "--cgroup-root=" + base + "/cg", "--state-dir=" + base + "/state"}

	var stderr bytes.Buffer
	if code := run(args, strings.NewReader(`{"id":"c1","pid":77}`), &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if data, _ := os.ReadFile(filepath.Join(base, "cg", group, "memory.swap.max")); string(data) != "1048576" {
		t.Errorf("memory.swap.max = %q", data)
	}

	for _, stdin := range []string{"", "not json", `{"id":"c1","pid":"x"}`, `{"id":"c1"}`, strings.Repeat("{", 2<<20)} {
		stderr.Reset()
		code := run(args, strings.NewReader(stdin), &stderr)
		msg := stderr.String()
		if code != 1 || !strings.HasPrefix(msg, "dra-swap-hook: ") || strings.Count(msg, "\n") != 1 {
			t.Errorf("stdin %.20q: exit %d, stderr %q; want exit 1 and one line", stdin, code, msg)
		}
	}
}
