package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// TestAttributesMatchHost: every attribute the plugin publishes from its
// pod (which sees the host only through the chart's few read-only mounts)
// equals what the node's host says, read here directly, as the suite runs
// on the node: /proc/swaps, the swap area's disk's queue/rotational
// (through the swap file's st_dev on the host, not the mount table the
// plugin reads), zswap, the kernel release, the cgroup version, the
// kubelet's configuration and the Node's labels. The plugin rescans every
// few seconds; the test waits for the two to agree and, if they never do,
// names every attribute that differs.
func TestAttributesMatchHost(t *testing.T) {
	c := loadCluster(t, needsNode("compares the published attributes with the node's own files (/proc/swaps, sysfs, the kubelet's configuration)"))
	want := c.attributesMatchHost(t)
	t.Logf("published attributes match the host: %v", want)
}

// TestAttributesMatchHostBlockDevices: the same comparison with a block
// device as the node's best swap area (above the swap file's priority): a
// zram device, then a loop device, which /proc/swaps lists as a partition
// and whose disk's queue/rotational gives the medium.
func TestAttributesMatchHostBlockDevices(t *testing.T) {
	c := loadCluster(t, needsNode("makes zram and loop devices the node's swap areas"))
	for _, tc := range []struct {
		name   string
		device func(t *testing.T) string
		medium func(path string) string
	}{
		{"zram", zramDevice, func(string) string { return "zram" }},
		{"partition", loopDevice, func(path string) string {
			return hostMedium(hostSwapArea{path: path, kind: "partition"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.device(t)
			hostRun(t, "mkswap", path)
			hostRun(t, "swapon", "--priority", "32000", path)
			t.Cleanup(func() { hostRun(t, "swapoff", path) })
			want := c.attributesMatchHost(t)
			if m := tc.medium(path); want["medium"] != m || m == "unknown" {
				t.Fatalf("the host's medium of %s is %q, want %q (known)", path, want["medium"], m)
			}
			t.Logf("with %s first: published attributes match the host: %v", path, want)
		})
	}
}

// zramDevice adds a 64 MiB zram device, removed again at cleanup.
func zramDevice(t *testing.T) string {
	t.Helper()
	id, err := os.ReadFile("/sys/class/zram-control/hot_add")
	if err != nil {
		t.Fatalf("add a zram device: %v", err)
	}
	n := strings.TrimSpace(string(id))
	t.Cleanup(func() {
		if err := os.WriteFile("/sys/class/zram-control/hot_remove", []byte(n), 0); err != nil {
			t.Errorf("remove zram%s: %v", n, err)
		}
	})
	if err := os.WriteFile("/sys/block/zram"+n+"/disksize", []byte("64M"), 0); err != nil {
		t.Fatalf("size zram%s: %v", n, err)
	}
	return "/dev/zram" + n
}

// loopDevice attaches a 64 MiB file to a loop device, detached again at
// cleanup.
func loopDevice(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "swap.img")
	if err := os.WriteFile(file, make([]byte, 64<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dev := strings.TrimSpace(hostRun(t, "losetup", "--find", "--show", file))
	t.Cleanup(func() { hostRun(t, "losetup", "--detach", dev) })
	return dev
}

// hostRun runs a command on this host and returns its output.
func hostRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// attributesMatchHost waits until the attributes of the swap device this
// node publishes equal what the host says, and returns those; it fails
// naming every attribute that differs if they never do.
func (c *env) attributesMatchHost(t *testing.T) map[resourceapi.QualifiedName]string {
	t.Helper()
	var diffs []string
	var want map[resourceapi.QualifiedName]string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, cluster.Scaled(60*time.Second), true, func(ctx context.Context) (bool, error) {
		node, err := c.client.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if want, err = hostAttributes(c.dir, node.Labels); err != nil {
			return false, err
		}
		dev := c.swapDevice(t)
		if dev == nil {
			diffs = []string{"the node publishes no swap device"}
			return false, nil
		}
		diffs = attributeDiffs(dev.Attributes, want)
		return len(diffs) == 0, nil
	})
	if err != nil {
		t.Fatalf("the published attributes never matched the host's (%v):\n%s", err, strings.Join(diffs, "\n"))
	}
	return want
}

// attributeDiffs names each attribute whose published value differs from
// want, and each published attribute want does not know (every one must
// be checked).
func attributeDiffs(published map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, want map[resourceapi.QualifiedName]string) []string {
	var diffs []string
	for _, name := range slices.Sorted(maps.Keys(published)) {
		got := attributeString(published[name])
		w, ok := want[name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: published %s, which this test does not check against the host", name, got))
		case got != w:
			diffs = append(diffs, fmt.Sprintf("%s: published %s, the host says %s", name, got, w))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := published[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: not published, the host says %s", name, want[name]))
		}
	}
	return diffs
}

// attributeString is an attribute's value as text.
func attributeString(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	case a.BoolValue != nil:
		return strconv.FormatBool(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return "<no value>"
}

// hostSwapArea is one line of the host's /proc/swaps.
type hostSwapArea struct {
	path, kind    string
	sizeKiB, prio int64
}

// hostAttributes is what the host says each of the device's attributes
// should be, as text.
func hostAttributes(clusterDir string, nodeLabels map[string]string) (map[resourceapi.QualifiedName]string, error) {
	areas, err := hostSwapAreas()
	if err != nil {
		return nil, err
	}
	var total int64
	medium := "unknown"
	best := -1
	for i, a := range areas {
		total += a.sizeKiB * 1024
		if best < 0 || a.prio > areas[best].prio {
			best = i
		}
	}
	if best >= 0 {
		medium = hostMedium(areas[best])
	}
	zswap := false
	switch v, err := os.ReadFile("/sys/module/zswap/parameters/enabled"); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		s := strings.TrimSpace(string(v))
		zswap = s == "Y" || s == "1"
	}
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`^(\d+)\.(\d+)(?:\.(\d+))?`).FindStringSubmatch(strings.TrimSpace(string(release)))
	if m == nil {
		return nil, fmt.Errorf("kernel release %q", release)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	patch := 0
	if m[3] != "" {
		patch, _ = strconv.Atoi(m[3])
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return nil, fmt.Errorf("statfs /sys/fs/cgroup: %w", err)
	}
	cgroupVersion := 1
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		cgroupVersion = 2
	}
	// The newer swap files of a v2 memory cgroup, read in the kubelet's
	// own top cgroup (the plugin looks at any child of the root); the
	// cluster's plugin runs its offload loop (the chart's default), so the
	// node offloads where that cgroup has memory.reclaim and
	// memory.pressure.
	swapPeak, zswapWriteback, offload := false, false, false
	if cgroupVersion == 2 {
		for _, top := range []string{"kubepods.slice", "kubepods"} {
			dir := filepath.Join("/sys/fs/cgroup", top)
			if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err != nil {
				continue
			}
			has := func(file string) bool { _, err := os.Stat(filepath.Join(dir, file)); return err == nil }
			swapPeak, zswapWriteback = has("memory.swap.peak"), has("memory.zswap.writeback")
			offload = has("memory.reclaim") && has("memory.pressure")
		}
	}
	behavior, err := kubeletSwapBehavior(filepath.Join(clusterDir, "kubelet", "config.yaml"))
	if err != nil {
		return nil, err
	}
	want := map[resourceapi.QualifiedName]string{
		"swapBehavior":   behavior,
		"totalBytes":     strconv.FormatInt(total, 10),
		"devices":        strconv.Itoa(len(areas)),
		"medium":         medium,
		"zswap":          strconv.FormatBool(zswap),
		"cgroupVersion":  strconv.Itoa(cgroupVersion),
		"kernelVersion":  fmt.Sprintf("%d.%d.%d", major, minor, patch),
		"tmpfsNoswap":    strconv.FormatBool(major > 6 || major == 6 && minor >= 4),
		"swapLimitExact": strconv.FormatBool(cgroupVersion == 2),
		"swapPeak":       strconv.FormatBool(swapPeak),
		"zswapWriteback": strconv.FormatBool(zswapWriteback),
		"usable":         "true",
		"offload":        strconv.FormatBool(offload),
	}
	for _, label := range []string{"topology.kubernetes.io/zone", "topology.kubernetes.io/region", "kubernetes.io/hostname"} {
		if v := nodeLabels[label]; v != "" {
			want[resourceapi.QualifiedName(label)] = v
		}
	}
	return want, nil
}

// hostSwapAreas parses the host's /proc/swaps.
func hostSwapAreas() ([]hostSwapArea, error) {
	f, err := os.Open("/proc/swaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var areas []hostSwapArea
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) != 5 || fields[0] == "Filename" {
			continue
		}
		size, err1 := strconv.ParseInt(fields[2], 10, 64)
		prio, err2 := strconv.ParseInt(fields[4], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("/proc/swaps line %q: %w", scanner.Text(), err)
		}
		// The kernel escapes a space as \040 (and tab, newline, backslash).
		path := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(fields[0])
		areas = append(areas, hostSwapArea{path: path, kind: fields[1], sizeKiB: size, prio: prio})
	}
	return areas, scanner.Err()
}

// hostMedium is the medium of a swap area as the host sees it: zram, or
// the rotational flag of the disk that holds it (a partition's disk), the
// device found by the device number of the block device itself or of the
// swap file's filesystem.
func hostMedium(a hostSwapArea) string {
	if strings.HasPrefix(a.path, "/dev/zram") {
		return "zram"
	}
	var st unix.Stat_t
	if err := unix.Stat(a.path, &st); err != nil {
		return "unknown"
	}
	dev := st.Dev
	if a.kind == "partition" {
		dev = st.Rdev
	}
	dir, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return "unknown"
	}
	if strings.HasPrefix(filepath.Base(dir), "zram") {
		return "zram"
	}
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		dir = filepath.Dir(dir)
	}
	switch v, _ := os.ReadFile(filepath.Join(dir, "queue", "rotational")); strings.TrimSpace(string(v)) {
	case "0":
		return "ssd"
	case "1":
		return "hdd"
	}
	return "unknown"
}

// kubeletSwapBehavior is memorySwap.swapBehavior of the kubelet's
// configuration file (hack/cluster/up.sh writes one, no drop-ins), NoSwap
// when unset.
func kubeletSwapBehavior(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the kubelet's configuration: %w", err)
	}
	var cfg kubeletconfig.KubeletConfiguration
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	if cfg.MemorySwap.SwapBehavior == "" {
		return "NoSwap", nil
	}
	return cfg.MemorySwap.SwapBehavior, nil
}
