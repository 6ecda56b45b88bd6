package framework

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is a child process whose output goes to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{} // closed when the process has exited
	err     error         // exit error, valid after done is closed
}

// startProcess runs path with args, with stdout and stderr appended to
// logPath.
func startProcess(name, path, logPath string, args []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group, so a ^C to `go test` reaches the test
		// binary only and Cleanup stops the children in order.
		Setpgid: true,
		// Do not outlive a test binary that dies without running Cleanup
		// (panic, timeout, SIGKILL).
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes how the process exited; call only after exited.
func (p *process) exitError() error {
	if p.err == nil {
		return fmt.Errorf("%s (pid %d) exited with status 0", p.name, p.cmd.Process.Pid)
	}
	return fmt.Errorf("%s (pid %d) exited: %w", p.name, p.cmd.Process.Pid, p.err)
}

// stop sends SIGTERM to the process by PID, waits up to grace for it to exit,
// then kills it and waits.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	return tailFile(p.logPath, n)
}

// addrInUse reports whether the log says a listener could not bind, which
// happens when another test took a port between freePort and the bind.
func (p *process) addrInUse() bool {
	data, err := os.ReadFile(p.logPath)
	return err == nil && bytes.Contains(data, []byte("address already in use"))
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. Another process
// may take one before the caller binds it; callers retry on
// "address already in use".
func freePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Process is a child process of a test, its output appended to a log file
// (StartProcess): what the framework runs etcd and kube-apiserver with, for
// other harnesses (the scale harness's kube-scheduler and controller).
type Process struct{ p *process }

// StartProcess runs path with args, its output appended to logPath, in its
// own process group and killed when the test binary dies.
func StartProcess(name, path, logPath string, args ...string) (*Process, error) {
	p, err := startProcess(name, path, logPath, args)
	if err != nil {
		return nil, err
	}
	return &Process{p: p}, nil
}

// Exited reports whether the process has exited; Err is then how.
func (p *Process) Exited() bool { return p.p.exited() }

// Err is the process's exit error (nil for status 0); valid once Exited.
func (p *Process) Err() error { return p.p.err }

// Stop sends SIGTERM, waits up to grace, then kills the process.
func (p *Process) Stop(grace time.Duration) { p.p.stop(grace) }

// Pid is the process's ID.
func (p *Process) Pid() int { return p.p.cmd.Process.Pid }

// Log is the path of the process's log file.
func (p *Process) Log() string { return p.p.logPath }

// RepoRoot is the driver module's root directory.
func RepoRoot() (string, error) { return repoRoot() }
