package hookinstall

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

func writeSource(t *testing.T, dir, name string, content []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Ino
}

// script is a hook stand-in that the test can run.
func script(word string) []byte {
	return []byte("#!/bin/sh\necho " + word + "\n")
}

func TestInstallHook(t *testing.T) {
	src := t.TempDir()
	dst := filepath.Join(t.TempDir(), "opt", "dra-swap", "bin", "dra-swap-hook")
	v1 := writeSource(t, src, "v1", script("v1"))

	installed, err := Install(v1, dst)
	if err != nil || !installed {
		t.Fatalf("first install = %v, %v", installed, err)
	}
	// The result is executable, and runs.
	info, err := os.Stat(dst)
	if err != nil || info.Mode().Perm() != 0o755 {
		t.Fatalf("installed hook: %v, %v", info, err)
	}
	if out, err := exec.Command(dst).Output(); err != nil || string(out) != "v1\n" {
		t.Fatalf("run installed hook: %q, %v", out, err)
	}

	// Identical content is not rewritten: same inode, nothing written.
	before := inode(t, dst)
	installed, err = Install(v1, dst)
	if err != nil || installed {
		t.Fatalf("install of identical content = %v, %v; want no write", installed, err)
	}
	if after := inode(t, dst); after != before {
		t.Errorf("identical content rewritten: inode %d -> %d", before, after)
	}

	// Identical content with the wrong mode is installed again.
	if err := os.Chmod(dst, 0o644); err != nil {
		t.Fatal(err)
	}
	if installed, err := Install(v1, dst); err != nil || !installed {
		t.Fatalf("install over a non-executable copy = %v, %v", installed, err)
	}
	if info, _ := os.Stat(dst); info.Mode().Perm() != 0o755 {
		t.Errorf("mode = %v", info.Mode())
	}

	// Changed content (same size) replaces the file, as a new inode.
	before = inode(t, dst)
	v2 := writeSource(t, src, "v2", script("v2"))
	if installed, err := Install(v2, dst); err != nil || !installed {
		t.Fatalf("install of new content = %v, %v", installed, err)
	}
	if after := inode(t, dst); after == before {
		t.Error("new content written in place, not renamed over the old file")
	}
	if out, err := exec.Command(dst).Output(); err != nil || string(out) != "v2\n" {
		t.Errorf("run replaced hook: %q, %v", out, err)
	}
	entries, err := os.ReadDir(filepath.Dir(dst))
	if err != nil || len(entries) != 1 {
		t.Errorf("hook directory holds %v, %v; want only the hook", entries, err)
	}
}

func TestInstallHookErrors(t *testing.T) {
	dir := t.TempDir()
	src := writeSource(t, dir, "hook", script("x"))
	notDir := writeSource(t, dir, "file", nil)
	isDir := filepath.Join(dir, "dir")
	if err := os.Mkdir(isDir, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, src, dst, want string
	}{
		{name: "missing source", src: filepath.Join(dir, "missing"), dst: filepath.Join(dir, "out", "hook"), want: filepath.Join(dir, "missing")},
		{name: "source is a directory", src: dir, dst: filepath.Join(dir, "out", "hook"), want: "is not a regular file"},
		{name: "destination directory is a file", src: src, dst: filepath.Join(notDir, "hook"), want: notDir},
		{name: "destination is a directory", src: src, dst: isDir, want: "replace hook " + isDir},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Install(tc.src, tc.dst); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Install error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("files left behind: %v", entries)
	}
}

// TestInstallHookAtomic replaces the hook 200 times with alternating
// contents while a reader keeps opening and reading it, as runc does when
// it starts the hook: the reader only ever sees one of the two complete
// contents.
func TestInstallHookAtomic(t *testing.T) {
	src := t.TempDir()
	dst := filepath.Join(t.TempDir(), "dra-swap-hook")
	// Large enough that a write in place would be seen half done.
	a, b := bytes.Repeat([]byte("a"), 1<<20), bytes.Repeat([]byte("b"), 1<<20-1)
	sources := []string{writeSource(t, src, "a", a), writeSource(t, src, "b", b)}
	if _, err := Install(sources[0], dst); err != nil {
		t.Fatal(err)
	}

	var done atomic.Bool
	var reads, torn atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for !done.Load() {
			data, err := os.ReadFile(dst)
			if err != nil {
				t.Errorf("read %s: %v", dst, err)
				return
			}
			reads.Add(1)
			if !bytes.Equal(data, a) && !bytes.Equal(data, b) {
				torn.Add(1)
			}
		}
	})
	for i := range 200 {
		if installed, err := Install(sources[(i+1)%2], dst); err != nil || !installed {
			t.Errorf("install #%d = %v, %v", i+1, installed, err)
			break
		}
	}
	done.Store(true)
	wg.Wait()
	if torn.Load() > 0 {
		t.Errorf("%d of %d reads saw neither complete content", torn.Load(), reads.Load())
	}
	if reads.Load() == 0 {
		t.Error("the reader never read the hook")
	}
}
