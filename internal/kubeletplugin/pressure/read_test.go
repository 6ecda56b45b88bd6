package pressure

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const (
	nodePSIFile     = "some avg10=12.50 avg60=8.00 avg300=2.00 total=1000\nfull avg10=3.25 avg60=1.00 avg300=0.50 total=400\n"
	kubepodsPSIFile = "some avg10=40.00 avg60=20.00 avg300=5.00 total=2000\nfull avg10=11.00 avg60=4.00 avg300=1.00 total=900\n"
)

var (
	nodePSI = PSI{
		Some: PSILine{Avg10: 12.5, Avg60: 8, Avg300: 2, Total: 1000},
		Full: PSILine{Avg10: 3.25, Avg60: 1, Avg300: 0.5, Total: 400},
	}
	kubepodsPSI = PSI{
		Some: PSILine{Avg10: 40, Avg60: 20, Avg300: 5, Total: 2000},
		Full: PSILine{Avg10: 11, Avg60: 4, Avg300: 1, Total: 900},
	}
)

// writeHost creates files (host path → content) under a new temp root and
// returns the root.
func writeHost(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		path := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestSourceRead(t *testing.T) {
	const kubepodsFile = "/sys/fs/cgroup/kubepods.slice/memory.pressure"
	healthy := func() map[string]string {
		return map[string]string{
			nodePressurePath: nodePSIFile,
			kubepodsFile:     kubepodsPSIFile,
			meminfoPath:      meminfoSample,
		}
	}
	without := func(paths ...string) map[string]string {
		files := healthy()
		for _, p := range paths {
			delete(files, p)
		}
		return files
	}
	with := func(path, content string) map[string]string {
		files := healthy()
		files[path] = content
		return files
	}
	swapTotal, swapUsed := int64(8388604*1024), int64((8388604-6815740)*1024)

	tests := []struct {
		name         string
		files        map[string]string
		kubepods     string
		nodeFile     string // NodePressureFile under the temp root; "" leaves it unset
		want         Sample
		wantProblems []string // substrings of PSIProblem; none means empty
		wantErr      string   // substring of the error; "" means success
	}{
		{
			name:     "node and kubepods",
			files:    healthy(),
			kubepods: "kubepods.slice",
			want:     Sample{Memory: &nodePSI, Kubepods: &kubepodsPSI, SwapTotal: swapTotal, SwapUsed: swapUsed, PSIAvailable: true},
		},
		{
			name:     "kubepods path with leading slash",
			files:    healthy(),
			kubepods: "/kubepods.slice",
			want:     Sample{Memory: &nodePSI, Kubepods: &kubepodsPSI, SwapTotal: swapTotal, SwapUsed: swapUsed, PSIAvailable: true},
		},
		{
			name:  "kubepods not configured",
			files: healthy(),
			want:  Sample{Memory: &nodePSI, SwapTotal: swapTotal, SwapUsed: swapUsed, PSIAvailable: true},
		},
		{
			name:         "kubepods cgroup missing",
			files:        healthy(),
			kubepods:     "kubepods",
			want:         Sample{Memory: &nodePSI, SwapTotal: swapTotal, SwapUsed: swapUsed, PSIAvailable: true},
			wantProblems: []string{"/sys/fs/cgroup/kubepods/memory.pressure does not exist"},
		},
		{
			name:         "node PSI missing",
			files:        without(nodePressurePath, kubepodsFile),
			kubepods:     "kubepods.slice",
			want:         Sample{SwapTotal: swapTotal, SwapUsed: swapUsed},
			wantProblems: []string{"/proc/pressure/memory does not exist", "kubepods.slice/memory.pressure does not exist"},
		},
		{
			name:         "only kubepods PSI",
			files:        without(nodePressurePath),
			kubepods:     "kubepods.slice",
			want:         Sample{Kubepods: &kubepodsPSI, SwapTotal: swapTotal, SwapUsed: swapUsed, PSIAvailable: true},
			wantProblems: []string{"/proc/pressure/memory does not exist"},
		},
		{
			name:     "node PSI from the process's own /proc",
			files:    with("/own/proc/pressure/memory", nodePSIFile),
			nodeFile: "/own/proc/pressure/memory",
			want:     Sample{Memory: &nodePSI, SwapTotal: swapTotal, SwapUsed: swapUsed, PSIAvailable: true},
		},
		{
			// The host root's file is not read when NodePressureFile is set.
			name:         "no PSI in the process's own /proc",
			files:        healthy(),
			nodeFile:     "/own/proc/pressure/memory",
			want:         Sample{SwapTotal: swapTotal, SwapUsed: swapUsed},
			wantProblems: []string{"/own/proc/pressure/memory does not exist (kernel built without CONFIG_PSI, or PSI off at boot: psi=0, or CONFIG_PSI_DEFAULT_DISABLED=y without psi=1)"},
		},
		{
			name:  "no swap",
			files: with(meminfoPath, "SwapTotal: 0 kB\nSwapFree: 0 kB\n"),
			want:  Sample{Memory: &nodePSI, PSIAvailable: true},
		},
		{
			name:    "malformed node PSI",
			files:   with(nodePressurePath, "some avg10=x\n"),
			wantErr: "/proc/pressure/memory: line 1 ",
		},
		{
			name:     "malformed kubepods PSI",
			files:    with(kubepodsFile, "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
			kubepods: "kubepods.slice",
			wantErr:  `kubepods.slice/memory.pressure: missing "full" line`,
		},
		{
			name:    "meminfo missing",
			files:   without(meminfoPath),
			wantErr: "read swap usage: open ",
		},
		{
			name:    "malformed meminfo",
			files:   with(meminfoPath, "SwapTotal: 4 kB\n"),
			wantErr: `/proc/meminfo: missing "SwapFree:" line`,
		},
		{
			name:     "kubepods path leaves the cgroup mount",
			files:    healthy(),
			kubepods: "../../../etc",
			wantErr:  `kubepods cgroup path "../../../etc" is not a cgroup below /sys/fs/cgroup`,
		},
		{
			name:     "kubepods path is only slashes",
			files:    healthy(),
			kubepods: "/",
			wantErr:  "is not a cgroup below",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeHost(t, tt.files)
			src := Source{Root: root, CgroupV2KubepodsPath: tt.kubepods}
			if tt.nodeFile != "" {
				src.NodePressureFile = filepath.Join(root, tt.nodeFile)
			}
			got, err := src.Read(t.Context())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Read() = %+v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Read() error = %v", err)
			}
			checkSample(t, got, tt.want, tt.wantProblems)
		})
	}
}

