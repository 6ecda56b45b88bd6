package discovery

import (
	"os"
	"path/filepath"
	"strings"
)

// hostPath returns the path under root of the absolute host path p. An
// empty root means the real root, "/".
func hostPath(root, p string) string {
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, p)
}

// exists reports whether path exists (following symlinks).
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// isDir reports whether path is a directory (following symlinks).
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// readTrimmed returns the content of a small file without surrounding
// whitespace.
func readTrimmed(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}
