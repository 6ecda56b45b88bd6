package cgroupswap

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

const group = "/kubepods/burstable/pod1/ctr1"

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// v1Tree is a cgroup v1 memory hierarchy as the kubelet leaves it under
// NoSwap: memsw equal to the memory limit.
func v1Tree(t *testing.T, memLimit string) (root, dir string) {
	root = t.TempDir()
	dir = filepath.Join(root, "memory", group)
	write(t, filepath.Join(dir, "memory.limit_in_bytes"), memLimit+"\n")
	write(t, filepath.Join(dir, "memory.memsw.limit_in_bytes"), memLimit+"\n")
	write(t, filepath.Join(dir, "memory.swappiness"), "60\n")
	return root, dir
}

func v2Tree(t *testing.T) (root, dir string) {
	root = t.TempDir()
	dir = filepath.Join(root, group)
	write(t, filepath.Join(root, "cgroup.controllers"), "cpu memory pids\n")
	write(t, filepath.Join(dir, "memory.swap.max"), "0\n")
	write(t, filepath.Join(dir, "memory.swap.high"), "max\n")
	write(t, filepath.Join(dir, "memory.zswap.max"), "max\n")
	write(t, filepath.Join(dir, "memory.zswap.writeback"), "1\n")
	return root, dir
}

func TestApplyV1(t *testing.T) {
	tests := []struct {
		name       string
		memLimit   string
		settings   swapsettings.Settings
		wantMemsw  string
		wantSwappy string
		wantErr    string
	}{
		{name: "limit added to memory", memLimit: "134217728", settings: swapsettings.Settings{LimitBytes: 314572800}, wantMemsw: "448790528", wantSwappy: "60"},
		{name: "zero swap", memLimit: "134217728", settings: swapsettings.Settings{LimitBytes: 0}, wantMemsw: "134217728", wantSwappy: "60"},
		{name: "swappiness", memLimit: "134217728", settings: swapsettings.Settings{LimitBytes: 1 << 20, Swappiness: ptr.To[uint64](5)}, wantMemsw: "135266304", wantSwappy: "5"},
		{name: "no memory limit", memLimit: "9223372036854771712", settings: swapsettings.Settings{LimitBytes: 1 << 20}, wantErr: "container ns/pod/c has no memory limit"},
		{name: "overflow", memLimit: "4611686018427387000", settings: swapsettings.Settings{LimitBytes: math.MaxInt64 - 1000}, wantErr: "overflows"},
		{name: "v2 knob", memLimit: "134217728", settings: swapsettings.Settings{HighBytes: ptr.To[int64](1)}, wantErr: "only on cgroup v2"},
		{name: "v2 zswap", memLimit: "134217728", settings: swapsettings.Settings{Zswap: swapsettings.ZswapOff}, wantErr: "only on cgroup v2"},
		{name: "v2 zswap writeback", memLimit: "134217728", settings: swapsettings.Settings{ZswapWritebackOff: true}, wantErr: "only on cgroup v2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root, dir := v1Tree(t, tc.memLimit)
			err := Apply(Target{Version: 1, Root: root, Group: group, Container: "ns/pod/c"}, tc.settings)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Apply error = %v, want %q", err, tc.wantErr)
				}
				if got := read(t, filepath.Join(dir, "memory.memsw.limit_in_bytes")); got != tc.memLimit {
					t.Errorf("memsw changed to %s on error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := read(t, filepath.Join(dir, "memory.memsw.limit_in_bytes")); got != tc.wantMemsw {
				t.Errorf("memsw = %s, want %s", got, tc.wantMemsw)
			}
			if got := read(t, filepath.Join(dir, "memory.swappiness")); got != tc.wantSwappy {
				t.Errorf("swappiness = %s, want %s", got, tc.wantSwappy)
			}
			if got := read(t, filepath.Join(dir, "memory.limit_in_bytes")); got != tc.memLimit {
				t.Errorf("memory limit changed to %s", got)
			}
			if limit, err := ReadLimit(1, root, group); err != nil || limit != tc.settings.LimitBytes {
				t.Errorf("ReadLimit = %d, %v", limit, err)
			}
		})
	}
}

func TestApplyV1WithoutSwapAccounting(t *testing.T) {
	root, dir := v1Tree(t, "134217728")
	os.Remove(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
	err := Apply(Target{Version: 1, Root: root, Group: group, Container: "c"}, swapsettings.Settings{LimitBytes: 1})
	if err == nil || !strings.Contains(err.Error(), "swapaccount=1") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error = %v", err)
	}
}

