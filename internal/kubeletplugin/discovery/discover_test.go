package discovery

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

const (
	testBootID = "6a0b8e2e-4d1c-4f5e-9b7a-0c1d2e3f4a5b"
	kib        = int64(1024)
	// sdaSysfs is where the real sysfs keeps disk sda; /sys/class/block
	// and /sys/dev/block hold symlinks into it.
	sdaSysfs = "/sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda"
)

// newHost returns a host tree of a cgroup v2 node with kernel 6.1, zswap
// off, the kubelet on NoSwap and /proc/swaps listing lines.
func newHost(t *testing.T, lines ...string) hostTree {
	h := newHostTree(t)
	h.write("/proc/swaps", procSwapsHeader+strings.Join(lines, ""))
	h.write("/proc/sys/kernel/osrelease", "6.1.0-25-amd64\n")
	h.write("/proc/sys/kernel/random/boot_id", testBootID+"\n")
	h.write("/sys/module/zswap/parameters/enabled", "N\n")
	h.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	h.write("/sys/fs/cgroup/memory.stat", "anon 0\n")
	h.write("/sys/fs/cgroup/kubepods.slice/memory.swap.max", "max\n")
	h.write(DefaultKubeletConfigPath, kubeletConfig("NoSwap"))
	return h
}

// addSda adds disk sda with partition sda2 in the real sysfs layout.
func addSda(h hostTree, rotational string) {
	h.write(sdaSysfs+"/queue/rotational", rotational+"\n")
	h.write(sdaSysfs+"/sda2/partition", "2\n")
	h.write(sdaSysfs+"/sda2/dev", "8:2\n")
	h.symlink("/sys/class/block/sda", "../../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda")
	h.symlink("/sys/class/block/sda2", "../../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda/sda2")
}

// devNumber returns the major:minor of the device that holds the host
// file p in the tree.
func devNumber(t *testing.T, h hostTree, p string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(h.path(p), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)))
}

// baseFacts is what Discover returns for newHost with the given devices.
func baseFacts(devices ...SwapDevice) Facts {
	f := Facts{
		Devices:       devices,
		Medium:        MediumUnknown,
		CgroupVersion: 2,
		SwapControl:   true,
		KernelVersion: "6.1.0",
		SwapBehavior:  v1alpha1.SwapBehaviorNoSwap,
		BootID:        testBootID,
	}
	for _, d := range devices {
		f.TotalBytes += d.SizeBytes
		f.UsedBytes += d.UsedBytes
	}
	if len(devices) > 0 {
		f.Medium = devices[0].Medium
	}
	return f
}

