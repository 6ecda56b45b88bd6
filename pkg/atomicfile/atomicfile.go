// Package atomicfile replaces files so that a reader sees the old content
// or the new one, never a mix, also across a crash or power loss: the new
// content goes to a temporary file in the target's directory, which is
// given its mode, synced and renamed over the target, and then the
// directory is synced so that the rename itself is durable.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with the content r yields, with mode perm. what
// names the file in errors ("checkpoint", "hook"). The directory must
// exist. On failure path is unchanged and no temporary file is left.
func Write(path string, r io.Reader, perm fs.FileMode, what string) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary %s in %s: %w", what, dir, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s to %s: %w", what, tmp.Name(), err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("set mode %v on %s: %w", perm, tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s %s: %w", what, path, err)
	}
	return SyncDir(dir)
}

// SyncDir syncs a directory, making a rename or removal in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
