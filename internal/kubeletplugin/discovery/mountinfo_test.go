package discovery

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// hostMounts is a host mount table as the kernel writes it: the root on
// sda2, /boot on sda1, /var/lib on an HDD, /data on LVM, /run on tmpfs.
const hostMounts = `22 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
25 22 0:25 / /run rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,mode=755
26 22 8:1 / /boot rw,relatime shared:30 - vfat /dev/sda1 rw
27 22 8:17 / /var/lib rw,relatime shared:31 - xfs /dev/sdb1 rw
28 22 253:0 / /data rw,relatime shared:32 - ext4 /dev/mapper/vg-data rw
`

func TestParseMountinfo(t *testing.T) {
	got, err := parseMountinfo("36 35 98:0 /mnt1 /mnt/my\\040disk rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"\n37 36 0:5 / / rw - tmpfs tmpfs rw\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []mountEntry{
		{id: 36, parent: 35, major: 98, minor: 0, mountPoint: "/mnt/my disk"},
		{id: 37, parent: 36, major: 0, minor: 5, mountPoint: "/"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseMountinfo() = %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"36 35 98:0 /mnt1\n",
		"x 35 98:0 / / rw - ext4 /dev/a rw\n",
		"36 y 98:0 / / rw - ext4 /dev/a rw\n",
		"36 35 980 / / rw - ext4 /dev/a rw\n",
		"36 35 a:0 / / rw - ext4 /dev/a rw\n",
		"36 35 8:b / / rw - ext4 /dev/a rw\n",
		"36 35 8:0 / relative rw - ext4 /dev/a rw\n",
	} {
		if _, err := parseMountinfo(bad); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("parseMountinfo(%q) error = %v, want one naming line 1", bad, err)
		}
	}
}

func TestMountOf(t *testing.T) {
	tests := []struct {
		name   string
		mounts string
		path   string
		want   string // major:minor, "" for none
	}{
		{name: "root", mounts: hostMounts, path: "/swapfile", want: "8:2"},
		{name: "longest prefix", mounts: hostMounts, path: "/var/lib/swap/file", want: "8:17"},
		{name: "prefix by whole elements", mounts: hostMounts, path: "/var/library/swapfile", want: "8:2"},
		{name: "mount point itself", mounts: hostMounts, path: "/data", want: "253:0"},
		{name: "unclean path", mounts: hostMounts, path: "/data/../boot//x", want: "8:1"},
		{
			name:   "later mount at the same point wins",
			mounts: hostMounts + "40 27 8:33 / /var/lib rw - ext4 /dev/sdc1 rw\n",
			path:   "/var/lib/swapfile", want: "8:33",
		},
		{
			name:   "stacked mounts without a parent link: the later wins",
			mounts: hostMounts + "40 22 8:33 / /data rw - ext4 /dev/sdc1 rw\n",
			path:   "/data/swapfile", want: "8:33",
		},
		{
			name: "a mount over a parent hides the mounts under it",
			// /var (sdc1) mounted, /var/lib (sdb1) under it, then a new
			// /var (sdd1) over the first: /var/lib/x is on sdd1.
			mounts: "22 1 8:2 / / rw - ext4 /dev/sda2 rw\n" +
				"30 22 8:33 / /var rw - ext4 /dev/sdc1 rw\n" +
				"31 30 8:17 / /var/lib rw - xfs /dev/sdb1 rw\n" +
				"32 30 8:49 / /var rw - ext4 /dev/sdd1 rw\n",
			path: "/var/lib/x", want: "8:49",
		},
		{
			name: "bind mount of a directory",
			mounts: hostMounts +
				"41 22 8:17 /swap /mnt/swap rw - xfs /dev/sdb1 rw\n",
			path: "/mnt/swap/file", want: "8:17",
		},
		{
			name:   "escaped mount point",
			mounts: hostMounts + "42 22 8:49 / /mnt/swap\\040space rw - ext4 /dev/sdd1 rw\n",
			path:   "/mnt/swap space/file", want: "8:49",
		},
		{
			name:   "root on top of the initial rootfs",
			mounts: "1 1 0:2 / / rw - rootfs rootfs rw\n20 1 254:0 / / rw - ext4 /dev/vda rw\n",
			path:   "/var/lib/dra-swap-e2e/swap/swapfile-1", want: "254:0",
		},
		{
			name:   "parent outside the table (a container's namespace)",
			mounts: "500 480 0:60 / / rw - overlay overlay rw\n501 500 8:2 /var/swap /swap rw - ext4 /dev/sda2 rw\n",
			path:   "/swap/file", want: "8:2",
		},
		{name: "no mount", mounts: "", path: "/swapfile", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mounts, err := parseMountinfo(tc.mounts)
			if err != nil {
				t.Fatal(err)
			}
			m, ok := mountOf(mounts, tc.path)
			got := ""
			if ok {
				got = fmt.Sprintf("%d:%d", m.major, m.minor)
			}
			if got != tc.want {
				t.Errorf("mountOf(%q) = %q (%+v), want %q", tc.path, got, m, tc.want)
			}
		})
	}
}