func TestDiscover(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		setup func(t *testing.T, h hostTree)
		want  func(f *Facts)
		// devices, when set, replaces the expected devices (and totals).
		devices []SwapDevice
	}{
		{
			name: "no swap",
			want: func(*Facts) {},
		},
		{
			name:  "cgroup v1 with memsw",
			lines: []string{"/dev/vdb partition 2097152 0 -2\n"},
			setup: func(t *testing.T, h hostTree) {
				h.remove("/sys/fs/cgroup")
				h.write("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "9223372036854771712\n")
				h.write("/sys/fs/cgroup/cpu,cpuacct/cpu.shares", "1024\n")
				h.write("/sys/class/block/vdb/queue/rotational", "0\n")
			},
			devices: []SwapDevice{{Path: "/dev/vdb", Type: "partition", SizeBytes: 2 << 30, Priority: -2, Medium: MediumSSD}},
			want:    func(f *Facts) { f.CgroupVersion = 1 },
		},
		{
			name: "cgroup v1 without memsw",
			setup: func(t *testing.T, h hostTree) {
				h.remove("/sys/fs/cgroup")
				h.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
			},
			want: func(f *Facts) { f.CgroupVersion, f.SwapControl = 1, false },
		},
		{
			name: "hybrid: unified mounted but memory on v1",
			setup: func(t *testing.T, h hostTree) {
				h.remove("/sys/fs/cgroup")
				h.write("/sys/fs/cgroup/unified/cgroup.controllers", "\n")
				h.write("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "9223372036854771712\n")
			},
			want: func(f *Facts) { f.CgroupVersion = 1 },
		},
		{
			name: "cgroup v2 without a child swap control file",
			setup: func(t *testing.T, h hostTree) {
				h.remove("/sys/fs/cgroup/kubepods.slice/memory.swap.max")
				h.write("/sys/fs/cgroup/memory.swap.max", "max\n") // the root's never counts
			},
			want: func(f *Facts) { f.SwapControl = false },
		},
		{
			name: "cgroup v2 with memory.reclaim and memory.pressure: offload can run",
			setup: func(t *testing.T, h hostTree) {
				h.write("/sys/fs/cgroup/kubepods.slice/memory.reclaim", "")
				h.write("/sys/fs/cgroup/kubepods.slice/memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
				h.write("/sys/fs/cgroup/init.scope/memory.reclaim", "") // no memory.swap.max: not where containers are
			},
			want: func(f *Facts) { f.MemoryReclaim, f.MemoryPressure = true, true },
		},
		{
			name: "cgroup v2 without PSI (psi=0 at boot hides memory.pressure)",
			setup: func(t *testing.T, h hostTree) {
				h.write("/sys/fs/cgroup/kubepods.slice/memory.reclaim", "")
			},
			want: func(f *Facts) { f.MemoryReclaim = true },
		},
		{
			name: "cgroup v2 of Linux 6.12: memory.swap.peak and memory.zswap.writeback",
			setup: func(t *testing.T, h hostTree) {
				h.write("/sys/fs/cgroup/kubepods.slice/memory.swap.peak", "0\n")
				h.write("/sys/fs/cgroup/kubepods.slice/memory.zswap.writeback", "1\n")
			},
			want: func(f *Facts) { f.SwapPeak, f.ZswapWriteback = true, true },
		},
		{
			name: "cgroup v2 of Linux 6.5: memory.swap.peak only",
			setup: func(t *testing.T, h hostTree) {
				h.write("/sys/fs/cgroup/kubepods.slice/memory.swap.peak", "0\n")
			},
			want: func(f *Facts) { f.SwapPeak = true },
		},
		{
			name: "cgroup v2: the files of a cgroup without memory.swap.max do not count",
			setup: func(t *testing.T, h hostTree) {
				h.remove("/sys/fs/cgroup/kubepods.slice/memory.swap.max")
				h.write("/sys/fs/cgroup/memory.swap.peak", "0\n")
				h.write("/sys/fs/cgroup/init.scope/memory.zswap.writeback", "1\n")
			},
			want: func(f *Facts) { f.SwapControl = false },
		},
		{
			name: "cgroup v2 without the memory controller",
			setup: func(t *testing.T, h hostTree) {
				h.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io pids\n")
			},
			want: func(f *Facts) { f.SwapControl = false },
		},
		{
			name:  "no cgroup",
			setup: func(t *testing.T, h hostTree) { h.remove("/sys/fs/cgroup") },
			want:  func(f *Facts) { f.CgroupVersion, f.SwapControl = 0, false },
		},
		{
			name:    "zram device",
			lines:   []string{"/dev/zram0 partition 4194300 2048 100\n"},
			setup:   func(t *testing.T, h hostTree) { h.write("/sys/class/block/zram0/queue/rotational", "0\n") },
			devices: []SwapDevice{{Path: "/dev/zram0", Type: "partition", SizeBytes: 4194300 * kib, UsedBytes: 2048 * kib, Priority: 100, Medium: MediumZram}},
			want:    func(*Facts) {},
		},
		{
			name:  "zram found through a /dev symlink",
			lines: []string{"/dev/disk/by-label/zswap partition 1024 0 5\n"},
			setup: func(t *testing.T, h hostTree) {
				h.symlink("/dev/disk/by-label/zswap", "../../zram1")
				h.write("/sys/class/block/zram1/queue/rotational", "0\n")
			},
			devices: []SwapDevice{{Path: "/dev/disk/by-label/zswap", Type: "partition", SizeBytes: 1024 * kib, Priority: 5, Medium: MediumZram}},
			want:    func(*Facts) {},
		},
		{
			name:    "ssd partition reads its disk's rotational",
			lines:   []string{"/dev/sda2 partition 8388604 0 -2\n"},
			setup:   func(t *testing.T, h hostTree) { addSda(h, "0") },
			devices: []SwapDevice{{Path: "/dev/sda2", Type: "partition", SizeBytes: 8388604 * kib, Priority: -2, Medium: MediumSSD}},
			want:    func(*Facts) {},
		},
		{
			name:  "partition in a tree of plain directories",
			lines: []string{"/dev/nvme0n1p3 partition 1024 0 -2\n"},
			setup: func(t *testing.T, h hostTree) {
				h.write("/sys/class/block/nvme0n1/queue/rotational", "1\n")
				h.write("/sys/class/block/nvme0n1/nvme0n1p3/partition", "3\n")
				h.write("/sys/class/block/nvme0n1p3/partition", "3\n")
			},
			devices: []SwapDevice{{Path: "/dev/nvme0n1p3", Type: "partition", SizeBytes: 1024 * kib, Priority: -2, Medium: MediumHDD}},
			want:    func(*Facts) {},
		},
		{
			name:    "hdd disk",
			lines:   []string{"/dev/sdb partition 1048572 0 -2\n"},
			setup:   func(t *testing.T, h hostTree) { h.write("/sys/class/block/sdb/queue/rotational", "1\n") },
			devices: []SwapDevice{{Path: "/dev/sdb", Type: "partition", SizeBytes: 1048572 * kib, Priority: -2, Medium: MediumHDD}},
			want:    func(*Facts) {},
		},
		{
			name:  "device-mapper symlink",
			lines: []string{"/dev/mapper/vg-swap partition 1024 0 -2\n"},
			setup: func(t *testing.T, h hostTree) {
				h.symlink("/dev/mapper/vg-swap", "../dm-0")
				h.write("/sys/class/block/dm-0/queue/rotational", "1\n")
			},
			devices: []SwapDevice{{Path: "/dev/mapper/vg-swap", Type: "partition", SizeBytes: 1024 * kib, Priority: -2, Medium: MediumHDD}},
			want:    func(*Facts) {},
		},
		{
			name:  "device-mapper name without /dev",
			lines: []string{"/dev/mapper/vg-swap partition 1024 0 -2\n"},
			setup: func(t *testing.T, h hostTree) {
				h.write("/sys/class/block/dm-0/dm/name", "vg-root\n")
				h.write("/sys/class/block/dm-0/queue/rotational", "1\n")
				h.write("/sys/class/block/dm-1/dm/name", "vg-swap\n")
				h.write("/sys/class/block/dm-1/queue/rotational", "0\n")
			},
			devices: []SwapDevice{{Path: "/dev/mapper/vg-swap", Type: "partition", SizeBytes: 1024 * kib, Priority: -2, Medium: MediumSSD}},
			want:    func(*Facts) {},
		},
		{
			name:  "unknown rotational value",
			lines: []string{"/dev/vdb partition 1024 0 -2\n"},
			setup: func(t *testing.T, h hostTree) {
				h.write("/sys/class/block/vdb/queue/rotational", "2\n")
			},
			devices: []SwapDevice{{Path: "/dev/vdb", Type: "partition", SizeBytes: 1024 * kib, Priority: -2, Medium: MediumUnknown}},
			want:    func(*Facts) {},
		},
		{
			name:    "device missing from sysfs",
			lines:   []string{"/dev/vdz partition 1024 0 -2\n"},
			devices: []SwapDevice{{Path: "/dev/vdz", Type: "partition", SizeBytes: 1024 * kib, Priority: -2, Medium: MediumUnknown}},
			want:    func(*Facts) {},
		},
		{
			name:  "swap file on a partition",
			lines: []string{"/swap\\040file file 1048576 0 -2\n"},
			setup: func(t *testing.T, h hostTree) {
				h.write("/swap file", "")
				addSda(h, "0")
				h.symlink("/sys/dev/block/"+devNumber(t, h, "/swap file"), "../../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda/sda2")
			},
			devices: []SwapDevice{{Path: "/swap file", Type: "file", SizeBytes: 1 << 30, Priority: -2, Medium: MediumSSD}},
			want:    func(*Facts) {},
		},
		{
			name:  "swap file on a disk, plain sysfs directory",
			lines: []string{"/var/swapfile file 1048576 0 -2\n"},
			setup: func(t *testing.T, h hostTree) {
				h.write("/var/swapfile", "")
				h.write("/sys/dev/block/"+devNumber(t, h, "/var/swapfile")+"/queue/rotational", "1\n")
			},
			devices: []SwapDevice{{Path: "/var/swapfile", Type: "file", SizeBytes: 1 << 30, Priority: -2, Medium: MediumHDD}},
			want:    func(*Facts) {},
		},
		{
			name:    "deleted swap file",
			lines:   []string{"/swapfile\\040(deleted) file 1048576 0 -2\n"},
			devices: []SwapDevice{{Path: "/swapfile (deleted)", Type: "file", SizeBytes: 1 << 30, Priority: -2, Medium: MediumUnknown}},
			want:    func(*Facts) {},
		},
		{
			name: "mixed devices: the highest priority sets the medium",
			lines: []string{
				"/dev/sda2 partition 1024 0 -2\n",
				"/dev/sdb partition 2048 0 5\n",
				"/dev/zram0 partition 4096 0 100\n",
			},
			setup: func(t *testing.T, h hostTree) {
				addSda(h, "0")
				h.write("/sys/class/block/sdb/queue/rotational", "1\n")
			},
			devices: []SwapDevice{
				{Path: "/dev/sda2", Type: "partition", SizeBytes: 1024 * kib, Priority: -2, Medium: MediumSSD},
				{Path: "/dev/sdb", Type: "partition", SizeBytes: 2048 * kib, Priority: 5, Medium: MediumHDD},
				{Path: "/dev/zram0", Type: "partition", SizeBytes: 4096 * kib, Priority: 100, Medium: MediumZram},
			},
			want: func(f *Facts) { f.Medium = MediumZram },
		},
		{
			name: "mixed devices: the first wins a tie",
			lines: []string{
				"/dev/sdb partition 2048 1024 -2\n",
				"/dev/sda2 partition 1024 0 10\n",
				"/dev/sdc partition 1024 0 10\n",
			},
			setup: func(t *testing.T, h hostTree) {
				addSda(h, "0")
				h.write("/sys/class/block/sdb/queue/rotational", "1\n")
				h.write("/sys/class/block/sdc/queue/rotational", "1\n")
			},
			devices: []SwapDevice{
				{Path: "/dev/sdb", Type: "partition", SizeBytes: 2048 * kib, UsedBytes: 1024 * kib, Priority: -2, Medium: MediumHDD},
				{Path: "/dev/sda2", Type: "partition", SizeBytes: 1024 * kib, Priority: 10, Medium: MediumSSD},
				{Path: "/dev/sdc", Type: "partition", SizeBytes: 1024 * kib, Priority: 10, Medium: MediumHDD},
			},
			want: func(f *Facts) { f.Medium = MediumSSD },
		},
		{
			name:  "zswap on (Y)",
			setup: func(t *testing.T, h hostTree) { h.write("/sys/module/zswap/parameters/enabled", "Y\n") },
			want:  func(f *Facts) { f.Zswap = true },
		},
		{
			name:  "zswap on (1)",
			setup: func(t *testing.T, h hostTree) { h.write("/sys/module/zswap/parameters/enabled", "1\n") },
			want:  func(f *Facts) { f.Zswap = true },
		},
		{
			name:  "zswap not built in",
			setup: func(t *testing.T, h hostTree) { h.remove("/sys/module/zswap") },
			want:  func(*Facts) {},
		},
		{
			name:  "kernel 6.8 has tmpfs noswap",
			setup: func(t *testing.T, h hostTree) { h.write("/proc/sys/kernel/osrelease", "6.8.0-45-generic\n") },
			want:  func(f *Facts) { f.KernelVersion, f.TmpfsNoswap = "6.8.0", true },
		},
		{
			name:  "LimitedSwap",
			setup: func(t *testing.T, h hostTree) { h.write(DefaultKubeletConfigPath, kubeletConfig("LimitedSwap")) },
			want:  func(f *Facts) { f.SwapBehavior = v1alpha1.SwapBehaviorLimitedSwap },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, tc.lines...)
			if tc.setup != nil {
				tc.setup(t, h)
			}
			want := baseFacts(tc.devices...)
			tc.want(&want)
			_, ctx := ktesting.NewTestContext(t)
			got, err := Discover(ctx, Options{Root: h.root, KubeletConfigPath: DefaultKubeletConfigPath})
			if err != nil {
				t.Fatalf("Discover() error = %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Discover() =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestDiscoverErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(h hostTree)
		wantErr string
	}{
		{
			name:    "missing /proc/swaps",
			setup:   func(h hostTree) { h.remove("/proc/swaps") },
			wantErr: "/proc/swaps: no such file",
		},
		{
			name:    "malformed /proc/swaps",
			setup:   func(h hostTree) { h.write("/proc/swaps", procSwapsHeader+"/dev/sda2 partition lots 0 -2\n") },
			wantErr: `/proc/swaps: line 2 "/dev/sda2 partition lots 0 -2"`,
		},
		{
			name: "total size overflows",
			setup: func(h hostTree) {
				h.write("/proc/swaps", procSwapsHeader+"/a file 9007199254740991 0 -2\n/b file 9007199254740991 0 -3\n")
			},
			wantErr: "overflows",
		},
		{
			name:    "missing boot_id",
			setup:   func(h hostTree) { h.remove("/proc/sys/kernel/random/boot_id") },
			wantErr: "/proc/sys/kernel/random/boot_id: no such file",
		},
		{
			name:    "empty boot_id",
			setup:   func(h hostTree) { h.write("/proc/sys/kernel/random/boot_id", "\n") },
			wantErr: "/proc/sys/kernel/random/boot_id is empty",
		},
		{
			name:    "missing osrelease",
			setup:   func(h hostTree) { h.remove("/proc/sys/kernel/osrelease") },
			wantErr: "/proc/sys/kernel/osrelease: no such file",
		},
		{
			name:    "malformed osrelease",
			setup:   func(h hostTree) { h.write("/proc/sys/kernel/osrelease", "linux\n") },
			wantErr: `/proc/sys/kernel/osrelease: kernel release "linux"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			tc.setup(h)
			_, ctx := ktesting.NewTestContext(t)
			_, err := Discover(ctx, Options{Root: h.root})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Discover() error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestDiscoverUnreadableKubeletConfig checks that a kubelet configuration
// that cannot be read is logged and recorded, not fatal.
func TestDiscoverUnreadableKubeletConfig(t *testing.T) {
	tests := []struct {
		name        string
		opts        func(root string) Options
		setup       func(h hostTree)
		wantProblem string
	}{
		{
			name:        "missing file",
			opts:        func(root string) Options { return Options{Root: root, KubeletConfigPath: "/etc/kubelet.yaml"} },
			wantProblem: "/etc/kubelet.yaml",
		},
		{
			name:        "unknown value",
			opts:        func(root string) Options { return Options{Root: root, KubeletConfigPath: DefaultKubeletConfigPath} },
			setup:       func(h hostTree) { h.write(DefaultKubeletConfigPath, kubeletConfig("Everything")) },
			wantProblem: "Everything",
		},
		{
			name:        "no kubelet config given",
			opts:        func(root string) Options { return Options{Root: root} },
			wantProblem: "no kubelet configuration file",
		},
		{
			name: "unreadable file",
			opts: func(root string) Options { return Options{Root: root, KubeletConfigPath: DefaultKubeletConfigPath} },
			// A directory where the file should be: read fails as it
			// would for a file the plugin may not read.
			setup: func(h hostTree) {
				h.remove(DefaultKubeletConfigPath)
				h.mkdir(DefaultKubeletConfigPath)
			},
			wantProblem: "read kubelet configuration",
		},
		{
			name:        "missing drop-in directory",
			opts:        func(root string) Options { return Options{Root: root, KubeletConfigDir: "/etc/kubelet.conf.d"} },
			wantProblem: "/etc/kubelet.conf.d",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			if tc.setup != nil {
				tc.setup(h)
			}
			got, err := Discover(context.Background(), tc.opts(h.root))
			if err != nil {
				t.Fatalf("Discover() error = %v", err)
			}
			if got.SwapBehavior != v1alpha1.SwapBehaviorUnknown {
				t.Errorf("SwapBehavior = %q, want %q", got.SwapBehavior, v1alpha1.SwapBehaviorUnknown)
			}
			if !strings.Contains(got.SwapBehaviorProblem, tc.wantProblem) {
				t.Errorf("SwapBehaviorProblem %q does not mention %q", got.SwapBehaviorProblem, tc.wantProblem)
			}
		})
	}
}

func TestHostPath(t *testing.T) {
	tests := []struct{ root, p, want string }{
		{root: "", p: "/proc/swaps", want: "/proc/swaps"},
		{root: "/", p: "/proc/swaps", want: "/proc/swaps"},
		{root: "/host", p: "/proc/swaps", want: "/host/proc/swaps"},
		{root: "/host/", p: "/dev/../proc/swaps", want: "/host/proc/swaps"},
	}
	for _, tc := range tests {
		if got := hostPath(tc.root, tc.p); got != tc.want {
			t.Errorf("hostPath(%q, %q) = %q, want %q", tc.root, tc.p, got, tc.want)
		}
	}
}
