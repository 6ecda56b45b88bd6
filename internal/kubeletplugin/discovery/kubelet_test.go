package discovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

const kubeletConfigHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func kubeletConfig(swapBehavior string) string {
	return kubeletConfigHeader + "failSwapOn: false\nmemorySwap:\n  swapBehavior: " + swapBehavior + "\n"
}

func TestReadSwapBehavior(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		// configPath is DefaultKubeletConfigPath when empty, unless
		// noConfigFile.
		configPath   string
		noConfigFile bool
		configDir    string
		want         string
		wantErr      string
	}{
		{
			name:  "NoSwap",
			files: map[string]string{DefaultKubeletConfigPath: kubeletConfig("NoSwap")},
			want:  v1alpha1.SwapBehaviorNoSwap,
		},
		{
			name:  "LimitedSwap",
			files: map[string]string{DefaultKubeletConfigPath: kubeletConfig("LimitedSwap")},
			want:  v1alpha1.SwapBehaviorLimitedSwap,
		},
		{
			name:  "WorkloadControlledSwap (KEP-5359)",
			files: map[string]string{DefaultKubeletConfigPath: kubeletConfig("WorkloadControlledSwap")},
			want:  v1alpha1.SwapBehaviorWorkloadControlledSwap,
		},
		{
			name: "WorkloadControlledSwap in a drop-in",
			files: map[string]string{
				DefaultKubeletConfigPath:                   kubeletConfig("NoSwap"),
				"/etc/kubernetes/kubelet.conf.d/50-a.conf": kubeletConfig("WorkloadControlledSwap"),
			},
			configDir: "/etc/kubernetes/kubelet.conf.d",
			want:      v1alpha1.SwapBehaviorWorkloadControlledSwap,
		},
		{
			name:    "a behavior's name in the wrong case",
			files:   map[string]string{DefaultKubeletConfigPath: kubeletConfig("workloadControlledSwap")},
			want:    v1alpha1.SwapBehaviorUnknown,
			wantErr: `/var/lib/kubelet/config.yaml is none of NoSwap, LimitedSwap and WorkloadControlledSwap`,
		},
		{
			name:  "field absent",
			files: map[string]string{DefaultKubeletConfigPath: kubeletConfigHeader + "failSwapOn: false\ncgroupDriver: systemd\n"},
			want:  v1alpha1.SwapBehaviorNoSwap,
		},
		{
			name:  "empty value",
			files: map[string]string{DefaultKubeletConfigPath: kubeletConfig(`""`)},
			want:  v1alpha1.SwapBehaviorNoSwap,
		},
		{
			name:  "empty file",
			files: map[string]string{DefaultKubeletConfigPath: ""},
			want:  v1alpha1.SwapBehaviorNoSwap,
		},
		{
			name:       "other config path",
			files:      map[string]string{"/etc/kubernetes/kubelet.yaml": kubeletConfig("LimitedSwap")},
			configPath: "/etc/kubernetes/kubelet.yaml",
			want:       v1alpha1.SwapBehaviorLimitedSwap,
		},
		{
			name:    "missing file",
			want:    v1alpha1.SwapBehaviorUnknown,
			wantErr: "/var/lib/kubelet/config.yaml: no such file",
		},
		{
			name:    "broken YAML",
			files:   map[string]string{DefaultKubeletConfigPath: kubeletConfigHeader + "memorySwap: [\n  swapBehavior: NoSwap\n"},
			want:    v1alpha1.SwapBehaviorUnknown,
			wantErr: "parse kubelet configuration",
		},
		{
			name:    "wrong type",
			files:   map[string]string{DefaultKubeletConfigPath: kubeletConfigHeader + "memorySwap: LimitedSwap\n"},
			want:    v1alpha1.SwapBehaviorUnknown,
			wantErr: "/var/lib/kubelet/config.yaml",
		},
		{
			name:    "unknown value",
			files:   map[string]string{DefaultKubeletConfigPath: kubeletConfig("UnlimitedSwap")},
			want:    v1alpha1.SwapBehaviorUnknown,
			wantErr: `"UnlimitedSwap" in /`,
		},
		{
			name: "drop-ins apply in lexical order",
			files: map[string]string{
				DefaultKubeletConfigPath:                    kubeletConfig("NoSwap"),
				"/etc/kubernetes/kubelet.conf.d/20-b.conf":  kubeletConfig("LimitedSwap"),
				"/etc/kubernetes/kubelet.conf.d/10-a.conf":  kubeletConfig("NoSwap"),
				"/etc/kubernetes/kubelet.conf.d/99-z.yaml":  kubeletConfig("NoSwap"), // not .conf: ignored
				"/etc/kubernetes/kubelet.conf.d/30-c.conf":  kubeletConfigHeader + "maxPods: 50\n",
				"/etc/kubernetes/kubelet.conf.d/README.txt": "not YAML: [",
			},
			configDir: "/etc/kubernetes/kubelet.conf.d",
			want:      v1alpha1.SwapBehaviorLimitedSwap,
		},
		{
			name: "later drop-in wins over earlier one",
			files: map[string]string{
				DefaultKubeletConfigPath:                   kubeletConfig("LimitedSwap"),
				"/etc/kubernetes/kubelet.conf.d/10-a.conf": kubeletConfig("LimitedSwap"),
				"/etc/kubernetes/kubelet.conf.d/20-b.conf": kubeletConfig("NoSwap"),
			},
			configDir: "/etc/kubernetes/kubelet.conf.d",
			want:      v1alpha1.SwapBehaviorNoSwap,
		},
		{
			name: "drop-in without the field keeps the main file's value",
			files: map[string]string{
				DefaultKubeletConfigPath:                   kubeletConfig("LimitedSwap"),
				"/etc/kubernetes/kubelet.conf.d/10-a.conf": kubeletConfigHeader + "maxPods: 50\n",
			},
			configDir: "/etc/kubernetes/kubelet.conf.d",
			want:      v1alpha1.SwapBehaviorLimitedSwap,
		},
		{
			name: "broken drop-in",
			files: map[string]string{
				DefaultKubeletConfigPath:                   kubeletConfig("LimitedSwap"),
				"/etc/kubernetes/kubelet.conf.d/10-a.conf": "memorySwap: {",
			},
			configDir: "/etc/kubernetes/kubelet.conf.d",
			want:      v1alpha1.SwapBehaviorUnknown,
			wantErr:   "/etc/kubernetes/kubelet.conf.d/10-a.conf",
		},
		{
			name: "unknown value in a drop-in",
			files: map[string]string{
				DefaultKubeletConfigPath:                   kubeletConfig("LimitedSwap"),
				"/etc/kubernetes/kubelet.conf.d/10-a.conf": kubeletConfig("limitedswap"),
			},
			configDir: "/etc/kubernetes/kubelet.conf.d",
			want:      v1alpha1.SwapBehaviorUnknown,
			wantErr:   `"limitedswap" in /`,
		},
		{
			name: "no config file: the drop-ins alone",
			files: map[string]string{
				DefaultKubeletConfigPath: kubeletConfig("UnlimitedSwap"), // not read
				"/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf": kubeletConfigHeader + "maxPods: 110\n",
				"/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/50-swap.conf":         kubeletConfig("LimitedSwap"),
			},
			noConfigFile: true,
			configDir:    "/var/lib/rancher/k3s/agent/etc/kubelet.conf.d",
			want:         v1alpha1.SwapBehaviorLimitedSwap,
		},
		{
			name:         "no config file: drop-ins that do not set it",
			files:        map[string]string{"/etc/kubernetes/kubelet/config.json.d/00-nodeadm.conf": kubeletConfigHeader + "maxPods: 110\n"},
			noConfigFile: true,
			configDir:    "/etc/kubernetes/kubelet/config.json.d",
			want:         v1alpha1.SwapBehaviorNoSwap,
		},
		{
			name:         "neither a config file nor a drop-in directory",
			files:        map[string]string{DefaultKubeletConfigPath: kubeletConfig("NoSwap")},
			noConfigFile: true,
			want:         v1alpha1.SwapBehaviorUnknown,
			wantErr:      "no kubelet configuration file or drop-in directory",
		},
		{
			name:      "missing drop-in directory",
			files:     map[string]string{DefaultKubeletConfigPath: kubeletConfig("LimitedSwap")},
			configDir: "/etc/kubernetes/kubelet.conf.d",
			want:      v1alpha1.SwapBehaviorUnknown,
			wantErr:   "/etc/kubernetes/kubelet.conf.d",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostTree(t)
			for p, content := range tc.files {
				h.write(p, content)
			}
			configPath := tc.configPath
			if configPath == "" && !tc.noConfigFile {
				configPath = DefaultKubeletConfigPath
			}
			got, err := ReadSwapBehavior(h.root, configPath, tc.configDir)
			if got != tc.want {
				t.Errorf("ReadSwapBehavior() = %q, want %q", got, tc.want)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("ReadSwapBehavior() error = %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("ReadSwapBehavior() error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestReadSwapBehaviorReplacedOnTheHost: a configuration file or drop-in
// directory renamed over on the host after the plugin's container
// bind-mounted it stays visible in the container as the old, deleted one
// (no link left). ReadSwapBehavior says so (ErrKubeletConfigReplaced)
// instead of reporting a stale behavior. /proc/self/fd/N of an open,
// deleted file stands in for the mount.
func TestReadSwapBehaviorReplacedOnTheHost(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte(kubeletConfig("NoSwap")), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dropIns := filepath.Join(dir, "kubelet.conf.d")
	if err := os.Mkdir(dropIns, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dropIns)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fileFD, dirFD := fmt.Sprintf("/proc/self/fd/%d", f.Fd()), fmt.Sprintf("/proc/self/fd/%d", d.Fd())

	// Still linked: read as usual.
	if got, err := ReadSwapBehavior("/", fileFD, dirFD); got != v1alpha1.SwapBehaviorNoSwap || err != nil {
		t.Fatalf("before the replacement: %q, %v; want NoSwap", got, err)
	}
	if err := os.Remove(dropIns); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadSwapBehavior("/", fileFD, dirFD); got != v1alpha1.SwapBehaviorUnknown || !errors.Is(err, ErrKubeletConfigReplaced) {
		t.Errorf("drop-in directory replaced: %q, %v; want Unknown and ErrKubeletConfigReplaced", got, err)
	}
	// A new file renamed over the old one, as sed -i does.
	if err := os.WriteFile(file+".new", []byte(kubeletConfig("LimitedSwap")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSwapBehavior("/", fileFD, "")
	if got != v1alpha1.SwapBehaviorUnknown || !errors.Is(err, ErrKubeletConfigReplaced) || !strings.Contains(err.Error(), fileFD) {
		t.Errorf("file replaced: %q, %v; want Unknown and ErrKubeletConfigReplaced naming %s", got, err, fileFD)
	}
	// The path itself reads the new file.
	if got, err := ReadSwapBehavior("/", file, ""); got != v1alpha1.SwapBehaviorLimitedSwap || err != nil {
		t.Errorf("the new file: %q, %v; want LimitedSwap", got, err)
	}
}
