// Package hookinstall installs the OCI hook binary where the CDI specs name
// it (Install), atomically and only when it changed, and checks that it runs
// there as the runtime will run it (Check).
package hookinstall

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/atomicfile"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
)

// hookMode is the installed hook's mode: runc runs it as root.
const hookMode fs.FileMode = 0o755

// Install installs the hook binary src at dst, the host path the CDI
// specs name, and reports whether it wrote anything. The old and the new
// plugin pod of a rolling update both install at start-up, and runc may
// start the hook at any moment: so a dst that already has src's content
// (by SHA-256) and mode is left alone, and a new one is written to a
// temporary file in dst's directory, made executable, synced and renamed
// over dst, and the directory synced. A hook run sees the old binary or
// the new one, never a partial file, also across a crash.
func Install(src, dst string) (installed bool, err error) {
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("open hook binary to install: %w", err)
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return false, fmt.Errorf("stat hook binary to install: %w", err)
	}
	if !info.Mode().IsRegular() {
		return false, fmt.Errorf("hook binary to install %s is not a regular file", src)
	}
	same, err := sameContent(in, info.Size(), dst)
	if err != nil {
		return false, err
	}
	if same {
		return false, nil
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return false, fmt.Errorf("rewind hook binary %s: %w", src, err)
	}

	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create hook directory %s: %w", dir, err)
	}
	if err := atomicfile.Write(dst, in, hookMode, "hook"); err != nil {
		return false, fmt.Errorf("install hook binary %s: %w", src, err)
	}
	return true, nil
}

// sameContent reports whether dst is a regular file with hookMode and the
// content of src (size bytes, read from its current offset).
func sameContent(src io.Reader, size int64, dst string) (bool, error) {
	info, err := os.Stat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat installed hook: %w", err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm() != hookMode || info.Size() != size {
		return false, nil
	}
	want, err := digest(src)
	if err != nil {
		return false, fmt.Errorf("hash hook binary to install: %w", err)
	}
	f, err := os.Open(dst)
	if err != nil {
		return false, fmt.Errorf("open installed hook: %w", err)
	}
	defer f.Close()
	got, err := digest(f)
	if err != nil {
		return false, fmt.Errorf("hash installed hook %s: %w", dst, err)
	}
	return bytes.Equal(got, want), nil
}

func digest(r io.Reader) ([]byte, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// hookCheckTimeout bounds a run of the installed hook's --version (2 ms
// on a 2-core machine; a thrashing node pages it in slowly).
const hookCheckTimeout = 10 * time.Second

// Check runs the hook the plugin installed, where it installed it, as
// the runtime will (`dra-swap-hook --version`): a hook directory on a
// noexec mount, a binary for another architecture or a truncated file
// fails every container with a swap claim at its start, and the node must
// not offer swap then (discovery.Facts.HookProblem). It checks at
// start-up and, while the hook does not run, again at each rescan, so that
// a mount fixed without a restart is noticed; a hook that ran is not run
// again (on a thrashing node a slow run must not withdraw the offer).
type Check struct {
	// Path is the hook as the plugin sees it (under the host root),
	// HostPath as the runtime does (the CDI specs' path).
	Path, HostPath string
	// Runs, if set, is told after each check whether the hook ran.
	Runs func(ran bool)

	mu      sync.Mutex
	ran     bool
	problem string
}

// Problem says why the installed hook cannot run ("" when it can),
// checking it as described on Check.
func (c *Check) Problem(ctx context.Context) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ran {
		return ""
	}
	wasProblem := c.problem
	c.problem = ""
	if err := runHook(ctx, c.Path); err != nil {
		c.problem = fmt.Sprintf("the hook %s, which the runtime runs for every container with a swap claim, cannot run where the plugin installed it: %v", c.HostPath, err)
		if c.problem != wasProblem {
			klog.FromContext(ctx).Error(err, "The installed hook does not run; the node offers no swap until it does", "hook", c.HostPath)
		}
	} else {
		c.ran = true
		klog.FromContext(ctx).Info("The installed hook runs", "hook", c.HostPath)
	}
	if c.Runs != nil {
		c.Runs(c.ran)
	}
	return c.problem
}

// runHook runs `path --version` and checks that it is dra-swap-hook's
// answer; the error explains a failure to start it.
func runHook(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, hookCheckTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s --version did not finish within %s", path, hookCheckTimeout)
	case errors.Is(err, fs.ErrPermission) && noexec(filepath.Dir(path)):
		return fmt.Errorf("%w: its directory is on a noexec mount; set the chart's kubeletPlugin.hookDir (--hook-path) to a directory on a mount that allows execution", err)
	case err != nil:
		return fmt.Errorf("%s --version: %w (output %q)", path, err, eventmsg.Truncate(strings.TrimSpace(out.String()), 200))
	case !strings.HasPrefix(out.String(), hookProgram+" "):
		return fmt.Errorf("%s --version printed %q, not %s's version", path, eventmsg.Truncate(strings.TrimSpace(out.String()), 200), hookProgram)
	}
	return nil
}

// hookProgram is the hook's name, which starts its --version line.
const hookProgram = "dra-swap-hook"

// noexec reports whether dir is on a mount that forbids execution.
func noexec(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}