// checkSample compares got with want, except for PSIProblem, which must
// contain each of problems (and be empty when there are none).
func checkSample(t *testing.T, got, want Sample, problems []string) {
	t.Helper()
	for _, p := range []struct {
		name      string
		got, want *PSI
	}{{"Memory", got.Memory, want.Memory}, {"Kubepods", got.Kubepods, want.Kubepods}} {
		if (p.got == nil) != (p.want == nil) || p.got != nil && *p.got != *p.want {
			t.Errorf("%s = %+v, want %+v", p.name, p.got, p.want)
		}
	}
	if got.SwapTotal != want.SwapTotal || got.SwapUsed != want.SwapUsed {
		t.Errorf("swap = total %d, used %d; want %d, %d", got.SwapTotal, got.SwapUsed, want.SwapTotal, want.SwapUsed)
	}
	if got.PSIAvailable != want.PSIAvailable {
		t.Errorf("PSIAvailable = %v, want %v", got.PSIAvailable, want.PSIAvailable)
	}
	if len(problems) == 0 && got.PSIProblem != "" {
		t.Errorf("PSIProblem = %q, want empty", got.PSIProblem)
	}
	for _, p := range problems {
		if !strings.Contains(got.PSIProblem, p) {
			t.Errorf("PSIProblem = %q, want it to contain %q", got.PSIProblem, p)
		}
	}
}

// TestSourceReadErrno covers errors that a temp dir cannot produce: the
// EOPNOTSUPP a kernel booted with PSI disabled returns on read, and other
// errors, which are not hidden.
func TestSourceReadErrno(t *testing.T) {
	const root = "/host"
	files := map[string]string{
		"/host/proc/meminfo":                           meminfoSample,
		"/host/sys/fs/cgroup/kubepods/memory.pressure": kubepodsPSIFile,
	}
	tests := []struct {
		name        string
		nodeErr     error
		want        Sample
		wantProblem string
		wantErr     error
	}{
		{
			name:        "EOPNOTSUPP",
			nodeErr:     syscall.EOPNOTSUPP,
			want:        Sample{Kubepods: &kubepodsPSI, PSIAvailable: true},
			wantProblem: "/host/proc/pressure/memory is not supported (PSI disabled at boot",
		},
		{
			name:        "ENOTSUP",
			nodeErr:     syscall.ENOTSUP,
			want:        Sample{Kubepods: &kubepodsPSI, PSIAvailable: true},
			wantProblem: "is not supported",
		},
		{name: "permission denied", nodeErr: syscall.EACCES, wantErr: fs.ErrPermission},
		{name: "I/O error", nodeErr: syscall.EIO, wantErr: syscall.EIO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			readFile := func(path string) ([]byte, error) {
				if path == "/host/proc/pressure/memory" {
					return nil, &fs.PathError{Op: "read", Path: path, Err: tt.nodeErr}
				}
				if content, ok := files[path]; ok {
					return []byte(content), nil
				}
				return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
			}
			got, err := Source{Root: root, CgroupV2KubepodsPath: "kubepods"}.read(t.Context(), readFile)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), "/host/proc/pressure/memory") {
					t.Fatalf("read() = %+v, %v; want an error naming the file that is %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("read() error = %v", err)
			}
			tt.want.SwapTotal, tt.want.SwapUsed = 8388604*1024, (8388604-6815740)*1024
			checkSample(t, got, tt.want, []string{tt.wantProblem})
		})
	}
}

func TestSourceReadCanceled(t *testing.T) {
	root := writeHost(t, map[string]string{nodePressurePath: nodePSIFile, meminfoPath: meminfoSample})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := (Source{Root: root}).Read(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read() error = %v, want %v", err, context.Canceled)
	}
}

func TestSourceValidate(t *testing.T) {
	tests := []struct {
		path    string
		wantErr bool
	}{
		{path: ""},
		{path: "kubepods"},
		{path: "kubepods.slice"},
		{path: "/kubepods.slice/kubepods-burstable.slice"},
		{path: "..", wantErr: true},
		{path: "kubepods/../../x", wantErr: true},
		{path: "/", wantErr: true},
	}
	for _, tt := range tests {
		err := Source{CgroupV2KubepodsPath: tt.path}.Validate()
		if (err != nil) != tt.wantErr {
			t.Errorf("Validate(%q) = %v, want error: %v", tt.path, err, tt.wantErr)
		}
	}
}

func TestSourceReadEmptyRoot(t *testing.T) {
	// Root "" is the real root; the kubepods path only has to resolve
	// below /sys/fs/cgroup.
	got, err := Source{CgroupV2KubepodsPath: "kubepods.slice"}.kubepodsPressurePath()
	if want := "/sys/fs/cgroup/kubepods.slice/memory.pressure"; err != nil || got != want {
		t.Errorf("kubepodsPressurePath() = %q, %v; want %q", got, err, want)
	}
}
