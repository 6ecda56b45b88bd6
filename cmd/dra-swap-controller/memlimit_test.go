package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSoftMemoryLimit(t *testing.T) {
	tests := []struct {
		name       string
		files      map[string]string
		gomemlimit string
		want       int64
	}{
		{name: "cgroup v2", files: map[string]string{"memory.max": "536870912\n"}, want: 536870912 * 2 / 5},
		{name: "cgroup v2 without a limit", files: map[string]string{"memory.max": "max\n"}},
		{name: "cgroup v1", files: map[string]string{"memory/memory.limit_in_bytes": "536870912\n"}, want: 536870912 * 2 / 5},
		{name: "cgroup v1 without a limit", files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}},
		{name: "no cgroup files"},
		{name: "unreadable value", files: map[string]string{"memory.max": "lots\n"}},
		{name: "GOMEMLIMIT wins", files: map[string]string{"memory.max": "536870912\n"}, gomemlimit: "300MiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			getenv := func(k string) string {
				if k == "GOMEMLIMIT" {
					return tc.gomemlimit
				}
				return ""
			}
			if got := softMemoryLimit(root, getenv); got != tc.want {
				t.Errorf("soft limit %d, want %d", got, tc.want)
			}
		})
	}
}
