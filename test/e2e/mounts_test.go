package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPluginMountsReadOnly: every mount the plugin's container has at or
// under a host path the chart mounts read-only is read-only, submounts
// included, as the container sees them (its mount table, read from the
// host through /proc/<pid>), and the kernel refuses to write there
// (access(2) W_OK: EROFS, or EACCES where the filesystem refuses first);
// the writable host paths stay writable. The test
// first mounts on the host what most nodes have under /sys and this one
// may lack (bpffs at /sys/fs/bpf, tracefs at /sys/kernel/tracing), then
// restarts the plugin so that its new container binds them: a plain
// read-only bind of /sys would leave them writable. Host leg only: the
// mounts are the runtime's, not the cgroup version's.
func TestPluginMountsReadOnly(t *testing.T) {
	c := loadCluster(t)
	var submounts []string
	for _, m := range []struct{ fstype, target string }{{"bpf", "/sys/fs/bpf"}, {"tracefs", "/sys/kernel/tracing"}} {
		if mounted, err := isMountPoint(m.target); err != nil || mounted {
			if mounted {
				submounts = append(submounts, m.target)
			}
			continue
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			t.Logf("mount %s at %s: %v", m.fstype, m.target, err)
			continue
		}
		t.Cleanup(func() {
			if err := unix.Unmount(m.target, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", m.target, err)
			}
		})
		submounts = append(submounts, m.target)
	}
	if len(submounts) == 0 {
		t.Fatal("no mount under /sys to check: neither /sys/fs/bpf nor /sys/kernel/tracing is or can be mounted")
	}
	c.restartPlugin(t)

	ds, _ := c.driverWorkloads(t)
	hostPath := map[string]bool{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		hostPath[v.Name] = v.HostPath != nil
	}
	var readOnly, writable []string
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		switch {
		case !hostPath[m.Name]:
		case m.ReadOnly:
			readOnly = append(readOnly, m.MountPath)
		default:
			writable = append(writable, m.MountPath)
		}
	}
	pid := pluginPID(t)
	mounts, err := readMountInfo(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	under := func(p string, dirs []string) bool {
		for _, d := range dirs {
			if p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") {
				return true
			}
		}
		return false
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	checked, found, top := 0, map[string]bool{}, map[string]mountInfo{}
	for _, m := range mounts {
		switch {
		case under(m.point, writable):
			if slices.Contains(writable, m.point) {
				// The last mount at a point is the one on top: /sys's
				// read-only copy of /sys/fs/cgroup lies beneath the
				// writable bind of /sys/fs/cgroup.
				top[m.point] = m
			}
		case under(m.point, readOnly):
			checked++
			for _, s := range submounts {
				if m.point == "/host"+s {
					found[s] = true
				}
			}
			if !m.has("ro") {
				t.Errorf("%s (%s) is mounted %s in the plugin's container, under a read-only host path", m.point, m.fstype, m.options)
			}
			// EROFS, or EACCES where the filesystem refuses first (a
			// directory of /proc/sys).
			if err := unix.Access(filepath.Join(root, m.point), unix.W_OK); err == nil {
				t.Errorf("access(%s, W_OK) in the plugin's container: writable, want EROFS", m.point)
			} else if !errors.Is(err, unix.EROFS) {
				t.Logf("access(%s, W_OK) in the plugin's container: %v", m.point, err)
			}
		}
	}
	for _, p := range writable {
		if m, ok := top[p]; !ok || !m.has("rw") {
			t.Errorf("writable host path %s is mounted %q in the plugin's container, want rw", p, m.options)
		}
	}
	for _, s := range submounts {
		if !found[s] {
			t.Errorf("the host's %s is not mounted at /host%s in the plugin's container: nothing proves its submounts are read-only", s, s)
		}
	}
	t.Logf("%d mounts under the read-only host paths %v are read-only in the plugin's container (pid %d), the host's %v among them", checked, readOnly, pid, submounts)
}

// mountInfo is one line of /proc/<pid>/mountinfo.
type mountInfo struct {
	point, options, fstype string
}

func (m mountInfo) has(option string) bool {
	return slices.Contains(strings.Split(m.options, ","), option)
}

// readMountInfo parses a mountinfo file: mount point (field 5), per-mount
// options (field 6) and, after the " - " separator, the filesystem type.
func readMountInfo(path string) ([]mountInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []mountInfo
	scanner := bufio.NewScanner(bytes.NewReader(data))
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 6 || sep < 6 || sep+1 >= len(fields) {
			return nil, fmt.Errorf("%s: malformed line %q", path, scanner.Text())
		}
		out = append(out, mountInfo{point: unescapeOctal(fields[4]), options: fields[5], fstype: fields[sep+1]})
	}
	return out, scanner.Err()
}

// unescapeOctal undoes mountinfo's \ooo escapes (space, tab, newline,
// backslash).
func unescapeOctal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMountPoint reports whether path is a mount point in this process's
// mount namespace.
func isMountPoint(path string) (bool, error) {
	mounts, err := readMountInfo("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	if _, err := os.Stat(path); err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m.point == path {
			return true, nil
		}
	}
	return false, nil
}
