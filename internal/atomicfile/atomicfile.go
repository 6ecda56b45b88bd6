// Package atomicfile replaces files so that a reader sees the old content
// or the new one, never a mix: the new content goes to a temporary file in
// the target's directory, which is given its mode and renamed over the
// target. Write also syncs the file and the directory, so that this holds
// across a power loss too; Replace does not, for files that need only
// outlive the process that writes them (a crashed process leaves the page
// cache, and so the renamed file, intact). ReadFile reads such a file back
// whole, within a bound.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with the content r yields, with mode perm, durably.
// what names the file in errors ("checkpoint", "hook"). The directory must
// exist. On failure path is unchanged and no temporary file is left.
func Write(path string, r io.Reader, perm fs.FileMode, what string) error {
	return write(path, r, perm, what, true)
}

// Replace is Write without the syncs: atomic for readers and across a
// crash of the writing process, not across a power loss.
func Replace(path string, r io.Reader, perm fs.FileMode, what string) error {
	return write(path, r, perm, what, false)
}

func write(path string, r io.Reader, perm fs.FileMode, what string, durable bool) error {
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
	if durable {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return fmt.Errorf("sync %s: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s %s: %w", what, path, err)
	}
	if !durable {
		return nil
	}
	return SyncDir(dir)
}

// ReadFile reads the file at path whole; one larger than max bytes is an
// error, and no more than max+1 bytes are read.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return data, nil
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
