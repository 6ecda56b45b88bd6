package scale

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// process is a child process (kube-scheduler, dra-swap-controller) whose
// output goes to a log file (framework.StartProcess), with its name.
type process struct {
	*framework.Process
	name string
}

func startProcess(name, bin, logPath string, args ...string) (*process, error) {
	p, err := framework.StartProcess(name, bin, logPath, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &process{Process: p, name: name}, nil
}

// stop sends SIGTERM to the process, then SIGKILL after 10s.
func (p *process) stop() { p.Stop(10 * time.Second) }

// usage is a process's CPU time and memory, from /proc.
type usage struct {
	CPU     time.Duration
	RSS     int64 // bytes
	PeakRSS int64 // bytes (VmHWM)
}

// userHZ is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const userHZ = 100

func (p *process) usage() (usage, error) {
	pid := p.Pid()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, fmt.Errorf("read the stat of %s: %w", p.name, err)
	}
	// The command name may hold spaces; fields start after its ")".
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return usage{}, fmt.Errorf("stat of %s: no command name", p.name)
	}
	fields := strings.Fields(string(stat[i+1:]))
	// fields[0] is field 3 (state): utime is field 14, stime 15.
	if len(fields) < 13 {
		return usage{}, fmt.Errorf("stat of %s: %d fields", p.name, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return usage{}, fmt.Errorf("stat of %s: %w", p.name, err)
	}
	u := usage{CPU: time.Duration(utime+stime) * time.Second / userHZ}
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return usage{}, fmt.Errorf("read the status of %s: %w", p.name, err)
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return usage{}, fmt.Errorf("status of %s: %s: %w", p.name, key, err)
		}
		if key == "VmRSS" {
			u.RSS = kb << 10
		} else {
			u.PeakRSS = kb << 10
		}
	}
	return u, sc.Err()
}

// freePort returns a free TCP port on 127.0.0.1 (another process may take
// it before the caller binds it; the ports are used at once).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// httpGet fetches url (self-signed https accepted: the scheduler's and the
// controller's endpoints on loopback), at most limit bytes.
func httpGet(ctx context.Context, url string, limit int64) ([]byte, error) {
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}, //nolint:gosec // loopback test endpoints
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return body, nil
}

// waitHTTP polls url until it answers 200 OK or p exits or ctx ends.
func waitHTTP(ctx context.Context, p *process, url string) error {
	var last error
	for {
		if p.Exited() {
			return fmt.Errorf("%s exited: %w (log %s)", p.name, p.Err(), p.Log())
		}
		if _, last = httpGet(ctx, url, 1<<16); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w; last error: %w", p.name, url, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// binary is $env, or else <repo>/_output/bin/name; it must be executable.
func binary(env, name, howto string) (string, error) {
	path := os.Getenv(env)
	if path == "" {
		root, err := framework.RepoRoot()
		if err != nil {
			return "", fmt.Errorf("%s is not set and %w; %s", env, err, howto)
		}
		path = filepath.Join(root, "_output", "bin", name)
	}
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s binary %s is not an executable file (%w); %s", name, path, err, howto)
	}
	return path, nil
}

// controllerBinary is $DRA_SWAP_CONTROLLER, or else dra-swap-controller
// built from this tree into dir (go build reuses the build cache).
func controllerBinary(ctx context.Context, dir string) (string, error) {
	if path := os.Getenv("DRA_SWAP_CONTROLLER"); path != "" {
		return binary("DRA_SWAP_CONTROLLER", "dra-swap-controller", "")
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "dra-swap-controller")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/dra-swap-controller")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/dra-swap-controller: %w: %s", err, msg)
	}
	return out, nil
}
