package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Host directories of sysfs that describe block devices.
const (
	// sysClassBlock lists block devices and partitions by kernel name.
	sysClassBlock = "/sys/class/block"
	// sysDevBlock lists block devices and partitions by major:minor.
	sysDevBlock = "/sys/dev/block"
)

// maxSymlinks bounds how many symlinks resolveHostLink follows, as the
// kernel's MAXSYMLINKS does.
const maxSymlinks = 40

// deviceMedium returns the storage behind a swap area: zram for
// compressed RAM, otherwise what the backing disk's queue/rotational says.
// Whatever cannot be determined is MediumUnknown.
func deviceMedium(root string, dev SwapDevice) Medium {
	if strings.HasPrefix(dev.Path, "/dev/zram") {
		return MediumZram
	}
	var sysDir string
	var ok bool
	if dev.Type == "partition" {
		sysDir, ok = blockDeviceSysDir(root, dev.Path)
	} else {
		sysDir, ok = fileSysDir(root, dev.Path)
	}
	if !ok {
		return MediumUnknown
	}
	return sysDirMedium(root, sysDir)
}

// blockDeviceSysDir finds the sysfs directory of the block device at the
// host path dev: by kernel name (following /dev symlinks such as
// /dev/mapper/x -> ../dm-0), by device-mapper name, and finally by the
// device number of the device node.
func blockDeviceSysDir(root, dev string) (string, bool) {
	classDir := hostPath(root, sysClassBlock)
	for _, name := range blockDeviceNames(root, dev) {
		dir := filepath.Join(classDir, name)
		if isKernelName(name) && exists(dir) {
			return dir, true
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(hostPath(root, dev), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK {
		return devNumberSysDir(root, uint64(st.Rdev))
	}
	return "", false
}

// blockDeviceNames returns the kernel names the block device at the host
// path dev may have, most likely first.
func blockDeviceNames(root, dev string) []string {
	var names []string
	if resolved := resolveHostLink(root, dev); resolved != dev {
		names = append(names, filepath.Base(resolved))
	}
	names = append(names, filepath.Base(dev))
	if rel, ok := strings.CutPrefix(dev, "/dev/"); ok && strings.Contains(rel, "/") {
		// Devices in /dev subdirectories, such as /dev/cciss/c0d0p1,
		// are named with "!" in sysfs.
		names = append(names, strings.ReplaceAll(rel, "/", "!"))
	}
	if mapped, ok := strings.CutPrefix(dev, "/dev/mapper/"); ok {
		if name, ok := deviceMapperName(root, mapped); ok {
			names = append(names, name)
		}
	}
	return names
}

// isKernelName reports whether name can be a block device's kernel name,
// a single path element.
func isKernelName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, filepath.Separator)
}

// resolveHostLink follows the symlinks at the host path p, reading them
// under root, and returns the host path they lead to (p itself when it is
// not a symlink). Absolute targets are taken as host paths.
func resolveHostLink(root, p string) string {
	for range maxSymlinks {
		target, err := os.Readlink(hostPath(root, p))
		if err != nil {
			return p
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = filepath.Clean(target)
	}
	return p
}

// deviceMapperName returns the kernel name (dm-N) of the device-mapper
// device called mapped, from the dm/name files in sysfs.
func deviceMapperName(root, mapped string) (string, bool) {
	matches, err := filepath.Glob(filepath.Join(hostPath(root, sysClassBlock), "dm-*", "dm", "name"))
	if err != nil {
		return "", false
	}
	for _, m := range matches {
		if name, err := readTrimmed(m); err == nil && name == mapped {
			return filepath.Base(filepath.Dir(filepath.Dir(m))), true
		}
	}
	return "", false
}

// fileSysDir finds the sysfs directory of the block device that holds the
// file at the host path file: from the file's st_dev where the file can be
// seen under root (the plugin run on the host), else from the host's mount
// table (in its pod, which mounts /proc/1/mountinfo but not the host's
// root). Files on filesystems without a backing block device (tmpfs,
// overlayfs, btrfs' anonymous devices) have none.
func fileSysDir(root, file string) (string, bool) {
	var st unix.Stat_t
	if err := unix.Stat(hostPath(root, file), &st); err != nil {
		return mountSysDir(root, file)
	}
	return devNumberSysDir(root, uint64(st.Dev))
}

// devNumberSysDir returns the sysfs directory of the block device number
// dev, if sysfs has one.
func devNumberSysDir(root string, dev uint64) (string, bool) {
	dir := filepath.Join(hostPath(root, sysDevBlock), fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev)))
	return dir, exists(dir)
}

// sysDirMedium reads the medium of the block device whose sysfs directory
// is sysDir. A partition has no queue of its own; its disk's is read.
func sysDirMedium(root, sysDir string) Medium {
	dir := sysDir
	if real, err := filepath.EvalSymlinks(sysDir); err == nil {
		dir = real
	}
	if strings.HasPrefix(filepath.Base(dir), "zram") {
		return MediumZram
	}
	if exists(filepath.Join(dir, "partition")) {
		dir = partitionDisk(root, dir)
	}
	switch v, _ := readTrimmed(filepath.Join(dir, "queue", "rotational")); v {
	case "0":
		return MediumSSD
	case "1":
		return MediumHDD
	default:
		return MediumUnknown
	}
}

// partitionDisk returns the sysfs directory of the disk that holds the
// partition whose resolved sysfs directory is dir. In the real sysfs that
// is dir's parent; for a tree of plain directories the disk is looked up in
// /sys/class/block as the directory that contains the partition.
func partitionDisk(root, dir string) string {
	parent := filepath.Dir(dir)
	if exists(filepath.Join(parent, "queue")) {
		return parent
	}
	matches, err := filepath.Glob(filepath.Join(hostPath(root, sysClassBlock), "*", filepath.Base(dir), "partition"))
	if err != nil || len(matches) == 0 {
		return parent
	}
	return filepath.Dir(filepath.Dir(matches[0]))
}
