package discovery

import (
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
