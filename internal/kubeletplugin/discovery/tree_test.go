package discovery

import (
	"os"
	"path/filepath"
	"testing"
)

// hostTree is a fake host root filesystem in a temporary directory.
type hostTree struct {
	t    *testing.T
	root string
}

func newHostTree(t *testing.T) hostTree {
	t.Helper()
	return hostTree{t: t, root: t.TempDir()}
}

// path returns the tree's path for the host path p.
func (h hostTree) path(p string) string {
	return filepath.Join(h.root, p)
}

// write creates the file at host path p, and its parents, with content.
func (h hostTree) write(p, content string) {
	h.t.Helper()
	full := h.path(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// mkdir creates the directory at host path p and its parents.
func (h hostTree) mkdir(p string) {
	h.t.Helper()
	if err := os.MkdirAll(h.path(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
}

// symlink creates a symlink at host path p pointing to target, which is
// written verbatim (relative targets are relative to p's directory).
func (h hostTree) symlink(p, target string) {
	h.t.Helper()
	full := h.path(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		h.t.Fatal(err)
	}
}

// remove deletes the file at host path p.
func (h hostTree) remove(p string) {
	h.t.Helper()
	if err := os.RemoveAll(h.path(p)); err != nil {
		h.t.Fatal(err)
	}
}

// procSwapsHeader is the header line of /proc/swaps as the kernel writes it.
const procSwapsHeader = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
