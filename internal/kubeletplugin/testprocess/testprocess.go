// Package testprocess runs the current test binary again as several
// processes that begin their work at one signal, for tests of what
// separate processes share, such as a file lock: two kubelet plugin pods
// of a rolling update are two processes on one node.
package testprocess

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	envStart = "TESTPROCESS_START"
	envIndex = "TESTPROCESS_INDEX"
)

// Child reports whether this process is one that Run started, and its
// index (0..n-1).
func Child() (index int, ok bool) {
	if os.Getenv(envStart) == "" {
		return 0, false
	}
	index, err := strconv.Atoi(os.Getenv(envIndex))
	return index, err == nil
}

// Run starts n processes of this test binary that run only the test named
// test, each with env(i) added to its environment, lets them begin
// together (see AwaitStart), waits for all and fails t for each that
// failed, with its output.
func Run(t *testing.T, test string, n int, env func(i int) []string) {
	t.Helper()
	start := filepath.Join(t.TempDir(), "start")
	cmds := make([]*exec.Cmd, n)
	outs := make([]*strings.Builder, n)
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), envStart+"="+start, envIndex+"="+strconv.Itoa(i))
		cmd.Env = append(cmd.Env, env(i)...)
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatalf("start process %d: %v", i, err)
		}
		cmds[i] = cmd
	}
	if err := os.WriteFile(start, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("process %d: %v\n%s", i, err, outs[i])
		}
	}
}

// AwaitStart blocks a process that Run started until every process is
// started, so that their work overlaps; it fails t after a minute.
func AwaitStart(t *testing.T) {
	t.Helper()
	start := os.Getenv(envStart)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(start); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no start signal")
		}
	}
}