// TestDiscoverSwapFileFromMountTable: in the plugin's pod the swap file
// cannot be seen, only /proc/swaps, sysfs and the host's mount table; the
// file's device comes from the mount that holds it.
func TestDiscoverSwapFileFromMountTable(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		mounts string
		setup  func(h hostTree)
		want   Medium
	}{
		{
			name:   "ssd partition",
			line:   "/swapfile file 1048576 0 -2\n",
			mounts: hostMounts,
			setup: func(h hostTree) {
				addSda(h, "0")
				h.symlink("/sys/dev/block/8:2", "../../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda/sda2")
			},
			want: MediumSSD,
		},
		{
			name:   "hdd partition",
			line:   "/var/lib/swap/file-1 file 1048576 0 -2\n",
			mounts: hostMounts,
			setup: func(h hostTree) {
				h.write("/sys/devices/pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0/block/sdb/queue/rotational", "1\n")
				h.write("/sys/devices/pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0/block/sdb/sdb1/partition", "1\n")
				h.symlink("/sys/dev/block/8:17", "../../devices/pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0/block/sdb/sdb1")
			},
			want: MediumHDD,
		},
		{
			name:   "whole virtio disk, rotational",
			line:   "/var/lib/dra-swap-e2e/swap/swapfile-1 file 1048576 0 -2\n",
			mounts: "20 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n",
			setup: func(h hostTree) {
				h.write("/sys/devices/pci0000:00/0000:00:04.0/virtio1/block/vda/queue/rotational", "1\n")
				h.symlink("/sys/dev/block/254:0", "../../devices/pci0000:00/0000:00:04.0/virtio1/block/vda")
			},
			want: MediumHDD,
		},
		{
			name:   "device-mapper",
			line:   "/data/swapfile file 1048576 0 -2\n",
			mounts: hostMounts,
			setup: func(h hostTree) {
				h.write("/sys/devices/virtual/block/dm-0/queue/rotational", "0\n")
				h.write("/sys/devices/virtual/block/dm-0/dm/name", "vg-data\n")
				h.symlink("/sys/dev/block/253:0", "../../devices/virtual/block/dm-0")
			},
			want: MediumSSD,
		},
		{
			name:   "escaped path on a bind mount over the root",
			line:   "/mnt/swap\\040space/file file 1048576 0 -2\n",
			mounts: hostMounts + "42 22 8:17 /swap /mnt/swap\\040space rw - xfs /dev/sdb1 rw\n",
			setup: func(h hostTree) {
				addSda(h, "0")
				h.symlink("/sys/dev/block/8:2", "../../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda/sda2")
				h.write("/sys/dev/block/8:17/queue/rotational", "1\n")
			},
			want: MediumHDD,
		},
		{
			name:   "tmpfs has no device",
			line:   "/run/swapfile file 1048576 0 -2\n",
			mounts: hostMounts,
			setup:  func(h hostTree) {},
			want:   MediumUnknown,
		},
		{
			name:  "no mount table",
			line:  "/swapfile file 1048576 0 -2\n",
			setup: func(h hostTree) { addSda(h, "0") },
			want:  MediumUnknown,
		},
		{
			name:   "unparsable mount table",
			line:   "/swapfile file 1048576 0 -2\n",
			mounts: "22 1 8:2\n",
			setup:  func(h hostTree) { addSda(h, "0") },
			want:   MediumUnknown,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, tc.line)
			if tc.mounts != "" {
				h.write(hostMountinfoPath, tc.mounts)
			}
			tc.setup(h)
			devices, err := readDevices(h.root)
			if err != nil {
				t.Fatal(err)
			}
			if len(devices) != 1 || devices[0].Medium != tc.want {
				t.Errorf("devices = %+v, want one of medium %q", devices, tc.want)
			}
		})
	}
}