func TestApplyV2(t *testing.T) {
	tests := []struct {
		name      string
		settings  swapsettings.Settings
		wantFiles map[string]string
		wantErr   string
	}{
		{name: "limit", settings: swapsettings.Settings{LimitBytes: 314572800}, wantFiles: map[string]string{"memory.swap.max": "314572800", "memory.swap.high": "max", "memory.zswap.max": "max"}},
		{name: "high and zswap off", settings: swapsettings.Settings{LimitBytes: 100, HighBytes: ptr.To[int64](80), Zswap: swapsettings.ZswapOff},
			wantFiles: map[string]string{"memory.swap.max": "100", "memory.swap.high": "80", "memory.zswap.max": "0"}},
		{name: "zswap on", settings: swapsettings.Settings{LimitBytes: 100, Zswap: swapsettings.ZswapOn}, wantFiles: map[string]string{"memory.zswap.max": "max", "memory.zswap.writeback": "1"}},
		{name: "compressed only", settings: swapsettings.Settings{LimitBytes: 100, ZswapWritebackOff: true, OffloadMaxStall: ptr.To[int32](5)},
			wantFiles: map[string]string{"memory.swap.max": "100", "memory.zswap.max": "max", "memory.zswap.writeback": "0"}},
		{name: "swappiness", settings: swapsettings.Settings{LimitBytes: 1, Swappiness: ptr.To[uint64](1)}, wantErr: "no per-cgroup swappiness"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root, dir := v2Tree(t)
			err := Apply(Target{Version: 2, Root: root, Group: group, Container: "c"}, tc.settings)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for f, want := range tc.wantFiles {
				if got := read(t, filepath.Join(dir, f)); got != want {
					t.Errorf("%s = %s, want %s", f, got, want)
				}
			}
		})
	}
}

func TestApplyV2Missing(t *testing.T) {
	root, dir := v2Tree(t)
	os.Remove(filepath.Join(dir, "memory.swap.max"))
	if err := Apply(Target{Version: 2, Root: root, Group: group, Container: "c"}, swapsettings.Settings{}); err == nil || !strings.Contains(err.Error(), "has no memory.swap.max") {
		t.Fatalf("error = %v", err)
	}
	root, dir = v2Tree(t)
	os.Remove(filepath.Join(dir, "memory.zswap.max"))
	if err := Apply(Target{Version: 2, Root: root, Group: group, Container: "c"}, swapsettings.Settings{Zswap: swapsettings.ZswapOff}); err == nil || !strings.Contains(err.Error(), "5.19") {
		t.Fatalf("error = %v", err)
	}
	root, dir = v2Tree(t)
	os.Remove(filepath.Join(dir, "memory.zswap.writeback"))
	if err := Apply(Target{Version: 2, Root: root, Group: group, Container: "c"}, swapsettings.Settings{ZswapWritebackOff: true}); err == nil || !strings.Contains(err.Error(), "6.8") {
		t.Fatalf("error = %v", err)
	}
}

func TestApplyRejectsBadTargets(t *testing.T) {
	root, _ := v2Tree(t)
	for _, target := range []Target{
		{Version: 2, Root: root, Group: "relative"},
		{Version: 2, Root: root, Group: "/a/../../etc"},
		{Version: 3, Root: root, Group: group},
	} {
		if err := Apply(target, swapsettings.Settings{}); err == nil {
			t.Errorf("Apply(%+v) succeeded", target)
		}
	}
	if err := Apply(Target{Version: 2, Root: root, Group: group}, swapsettings.Settings{LimitBytes: -1}); err == nil {
		t.Error("negative limit accepted")
	}
	root, dir := v2Tree(t)
	if err := Apply(Target{Version: 2, Root: root, Group: group}, swapsettings.Settings{LimitBytes: 1, Zswap: 3}); err == nil {
		t.Error("unknown zswap value accepted")
	}
	if got := read(t, filepath.Join(dir, "memory.swap.max")); got != "0" {
		t.Errorf("refused settings wrote memory.swap.max = %s", got)
	}
}

func TestRead(t *testing.T) {
	root, dir := v1Tree(t, "100")
	write(t, filepath.Join(dir, "memory.memsw.limit_in_bytes"), "150")
	write(t, filepath.Join(dir, "memory.usage_in_bytes"), "90")
	write(t, filepath.Join(dir, "memory.memsw.usage_in_bytes"), "120")
	if v, err := ReadUsage(1, root, group); err != nil || v != 30 {
		t.Errorf("v1 usage = %d, %v", v, err)
	}
	root2, dir2 := v2Tree(t)
	write(t, filepath.Join(dir2, "memory.swap.max"), "max")
	write(t, filepath.Join(dir2, "memory.swap.current"), "4096")
	if v, err := ReadLimit(2, root2, group); err != nil || v != -1 {
		t.Errorf("v2 limit = %d, %v", v, err)
	}
	if v, err := ReadUsage(2, root2, group); err != nil || v != 4096 {
		t.Errorf("v2 usage = %d, %v", v, err)
	}
	write(t, filepath.Join(dir2, "memory.swap.current"), "garbage")
	if _, err := ReadUsage(2, root2, group); err == nil || !strings.Contains(err.Error(), "not a number") {
		t.Errorf("garbage error = %v", err)
	}
	if _, err := ReadLimit(0, root, group); err == nil {
		t.Error("version 0 accepted")
	}
}
