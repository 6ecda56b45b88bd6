package kubeletplugin

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

// testHost writes a cgroup v1 host with one 2Gi swap partition under a
// new directory and returns it.
func testHost(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for path, content := range map[string]string{
		"proc/swaps":                                       "Filename\tType\tSize\tUsed\tPriority\n/dev/vdb\tpartition\t2097152\t0\t-2\n",
		"sys/class/block/vdb/queue/rotational":             "0\n",
		"proc/sys/kernel/osrelease":                        "6.1.0-25-amd64\n",
		"proc/sys/kernel/random/boot_id":                   "b\n",
		"sys/module/zswap/parameters/enabled":              "N\n",
		"sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": "9223372036854771712\n",
		"var/lib/kubelet/config.yaml": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
			"failSwapOn: false\nmemorySwap:\n  swapBehavior: LimitedSwap\n",
	} {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// tree lists the files and directories under dir.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	if err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		paths = append(paths, path)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return paths
}

// New builds every component and touches nothing: the hook is not
// installed, no directory, checkpoint or lock is created, and no request
// reaches the API server (no informer, no event recording) until Run;
// an invalid configuration is refused before the node is even read.
func TestNewTouchesNothing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	root, dir := testHost(t), t.TempDir()
	hook := filepath.Join(dir, "dra-swap-hook")
	if err := os.WriteFile(hook, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		DriverName: "dra.swap", NodeName: "node-a",
		Discovery:      discovery.Options{Root: root, KubeletConfigPath: "/var/lib/kubelet/config.yaml"},
		Policy:         swapdevice.Policy{OvercommitRatio: 1, DefaultRequestBytes: 1 << 30},
		RescanInterval: time.Second, VerifyInterval: time.Second,
		CDIDir:   filepath.Join(dir, "cdi"),
		HookPath: "/opt/dra-swap/bin/dra-swap-hook", InstallHookFrom: hook,
		HookStateDir:  filepath.Join(dir, "hook"),
		PluginDataDir: filepath.Join(dir, "plugins", "dra.swap"),
		RegistrarDir:  filepath.Join(dir, "plugins_registry"),
		NRISocket:     "/var/run/nri/nri.sock",
		Pressure:      pressure.DefaultConfig(), PressureInterval: time.Second,
		ClaimUsageMetrics: true,
	}
	before := append(tree(t, root), tree(t, dir)...)
	client := fake.NewClientset()

	invalid := cfg
	invalid.RescanInterval = 0
	if _, err := New(ctx, invalid, client); err == nil || !strings.Contains(err.Error(), "rescan interval") {
		t.Errorf("New with a zero rescan interval: %v", err)
	}
	p, err := New(ctx, cfg, client)
	if err != nil {
		t.Fatal(err)
	}
	defer p.broadcaster.Shutdown()
	defer p.statuses.Stop()
	if after := append(tree(t, root), tree(t, dir)...); !slices.Equal(after, before) {
		t.Errorf("New changed the files: before %v, after %v", before, after)
	}
	if actions := client.Actions(); len(actions) != 0 {
		t.Errorf("New made API requests: %v", actions)
	}
	if p.nri == nil || p.pressure == nil || p.usage == nil || p.publisher.Taints == nil {
		t.Errorf("components missing: nri %v, pressure %v, usage %v", p.nri != nil, p.pressure != nil, p.usage != nil)
	}
}

// Run's start-up leaves the hook state directory 0700 whatever mode it
// found it with (the kubelet creates a hostPath directory 0755), and
// refuses one that is not a directory.
func TestStartUpMakesHookStateDirPrivate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string)
		wantErr string
	}{
		{name: "missing", prepare: func(*testing.T, string) {}},
		{name: "made by the kubelet", prepare: func(t *testing.T, dir string) { mkdir(t, dir, 0o755) }},
		{name: "group-writable and sticky", prepare: func(t *testing.T, dir string) { mkdir(t, dir, 0o770|os.ModeSticky) }},
		{name: "already private", prepare: func(t *testing.T, dir string) { mkdir(t, dir, 0o700) }},
		{name: "a file", prepare: func(t *testing.T, dir string) {
			mkdir(t, filepath.Dir(dir), 0o755)
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "not a directory"},
		{name: "a symlink", prepare: func(t *testing.T, dir string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			mkdir(t, target, 0o777)
			mkdir(t, filepath.Dir(dir), 0o755)
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			dir := t.TempDir()
			cfg := Config{
				DriverName: "dra.swap", NodeName: "node-a",
				Discovery:      discovery.Options{Root: testHost(t), KubeletConfigPath: "/var/lib/kubelet/config.yaml"},
				Policy:         swapdevice.Policy{OvercommitRatio: 1, DefaultRequestBytes: 1 << 30},
				RescanInterval: time.Second, VerifyInterval: time.Second,
				CDIDir: filepath.Join(dir, "cdi"), HookPath: "/opt/dra-swap/bin/dra-swap-hook",
				HookStateDir:  filepath.Join(dir, "run", "hook"),
				PluginDataDir: filepath.Join(dir, "plugins", "dra.swap"),
				RegistrarDir:  filepath.Join(dir, "plugins_registry"),
			}
			tc.prepare(t, cfg.HookStateDir)
			p, err := New(ctx, cfg, fake.NewClientset())
			if err != nil {
				t.Fatal(err)
			}
			defer p.broadcaster.Shutdown()
			defer p.statuses.Stop()
			err = p.startUp(ctx)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("start-up: %v, want an error saying %q", err, tc.wantErr)
				}
				logger.Info("Refused", "err", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(cfg.HookStateDir)
			if err != nil {
				t.Fatal(err)
			}
			if mode := fi.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetuid | os.ModeSetgid | os.ModeDir); mode != os.ModeDir|0o700 {
				t.Errorf("hook state directory mode %v, want %v", mode, os.ModeDir|0o700)
			}
		})
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Chmod, not the umask-filtered mode of mkdir(2).
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}
