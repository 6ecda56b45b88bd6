package hook

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookargs"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
)

// envHookArgs, when set, makes this test binary run the hook with these
// arguments (JSON) and the OCI state on its stdin, as runc runs it.
const envHookArgs = "HOOK_TEST_AS_HOOK_ARGS"

// TestOutcomeBeforeTheRuntimeKillsIt runs the hook as runc does, a
// process with the OCI state on its stdin that is killed (SIGKILL) once
// it outlives its timeout (hookargs.TimeoutSeconds), while another process holds
// the hook state's lock throughout (a verifier that hangs): the hook gives
// up first, and its record says why.
func TestOutcomeBeforeTheRuntimeKillsIt(t *testing.T) {
	if args := os.Getenv(envHookArgs); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			t.Fatal(err)
		}
		if err := Run(argv, os.Stdin); err != nil {
			t.Fatal(err)
		}
		return
	}
	n := newNode(t, 2)
	n.t = t
	unlock, err := hookstate.Lock(n.state, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	argv, err := json.Marshal(n.args("--swap-limit=104857600", "--claim-uid="+claimA))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOutcomeBeforeTheRuntimeKillsIt$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHookArgs+"="+string(argv))
	cmd.Stdin = strings.NewReader(stateJSON(cid, pid))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(hookargs.TimeoutSeconds * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("killed at the runtime's timeout (%ds) like runc kills it (%v); output:\n%s", hookargs.TimeoutSeconds, <-exited, out.String())
	}
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(out.String(), "still held") {
		t.Fatalf("hook exited with %v after %v, want a failure naming the held lock; output:\n%s", err, took, out.String())
	}
	r := readRecord(t, n)
	if !strings.Contains(r.Error, "still held") || len(r.Claims) != 1 || r.Claims[0] != claimA {
		t.Errorf("record %+v, want the held lock's error for claim A", r)
	}
	t.Logf("the hook gave up after %v (runtime's timeout %ds)", took.Round(time.Millisecond), hookargs.TimeoutSeconds)
}

// A write to the cgroup that does not return (here a FIFO no one reads,
// as a write that the kernel's reclaim holds up) is given up at the
// deadline: the record names the step, and the hook fails.
func TestDeadlineWhileACgroupWriteHangs(t *testing.T) {
	n := hangingWriteNode(t)
	returned := make(chan error, 1)
	go func() {
		returned <- run(n.args("--swap-limit=104857600", "--claim-uid="+claimA), strings.NewReader(stateJSON(cid, pid)),
			runLimits{deadline: 300 * time.Millisecond, lockWait: time.Second})
	}()
	var err error
	select {
	case err = <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the hook still runs 10 s after its 300ms deadline")
	}
	const want = "gave up after 300ms writing the container's swap limit to its cgroup " + group
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one containing %q", err, want)
	}
	if r := readRecord(t, n); !strings.Contains(r.Error, want) || r.Namespace != "ns" || r.Container != "worker" {
		t.Errorf("record %+v, want the deadline's error", r)
	}
}

// Arguments this hook does not know (a newer release's spec) leave a
// record too, in the state directory they name.
func TestArgumentErrorLeavesARecord(t *testing.T) {
	n := newNode(t, 2)
	n.t = t
	err := Run(n.args("--swap-limit=104857600", "--claim-uid="+claimA, "--from-the-future=1"), strings.NewReader(stateJSON(cid, pid)))
	if err == nil || !strings.Contains(err.Error(), "newer dra.swap release") {
		t.Fatalf("error %v, want the unknown flag's", err)
	}
	if r := readRecord(t, n); !strings.Contains(r.Error, "from-the-future") || r.Container != "worker" || len(r.Claims) != 1 || r.Claims[0] != claimA {
		t.Errorf("record %+v, want the unknown flag's error", r)
	}
	// Without a usable --state-dir, nothing is written anywhere.
	if err := Run([]string{"--state-dir=relative", "--bogus"}, strings.NewReader(stateJSON(cid, pid))); err == nil {
		t.Fatal("no error for a bogus flag")
	}
	if _, err := os.Stat(filepath.Join("relative", hookrecord.Dir)); !os.IsNotExist(err) {
		t.Errorf("a record under a relative state directory: %v", err)
	}
}

func TestDeadlineWellUnderTheRuntimesTimeout(t *testing.T) {
	if LockWait >= Deadline || 2*Deadline > hookargs.TimeoutSeconds*time.Second {
		t.Errorf("lock wait %v, deadline %v, runtime's timeout %ds: want lock wait < deadline ≤ half the timeout", LockWait, Deadline, hookargs.TimeoutSeconds)
	}
}

// hangingWriteNode is a v2 node whose container's memory.swap.max is a
// FIFO no one reads: a write to it does not return, as a write that the
// kernel's reclaim holds up.
func hangingWriteNode(t *testing.T) *node {
	t.Helper()
	n := newNode(t, 2)
	n.t = t
	fifo := filepath.Join(n.dir, "memory.swap.max")
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}
