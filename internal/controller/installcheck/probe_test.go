package installcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path relative to root: content) under a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func TestReadSelf(t *testing.T) {
	const pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-abc.scope"
	claimEnv := map[string]string{"DRA_SWAP_LIMIT_BYTES": "1048576"}
	for _, tc := range []struct {
		name  string
		files map[string]string
		env   map[string]string
		want  Report
		// wantError is a part of Report.Error ("" for none).
		wantError string
	}{{
		name: "v2 in its own cgroup namespace",
		files: map[string]string{
			"proc/self/cgroup":                  "0::/\n",
			"sys/fs/cgroup/cgroup.controllers":  "cpu memory",
			"sys/fs/cgroup/memory.swap.max":     "1048576\n",
			"sys/fs/cgroup/memory.max":          "67108864\n",
			"sys/fs/cgroup" + pod + "/memory.x": "a cgroup of the same path elsewhere is not read",
		},
		env: claimEnv,
		want: Report{CgroupVersion: 2, Cgroup: "/sys/fs/cgroup", SwapLimitBytes: 1 << 20, EnvSet: true, Env: "1048576",
			Files: map[string]string{"memory.swap.max": "1048576", "memory.max": "67108864"}},
	}, {
		name: "v2 without a cgroup namespace: the host's tree, the process's cgroup in it",
		files: map[string]string{
			"proc/self/cgroup":                         "0::" + pod + "\n",
			"sys/fs/cgroup/cgroup.controllers":         "cpu memory",
			"sys/fs/cgroup/memory.swap.max":            "max",
			"sys/fs/cgroup" + pod + "/memory.swap.max": "0",
			"sys/fs/cgroup" + pod + "/memory.max":      "67108864",
		},
		want: Report{CgroupVersion: 2, Cgroup: "/sys/fs/cgroup" + pod, SwapLimitBytes: 0,
			Files: map[string]string{"memory.swap.max": "0", "memory.max": "67108864"}},
	}, {
		name: "v2 max is unlimited",
		files: map[string]string{
			"proc/self/cgroup":                 "0::/\n",
			"sys/fs/cgroup/cgroup.controllers": "memory",
			"sys/fs/cgroup/memory.swap.max":    "max",
			"sys/fs/cgroup/memory.max":         "67108864",
		},
		want: Report{CgroupVersion: 2, Cgroup: "/sys/fs/cgroup", SwapLimitBytes: -1,
			Files: map[string]string{"memory.swap.max": "max", "memory.max": "67108864"}},
	}, {
		name: "v1: the container's own memory cgroup is bind-mounted at the hierarchy's root",
		files: map[string]string{
			"proc/self/cgroup": "12:cpu,cpuacct:/kubepods/burstable/pod1/abc\n7:memory:/kubepods/burstable/pod1/abc\n0::/\n",
			"sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": "68157440",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":       "67108864",
		},
		env: claimEnv,
		want: Report{CgroupVersion: 1, Cgroup: "/sys/fs/cgroup/memory", SwapLimitBytes: 1 << 20, EnvSet: true, Env: "1048576",
			Files: map[string]string{"memory.memsw.limit_in_bytes": "68157440", "memory.limit_in_bytes": "67108864"}},
	}, {
		name: "v1 memsw unlimited",
		files: map[string]string{
			"proc/self/cgroup": "7:memory:/\n",
			"sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": "9223372036854771712",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":       "67108864",
		},
		want: Report{CgroupVersion: 1, Cgroup: "/sys/fs/cgroup/memory", SwapLimitBytes: -1,
			Files: map[string]string{"memory.memsw.limit_in_bytes": "9223372036854771712", "memory.limit_in_bytes": "67108864"}},
	}, {
		name: "v1 without swap accounting",
		files: map[string]string{
			"proc/self/cgroup":                           "7:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "67108864",
		},
		env:       map[string]string{"DRA_SWAP_LIMIT_BYTES": ""},
		want:      Report{EnvSet: true, Cgroup: "/sys/fs/cgroup/memory", Files: map[string]string{}},
		wantError: "cgroup v1: /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes: no such file or directory (no swap accounting: the kernel needs swapaccount=1)",
	}, {
		name: "v2 without a number",
		files: map[string]string{
			"proc/self/cgroup":                 "0::/\n",
			"sys/fs/cgroup/cgroup.controllers": "memory",
			"sys/fs/cgroup/memory.swap.max":    "lots",
			"sys/fs/cgroup/memory.max":         "67108864",
		},
		want:      Report{CgroupVersion: 2, Cgroup: "/sys/fs/cgroup", Files: map[string]string{"memory.swap.max": "lots", "memory.max": "67108864"}},
		wantError: `"lots" is not a number`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := ReadSelf(tree(t, tc.files), env(tc.env))
			if tc.wantError == "" && got.Error != "" || !strings.Contains(got.Error, tc.wantError) {
				t.Errorf("error %q, want one containing %q", got.Error, tc.wantError)
			}
			got.Error = ""
			if string(got.Encode()) != string(tc.want.Encode()) {
				t.Errorf("report\n%s, want\n%s", got.Encode(), tc.want.Encode())
			}
			back, err := ParseReport("I1127 08:00:00 starting\n" + string(got.Encode()) + "\n")
			if err != nil || string(back.Encode()) != string(got.Encode()) {
				t.Errorf("the report's log tail parsed as %s, %v; want %s", back.Encode(), err, got.Encode())
			}
		})
	}
	if _, err := ParseReport("no report here"); err == nil || !strings.Contains(err.Error(), "is no report") {
		t.Errorf("parsing a message without a report: %v, want an error", err)
	}
}
