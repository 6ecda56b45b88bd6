package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name     string
		existing string // "" for none
		perm     os.FileMode
	}{
		{name: "new file", perm: 0o600},
		{name: "replaces a file", existing: "old", perm: 0o755},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if tc.existing != "" {
				if err := os.WriteFile(path, []byte(tc.existing), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := Write(path, strings.NewReader("new"), tc.perm, "thing"); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != "new" {
				t.Fatalf("content %q, %v; want %q", got, err, "new")
			}
			info, err := os.Stat(path)
			if err != nil || info.Mode().Perm() != tc.perm {
				t.Errorf("mode %v, %v; want %v", info.Mode().Perm(), err, tc.perm)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("directory holds %v, want only the file", entries)
			}
		})
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestWriteFailureLeavesTargetAlone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	isDir := filepath.Join(dir, "d")
	if err := os.Mkdir(isDir, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		r          interface{ Read([]byte) (int, error) }
		want       string
	}{
		{name: "read fails", path: path, r: failingReader{}, want: "write thing to "},
		{name: "target is a directory", path: isDir, r: strings.NewReader("x"), want: "replace thing " + isDir},
		{name: "no directory", path: filepath.Join(dir, "missing", "f"), r: strings.NewReader("x"), want: "create temporary thing in " + filepath.Join(dir, "missing")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(tc.path, tc.r, 0o600, "thing")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Write error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("target content %q after failures, want %q", got, "old")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		max           int64
		wantErr       string
	}{
		{name: "within", content: "abc", max: 4},
		{name: "exactly max", content: "abcd", max: 4},
		{name: "empty", content: "", max: 4},
		{name: "larger", content: "abcde", max: 4, wantErr: "larger than 4 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadFile(path, tc.max)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadFile = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.content {
				t.Errorf("ReadFile = %q, %v; want %q", got, err, tc.content)
			}
		})
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 4); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a missing file: %v, want fs.ErrNotExist", err)
	}
}
