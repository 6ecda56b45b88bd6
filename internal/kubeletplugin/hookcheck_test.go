package kubeletplugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

func TestRunHook(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tests := []struct {
		name    string
		content string // "" for no file
		mode    os.FileMode
		wantErr string
	}{
		{name: "the hook answers its version", content: "#!/bin/sh\necho 'dra-swap-hook v0.3.0 (abc)'\n", mode: 0o755},
		{name: "another program", content: "#!/bin/sh\necho hello\n", mode: 0o755, wantErr: "not dra-swap-hook's version"},
		{name: "fails", content: "#!/bin/sh\necho broken >&2; exit 3\n", mode: 0o755, wantErr: "exit status 3"},
		{name: "not a program for this machine", content: "\x7fELF\x02garbage", mode: 0o755, wantErr: "exec format error"},
		{name: "not executable", content: "#!/bin/sh\necho dra-swap-hook\n", mode: 0o644, wantErr: "permission denied"},
		{name: "missing", wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dra-swap-hook")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			err := runHook(ctx, path)
			if (err != nil) != (tc.wantErr != "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("runHook = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// noexecDir mounts a tmpfs with noexec on a new directory (root only).
func noexecDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a noexec tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, "size=16m"); err != nil {
		t.Skipf("cannot mount a noexec tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestHookOnANoexecMount: the hook installed on a noexec mount does not
// run; the check says so, naming the mount, and notices when the mount
// allows execution again, without a restart.
func TestHookOnANoexecMount(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := noexecDir(t)
	src := writeSource(t, t.TempDir(), "hook", []byte("#!/bin/sh\necho dra-swap-hook test\n"))
	dst := filepath.Join(dir, "bin", "dra-swap-hook")
	if _, err := installHook(src, dst); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(dst, "--version").Run(); err == nil {
		t.Fatal("a program on a noexec mount ran")
	}
	m := NewMetrics()
	m.enableHookRuns()
	c := &hookCheck{path: dst, hostPath: "/opt/dra-swap/bin/dra-swap-hook", metrics: m}
	problem := c.Problem(ctx)
	for _, want := range []string{"/opt/dra-swap/bin/dra-swap-hook", "permission denied", "noexec mount", "kubeletPlugin.hookDir"} {
		if !strings.Contains(problem, want) {
			t.Errorf("problem %q does not say %q", problem, want)
		}
	}
	if page := scrapeHandler(t, m); !strings.Contains(page, "\ndra_swap_hook_runs 0\n") {
		t.Errorf("metrics lack dra_swap_hook_runs 0:\n%s", page)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		t.Fatalf("remount with exec: %v", err)
	}
	if problem := c.Problem(ctx); problem != "" {
		t.Errorf("after the remount: %q, want none", problem)
	}
	if page := scrapeHandler(t, m); !strings.Contains(page, "\ndra_swap_hook_runs 1\n") {
		t.Errorf("metrics lack dra_swap_hook_runs 1:\n%s", page)
	}
}

// TestPublisherHookEvents: a hook that does not run withdraws the node's
// offer (capacity 0, usable false, the no-usable-swap taint, the reason
// as the device's health), told to the Node once; when it runs again the
// offer returns, with a Normal event.
func TestPublisherHookEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const problem = "the hook /opt/dra-swap/bin/dra-swap-hook, which the runtime runs for every container with a swap claim, cannot run where the plugin installed it: permission denied: its directory is on a noexec mount"
	node := &fakeNode{facts: facts(1 << 30)}
	node.facts.HookProblem = problem
	reporter := &eventRecorder{}
	written := &sliceRecorder{}
	p := &publish.Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, Node: node, Reporter: reporter}
	if err := p.TakeOver(ctx, written); err != nil {
		t.Fatal(err)
	}
	sync := func(what string) {
		t.Helper()
		if _, err := p.Sync(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	sync("the hook does not run")
	dev, reason := p.Device()
	if reason != problem || p.Offer() != 0 || len(dev.Taints) != 1 || dev.Taints[0].Key != v1alpha1.TaintNoUsableSwap ||
		*dev.Attributes[v1alpha1.AttrUsable].BoolValue {
		t.Fatalf("device %+v, reason %q, offer %d; want no offer, tainted %s, with the hook's problem", dev, reason, p.Offer(), v1alpha1.TaintNoUsableSwap)
	}
	if len(reporter.events) != 1 || reporter.events[0].reason != publish.ReasonHookNotRunnable || reporter.events[0].eventType != "Warning" ||
		reporter.events[0].action != "RunHook" || !strings.Contains(reporter.events[0].message, "noexec mount") {
		t.Fatalf("events %+v, want one %s", reporter.events, publish.ReasonHookNotRunnable)
	}
	sync("still")
	if len(reporter.events) != 1 {
		t.Errorf("events %+v, want no more while nothing changed", reporter.events)
	}
	node.facts.HookProblem = ""
	sync("runs again")
	if _, reason := p.Device(); reason != "" || p.Offer() != 1<<30 {
		t.Errorf("after the hook runs: reason %q, offer %d; want the swap offered", reason, p.Offer())
	}
	if len(reporter.events) != 2 || reporter.events[1].reason != publish.ReasonHookRuns || reporter.events[1].eventType != "Normal" {
		t.Errorf("events %+v, want a %s", reporter.events, publish.ReasonHookRuns)
	}
}
