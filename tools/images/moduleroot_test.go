package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestModuleRoot: build compiles the driver's commands in the driver's
// module root, found from wherever the command runs in the repository,
// past the go.mod of a nested module such as this command's own.
func TestModuleRoot(t *testing.T) {
	repo := t.TempDir()
	writeGoMod := func(dir, module string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("// A comment.\nmodule "+module+"\n\ngo 1.26.0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeGoMod(repo, modulePath)
	writeGoMod(filepath.Join(repo, "tools"), modulePath+"/tools")
	nested := filepath.Join(repo, "tools", "images")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(repo, "cmd", "dra-swap-hook")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	writeGoMod(other, `"example.com/other"`)

	tests := []struct {
		name, dir, want string
	}{
		{"the root itself", repo, repo},
		{"a package directory below it", deep, repo},
		{"a nested module's directory", nested, repo},
		{"another module", other, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := moduleRoot(tc.dir)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("moduleRoot(%s) = %s, want an error", tc.dir, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("moduleRoot(%s) = %q, %v; want %q", tc.dir, got, err, tc.want)
			}
		})
	}
}
