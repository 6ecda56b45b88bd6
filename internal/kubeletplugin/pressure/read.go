package pressure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Host files that Source reads, relative to Source.Root.
const (
	nodePressurePath = "/proc/pressure/memory"
	meminfoPath      = "/proc/meminfo"
	cgroupMount      = "/sys/fs/cgroup"
	cgroupPressure   = "memory.pressure"
)

// Source says where Read finds the host's memory pressure and swap usage.
type Source struct {
	// Root is the host's root filesystem ("/" in production, a temp dir
	// in tests). Empty means "/".
	Root string
	// NodePressureFile is the node's memory PSI file as this process sees
	// it; empty means /proc/pressure/memory under Root. The kernel keeps
	// one system-wide /proc/pressure, the same in every procfs mount
	// whatever its PID namespace, so a pod can read it from its own /proc
	// (and needs no host mount of a directory that does not exist where
	// PSI is off).
	NodePressureFile string
	// CgroupV2KubepodsPath is the kubelet's pod cgroup relative to
	// /sys/fs/cgroup ("kubepods.slice" with the systemd cgroup driver,
	// "kubepods" with cgroupfs). Its memory.pressure is read besides the
	// node's. Empty skips it. A leading "/" is ignored; the path must not
	// leave /sys/fs/cgroup.
	CgroupV2KubepodsPath string
}

// Sample is one reading of the host's memory pressure and swap usage.
type Sample struct {
	// Memory is the node's /proc/pressure/memory, nil when the kernel
	// does not provide it (see PSIProblem).
	Memory *PSI
	// Kubepods is the memory.pressure of the kubepods cgroup, nil when no
	// path is configured or the file is missing or not supported.
	Kubepods *PSI
	// SwapTotal is the node's swap size in bytes (0 without swap).
	SwapTotal int64
	// SwapUsed is the swap in use in bytes, at most SwapTotal.
	SwapUsed int64
	// PSIAvailable reports whether at least one of Memory and Kubepods
	// was read. Without PSI only swap usage can be judged.
	PSIAvailable bool
	// PSIProblem says, in one sentence, why a PSI source that Read looked
	// for is missing ("" when every source was read). It is set whenever
	// Memory is nil, and when Kubepods is nil although a path is
	// configured.
	PSIProblem string
}

// readFileFunc reads a whole file, like os.ReadFile. Tests substitute it
// to produce errors a temp dir cannot.
type readFileFunc func(path string) ([]byte, error)

// Validate reports whether CgroupV2KubepodsPath stays below
// /sys/fs/cgroup.
func (s Source) Validate() error {
	_, err := s.kubepodsPressurePath()
	return err
}

// Read reads the node's memory PSI, the kubepods cgroup's memory PSI and
// the swap usage from /proc/meminfo. A PSI file that does not exist or
// that the kernel refuses to read with ENOTSUP/EOPNOTSUPP (PSI compiled
// out, or disabled at boot: psi=0, or CONFIG_PSI_DEFAULT_DISABLED=y
// without psi=1) is left nil and explained in PSIProblem. Any other read
// error, malformed content, a missing /proc/meminfo or an invalid
// CgroupV2KubepodsPath is an error.
func (s Source) Read(ctx context.Context) (Sample, error) {
	return s.read(ctx, os.ReadFile)
}

// read is Read with a substitutable file reader.
func (s Source) read(ctx context.Context, readFile readFileFunc) (Sample, error) {
	kubepodsPath, err := s.kubepodsPressurePath()
	if err != nil {
		return Sample{}, err
	}
	var (
		sample   Sample
		problems []string
	)
	if err := ctx.Err(); err != nil {
		return Sample{}, err
	}
	nodePath := s.NodePressureFile
	if nodePath == "" {
		nodePath = hostPath(s.Root, nodePressurePath)
	}
	psi, problem, err := readPSI(readFile, nodePath, "kernel built without CONFIG_PSI, or PSI off at boot: psi=0, or CONFIG_PSI_DEFAULT_DISABLED=y without psi=1")
	if err != nil {
		return Sample{}, fmt.Errorf("read node memory pressure: %w", err)
	}
	sample.Memory = psi
	if problem != "" {
		problems = append(problems, problem)
	}
	if kubepodsPath != "" {
		if err := ctx.Err(); err != nil {
			return Sample{}, err
		}
		psi, problem, err := readPSI(readFile, kubepodsPath, "no such cgroup, or PSI disabled")
		if err != nil {
			return Sample{}, fmt.Errorf("read kubepods memory pressure: %w", err)
		}
		sample.Kubepods = psi
		if problem != "" {
			problems = append(problems, problem)
		}
	}
	sample.PSIAvailable = sample.Memory != nil || sample.Kubepods != nil
	sample.PSIProblem = strings.Join(problems, "; ")

	if err := ctx.Err(); err != nil {
		return Sample{}, err
	}
	path := hostPath(s.Root, meminfoPath)
	data, err := readFile(path)
	if err != nil {
		return Sample{}, fmt.Errorf("read swap usage: %w", err)
	}
	if sample.SwapTotal, sample.SwapUsed, err = ParseMeminfo(bytes.NewReader(data)); err != nil {
		return Sample{}, fmt.Errorf("%s: %w", path, err)
	}
	return sample, nil
}

// kubepodsPressurePath returns the host path of the kubepods cgroup's
// memory.pressure, or "" when none is configured.
func (s Source) kubepodsPressurePath() (string, error) {
	if s.CgroupV2KubepodsPath == "" {
		return "", nil
	}
	rel := strings.TrimLeft(s.CgroupV2KubepodsPath, "/")
	if rel == "" || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("kubepods cgroup path %q is not a cgroup below %s", s.CgroupV2KubepodsPath, cgroupMount)
	}
	return hostPath(s.Root, filepath.Join(cgroupMount, rel, cgroupPressure)), nil
}

// readPSI reads and parses a PSI file. A file that does not exist or is
// not supported yields nil and a problem sentence instead of an error;
// missingWhy explains a file that does not exist.
func readPSI(readFile readFileFunc, path, missingWhy string) (*PSI, string, error) {
	data, err := readFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Sprintf("%s does not exist (%s)", path, missingWhy), nil
	case errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP):
		return nil, fmt.Sprintf("%s is not supported (PSI disabled at boot: psi=0, or CONFIG_PSI_DEFAULT_DISABLED=y without psi=1)", path), nil
	case err != nil:
		return nil, "", err
	}
	psi, err := ParsePSI(bytes.NewReader(data))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return &psi, "", nil
}

// hostPath returns the path under root of the absolute host path p. An
// empty root means the real root, "/".
func hostPath(root, p string) string {
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, p)
}
