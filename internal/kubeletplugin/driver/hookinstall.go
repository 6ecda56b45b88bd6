package driver

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/dra-driver-swap/dra-driver-swap/internal/atomicfile"
)

// hookMode is the installed hook's mode: runc runs it as root.
const hookMode fs.FileMode = 0o755

// installHook installs the hook binary src at dst, the host path the CDI
// specs name, and reports whether it wrote anything. The old and the new
// plugin pod of a rolling update both install at start-up, and runc may
// start the hook at any moment: so a dst that already has src's content
// (by SHA-256) and mode is left alone, and a new one is written to a
// temporary file in dst's directory, made executable, synced and renamed
// over dst, and the directory synced. A hook run sees the old binary or
// the new one, never a partial file, also across a crash.
func installHook(src, dst string) (installed bool, err error) {
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("open hook binary to install: %w", err)
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return false, fmt.Errorf("stat hook binary to install: %w", err)
	}
	if !info.Mode().IsRegular() {
		return false, fmt.Errorf("hook binary to install %s is not a regular file", src)
	}
	same, err := sameContent(in, info.Size(), dst)
	if err != nil {
		return false, err
	}
	if same {
		return false, nil
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return false, fmt.Errorf("rewind hook binary %s: %w", src, err)
	}

	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create hook directory %s: %w", dir, err)
	}
	if err := atomicfile.Write(dst, in, hookMode, "hook"); err != nil {
		return false, fmt.Errorf("install hook binary %s: %w", src, err)
	}
	return true, nil
}

// sameContent reports whether dst is a regular file with hookMode and the
// content of src (size bytes, read from its current offset).
func sameContent(src io.Reader, size int64, dst string) (bool, error) {
	info, err := os.Stat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat installed hook: %w", err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm() != hookMode || info.Size() != size {
		return false, nil
	}
	want, err := digest(src)
	if err != nil {
		return false, fmt.Errorf("hash hook binary to install: %w", err)
	}
	f, err := os.Open(dst)
	if err != nil {
		return false, fmt.Errorf("open installed hook: %w", err)
	}
	defer f.Close()
	got, err := digest(f)
	if err != nil {
		return false, fmt.Errorf("hash installed hook %s: %w", dst, err)
	}
	return bytes.Equal(got, want), nil
}

func digest(r io.Reader) ([]byte, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
