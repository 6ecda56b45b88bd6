package discovery

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// hostMountinfoPath is the host's mount table: the mounts of the host's
// init process, with mount points relative to the host's root. The chart
// mounts this one file into the plugin's pod (never the host's root), so
// that a swap file's filesystem, and so its device, is known there too.
const hostMountinfoPath = "/proc/1/mountinfo"

// mountEntry is one line of /proc/<pid>/mountinfo, the fields used here.
type mountEntry struct {
	id, parent   int
	major, minor uint32
	mountPoint   string
}

// parseMountinfo parses the content of /proc/<pid>/mountinfo (see
// proc(5)): "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3
// /dev/root rw". Mount points are decoded from the kernel's octal escapes
// (\040 for a space). A line that does not have the fields read here is
// an error that quotes the line.
func parseMountinfo(data string) ([]mountEntry, error) {
	var mounts []mountEntry
	scanner := bufio.NewScanner(strings.NewReader(data))
	scanner.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for lineNo := 1; scanner.Scan(); lineNo++ {
		line := scanner.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		m, err := parseMountinfoLine(fields)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", lineNo, line, err)
		}
		mounts = append(mounts, m)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return mounts, nil
}

// parseMountinfoLine converts the fields of one mountinfo line.
func parseMountinfoLine(fields []string) (mountEntry, error) {
	// ID, parent ID, major:minor, root, mount point, options, then
	// optional fields up to "-".
	if len(fields) < 6 {
		return mountEntry{}, fmt.Errorf("want at least 6 fields, got %d", len(fields))
	}
	id, err := strconv.Atoi(fields[0])
	if err != nil {
		return mountEntry{}, fmt.Errorf("mount ID: %w", err)
	}
	parent, err := strconv.Atoi(fields[1])
	if err != nil {
		return mountEntry{}, fmt.Errorf("parent ID: %w", err)
	}
	maj, min, ok := strings.Cut(fields[2], ":")
	if !ok {
		return mountEntry{}, fmt.Errorf("device %q is not major:minor", fields[2])
	}
	major, err := strconv.ParseUint(maj, 10, 32)
	if err != nil {
		return mountEntry{}, fmt.Errorf("device major: %w", err)
	}
	minor, err := strconv.ParseUint(min, 10, 32)
	if err != nil {
		return mountEntry{}, fmt.Errorf("device minor: %w", err)
	}
	mountPoint := unescapeOctal(fields[4])
	if !path.IsAbs(mountPoint) {
		return mountEntry{}, fmt.Errorf("mount point %q is not absolute", mountPoint)
	}
	return mountEntry{id: id, parent: parent, major: uint32(major), minor: uint32(minor), mountPoint: path.Clean(mountPoint)}, nil
}

// mountOf returns the mount that holds the absolute path p: of the mounts
// not hidden by others, the one whose mount point is the longest prefix
// of p, the later in the table on a tie. A mount is hidden when another
// is mounted on top of it (a mount whose parent it is, at its own mount
// point) or when its parent is hidden: a mount over /var hides the mounts
// made under /var before it.
func mountOf(mounts []mountEntry, p string) (mountEntry, bool) {
	p = path.Clean(p)
	byID := make(map[int]int, len(mounts))
	covered := make(map[int]bool)
	for i, m := range mounts {
		byID[m.id] = i
	}
	for _, m := range mounts {
		if i, ok := byID[m.parent]; ok && m.parent != m.id && mounts[i].mountPoint == m.mountPoint {
			covered[m.parent] = true
		}
	}
	hidden := func(m mountEntry) bool {
		if covered[m.id] {
			return true
		}
		// Walk up the parents: a mount inside a covered one is hidden,
		// the one covering it is not. A chain longer than the table is a
		// loop.
		for range len(mounts) + 1 {
			i, ok := byID[m.parent]
			if !ok || m.parent == m.id {
				return false
			}
			p := mounts[i]
			if covered[p.id] && p.mountPoint != m.mountPoint {
				return true
			}
			m = p
		}
		return true
	}
	best, found := mountEntry{}, false
	for _, m := range mounts {
		if !isPathPrefix(m.mountPoint, p) || hidden(m) {
			continue
		}
		if !found || len(m.mountPoint) >= len(best.mountPoint) {
			best, found = m, true
		}
	}
	return best, found
}

// isPathPrefix reports whether the clean absolute path dir is p or one of
// its ancestors.
func isPathPrefix(dir, p string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// mountSysDir finds the sysfs directory of the block device that holds
// the host file at path file from the host's mount table (hostMountinfoPath
// under root): the device number of the mount that holds it. That works
// where the file itself cannot be seen, as in the plugin's pod.
func mountSysDir(root, file string) (string, bool) {
	data, err := os.ReadFile(hostPath(root, hostMountinfoPath))
	if err != nil {
		return "", false
	}
	mounts, err := parseMountinfo(string(data))
	if err != nil {
		return "", false
	}
	m, ok := mountOf(mounts, file)
	if !ok {
		return "", false
	}
	return devNumberSysDir(root, unix.Mkdev(m.major, m.minor))
}
