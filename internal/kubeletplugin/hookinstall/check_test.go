package hookinstall

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
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
// allows execution again, without a restart; Runs is told each time.
func TestHookOnANoexecMount(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := noexecDir(t)
	src := writeSource(t, t.TempDir(), "hook", []byte("#!/bin/sh\necho dra-swap-hook test\n"))
	dst := filepath.Join(dir, "bin", "dra-swap-hook")
	if _, err := Install(src, dst); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(dst, "--version").Run(); err == nil {
		t.Fatal("a program on a noexec mount ran")
	}
	var runs []bool
	c := &Check{Path: dst, HostPath: "/opt/dra-swap/bin/dra-swap-hook", Runs: func(ran bool) { runs = append(runs, ran) }}
	problem := c.Problem(ctx)
	for _, want := range []string{"/opt/dra-swap/bin/dra-swap-hook", "permission denied", "noexec mount", "kubeletPlugin.hookDir"} {
		if !strings.Contains(problem, want) {
			t.Errorf("problem %q does not say %q", problem, want)
		}
	}
	if len(runs) != 1 || runs[0] {
		t.Errorf("told runs %v, want [false]", runs)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		t.Fatalf("remount with exec: %v", err)
	}
	if problem := c.Problem(ctx); problem != "" {
		t.Errorf("after the remount: %q, want none", problem)
	}
	if len(runs) != 2 || !runs[1] {
		t.Errorf("told runs %v, want [false true]", runs)
	}
}
