// Package guestrun runs the emulated guest that hack/guest/run.sh
// configures and judges the run: it starts QEMU, follows the files the
// guest writes to its share (booted, heartbeat, result), stops a guest that
// ran out of time, stopped making progress or did not power off, and says
// why. QEMU's own exit code says nothing; the result file alone is the
// guest's verdict.
package guestrun

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit codes of Run besides the guest's own.
const (
	// ExitFailed: no usable result (the guest did not boot, did not
	// finish in time, or wrote an unreadable result).
	ExitFailed = 1
	// ExitStalled: the guest booted and then stopped making progress (no
	// heartbeat for Config.Stall): the emulator no longer ran it, which
	// is not a result of what it ran, so the caller may boot it again.
	ExitStalled = 3
	// ExitInterrupted: Run's context was canceled (a signal).
	ExitInterrupted = 130
)

// Files in the share: the guest writes booted once it runs run.sh,
// rewrites heartbeat every 5 s meanwhile, and writes result (run.sh's exit
// code) and run.log (its output); QEMU writes console.log (the serial
// console) and qemu.log (its own output) is this package's.
const (
	fileBooted    = "booted"
	fileHeartbeat = "heartbeat"
	fileResult    = "result"
	fileRunLog    = "run.log"
	fileConsole   = "console.log"
	fileQEMULog   = "qemu.log"
	fileInitError = "guest-init-error"
)

// Config is one run.
type Config struct {
	// Share is the directory shared with the guest.
	Share string
	// Command is QEMU and its arguments.
	Command []string
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Stall is how long the heartbeat may stand still, once the guest
	// booted and before it wrote a result.
	Stall time.Duration
	// Monitor is QEMU's QMP socket, asked for the virtual CPUs' state
	// when the guest stalls; empty: not asked.
	Monitor string
	// Poll, PowerOffGrace, StopGrace and CPUGap are the loop's intervals:
	// how often the share is looked at (1 s), how long a guest that wrote
	// its result may take to power off (60 s), how long QEMU may take to
	// exit after SIGTERM before SIGKILL (10 s), and the time between the
	// two looks at the stalled virtual CPUs (3 s).
	Poll, PowerOffGrace, StopGrace, CPUGap time.Duration
	// Log gets the progress lines and the diagnostics; Out gets run.log.
	Log, Out io.Writer
}

func (c *Config) defaults() {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.Poll, time.Second}, {&c.PowerOffGrace, time.Minute}, {&c.StopGrace, 10 * time.Second}, {&c.CPUGap, 3 * time.Second}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// run is one run's state.
type run struct {
	cfg                  Config
	start                time.Time
	bootedAt, resultAt   time.Duration // 0: not yet
	cmd                  *exec.Cmd
	exited               chan struct{}
	waitErr              error
	timedOut, hung       bool
	stalled, interrupted bool
}

// Run starts QEMU, watches the guest until QEMU exits or is stopped, and
// returns the exit code to leave with: the guest's result, else
// ExitFailed, ExitStalled or ExitInterrupted, each said on cfg.Log.
func Run(ctx context.Context, cfg Config) int {
	cfg.defaults()
	r := &run{cfg: cfg, exited: make(chan struct{})}
	if err := r.startQEMU(); err != nil {
		r.logf("FAILED: %v", err)
		return ExitFailed
	}
	r.watch(ctx)
	<-r.exited
	r.noteProgress()
	total := time.Since(r.start)
	if r.interrupted {
		r.logf("interrupted; qemu stopped")
		return ExitInterrupted
	}
	if b, err := os.ReadFile(r.path(fileRunLog)); err == nil && len(b) > 0 {
		r.logf("----- run.log -----")
		_, _ = r.cfg.Out.Write(b)
		r.logf("----- end of run.log -----")
	}
	if b, err := os.ReadFile(r.path(fileResult)); err == nil {
		rc, ok := parseResult(b)
		if !ok {
			r.logf("unreadable result %q: counting it as a failure", truncate(b, 100))
			rc = ExitFailed
		}
		msg := fmt.Sprintf("run.sh exited with %d; booted after %s, result after %s, qemu exited after %s", rc, seconds(r.bootedAt), seconds(r.resultAt), seconds(total))
		if r.hung {
			msg += " (killed: it did not power off)"
		}
		r.logf("%s", msg)
		return rc
	}
	why := r.why(total)
	if b, err := os.ReadFile(r.path(fileQEMULog)); err == nil && len(b) > 0 {
		r.logf("----- qemu.log -----")
		_, _ = r.cfg.Log.Write(tail(b, 20))
	}
	r.logf("----- last 60 lines of console.log -----")
	if b, err := os.ReadFile(r.path(fileConsole)); err == nil {
		_, _ = r.cfg.Log.Write(tail(b, 60))
	} else {
		r.logf("(no console.log)")
	}
	r.logf("FAILED: %s", why)
	if r.stalled {
		return ExitStalled
	}
	return ExitFailed
}

func (r *run) path(name string) string { return filepath.Join(r.cfg.Share, name) }

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "[guest-run %s] %s\n", time.Now().Format(time.TimeOnly), fmt.Sprintf(format, args...))
}

// startQEMU clears the previous run's files and starts QEMU, its output
// to qemu.log.
func (r *run) startQEMU() error {
	if len(r.cfg.Command) == 0 {
		return errors.New("no QEMU command")
	}
	for _, f := range []string{fileBooted, fileHeartbeat, fileResult, fileResult + ".tmp", fileRunLog, fileConsole, fileQEMULog, fileInitError} {
		if err := os.Remove(r.path(f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("clearing the share: %w", err)
		}
	}
	out, err := os.Create(r.path(fileQEMULog))
	if err != nil {
		return fmt.Errorf("qemu's log: %w", err)
	}
	r.cmd = exec.Command(r.cfg.Command[0], r.cfg.Command[1:]...)
	r.cmd.Stdout, r.cmd.Stderr = out, out
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("starting %s: %w", r.cfg.Command[0], err)
	}
	go func() {
		r.waitErr = r.cmd.Wait()
		_ = out.Close()
		close(r.exited)
	}()
	return nil
}

// watch looks at the share every Poll until QEMU exits, and stops it on
// the timeout, a stall, a guest that does not power off, or ctx.
func (r *run) watch(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Poll)
	defer tick.Stop()
	for {
		r.noteProgress()
		now := time.Since(r.start)
		switch {
		case now >= r.cfg.Timeout:
			r.timedOut = true
			r.logf("timeout: no result after %s; killing qemu", seconds(r.cfg.Timeout))
			r.stop()
			return
		case r.bootedAt > 0 && r.resultAt == 0 && r.heartbeatAge() >= r.cfg.Stall:
			r.stalled = true
			r.logf("the guest stopped: no heartbeat for %s (GUEST_STALL_SECONDS=%.0f); its virtual CPUs, twice, %s apart (HLT=1: waiting for an interrupt; a moving RIP: running something):",
				seconds(r.heartbeatAge()), r.cfg.Stall.Seconds(), seconds(r.cfg.CPUGap))
			r.logVCPUs(ctx)
			time.Sleep(r.cfg.CPUGap)
			r.logVCPUs(ctx)
			r.stop()
			return
		case r.resultAt > 0 && now-r.resultAt >= r.cfg.PowerOffGrace:
			r.hung = true
			r.logf("the guest wrote its result but did not power off within %s; killing qemu", seconds(r.cfg.PowerOffGrace))
			r.stop()
			return
		}
		select {
		case <-r.exited:
			return
		case <-ctx.Done():
			r.interrupted = true
			r.stop()
			return
		case <-tick.C:
		}
	}
}

// noteProgress notes when booted and result first appear.
func (r *run) noteProgress() {
	if r.bootedAt == 0 && exists(r.path(fileBooted)) {
		r.bootedAt = max(time.Since(r.start), time.Nanosecond)
		r.logf("guest booted after %s; run.sh is running", seconds(r.bootedAt))
	}
	if r.resultAt == 0 && exists(r.path(fileResult)) {
		r.resultAt = max(time.Since(r.start), time.Nanosecond)
		r.logf("result after %s", seconds(r.resultAt))
	}
}

// heartbeatAge is the time since the guest last showed progress (its
// heartbeat, else the booted file), by this host's clock.
func (r *run) heartbeatAge() time.Duration {
	for _, f := range []string{fileHeartbeat, fileBooted} {
		if st, err := os.Stat(r.path(f)); err == nil {
			return time.Since(st.ModTime())
		}
	}
	return 0
}

// stop ends QEMU: SIGTERM, then SIGKILL after StopGrace.
func (r *run) stop() {
	select {
	case <-r.exited:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(r.cfg.StopGrace):
		_ = r.cmd.Process.Kill()
	}
}

// why says why a run without a result failed.
func (r *run) why(total time.Duration) string {
	var why string
	booted := r.bootedAt > 0
	switch {
	case booted && r.stalled:
		why = fmt.Sprintf("the guest booted (after %s) and stopped making progress after about %s: no heartbeat for %s", seconds(r.bootedAt), seconds(total-r.cfg.Stall), seconds(r.cfg.Stall))
	case booted && r.timedOut:
		why = fmt.Sprintf("the guest booted (after %s) but run.sh did not finish within the timeout of %s", seconds(r.bootedAt), seconds(r.cfg.Timeout))
	case booted:
		why = fmt.Sprintf("the guest booted (after %s) but stopped after %s without writing a result (qemu: %v)", seconds(r.bootedAt), seconds(total), exitStatus(r.waitErr))
	case r.timedOut:
		return fmt.Sprintf("the guest did not boot: no %s within the timeout of %s", r.path(fileBooted), seconds(r.cfg.Timeout))
	default:
		return fmt.Sprintf("the guest did not boot: qemu exited (%v) after %s and no %s", exitStatus(r.waitErr), seconds(total), r.path(fileBooted))
	}
	if b, err := os.ReadFile(r.path(fileInitError)); err == nil {
		why += "; " + strings.TrimSpace(string(truncate(b, 1000)))
	}
	return why
}

// logVCPUs logs each virtual CPU's instruction pointer, privilege level
// and whether it is halted, from QEMU's monitor (best effort).
func (r *run) logVCPUs(ctx context.Context) {
	if r.cfg.Monitor == "" {
		r.logf("(no QEMU monitor: no virtual CPU state)")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	regs, err := QMPCommand(ctx, r.cfg.Monitor, "info registers -a")
	if err != nil {
		r.logf("(QEMU's monitor: %v)", err)
		return
	}
	for _, line := range VCPULines(regs) {
		fmt.Fprintln(r.cfg.Log, line)
	}
}

// QMPCommand runs a human monitor command through QEMU's QMP socket and
// returns its output.
func QMPCommand(ctx context.Context, socket, command string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return "", fmt.Errorf("connecting to %s: %w", socket, err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	in := bufio.NewReaderSize(conn, 64<<10)
	if _, err := readQMP(in); err != nil { // the greeting
		return "", fmt.Errorf("QMP greeting: %w", err)
	}
	call := func(cmd string, args any) (json.RawMessage, error) {
		req, err := json.Marshal(map[string]any{"execute": cmd, "arguments": args})
		if err != nil {
			return nil, err
		}
		if _, err := conn.Write(append(req, '\n')); err != nil {
			return nil, err
		}
		// Events may come before the answer: up to 100 lines.
		for range 100 {
			msg, err := readQMP(in)
			if err != nil {
				return nil, err
			}
			if msg.Error != nil {
				return nil, fmt.Errorf("%s: %s: %s", cmd, msg.Error.Class, msg.Error.Desc)
			}
			if msg.Return != nil {
				return msg.Return, nil
			}
		}
		return nil, fmt.Errorf("%s: no answer in 100 messages", cmd)
	}
	if _, err := call("qmp_capabilities", map[string]any{}); err != nil {
		return "", err
	}
	ret, err := call("human-monitor-command", map[string]string{"command-line": command})
	if err != nil {
		return "", err
	}
	var out string
	if err := json.Unmarshal(ret, &out); err != nil {
		return "", fmt.Errorf("human-monitor-command returned %s, not a string", truncate(ret, 200))
	}
	return out, nil
}

type qmpMessage struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// readQMP reads one QMP message (a JSON object per line, at most 1 MiB).
func readQMP(in *bufio.Reader) (qmpMessage, error) {
	var line []byte
	for {
		chunk, isPrefix, err := in.ReadLine()
		if err != nil {
			return qmpMessage{}, err
		}
		line = append(line, chunk...)
		if len(line) > 1<<20 {
			return qmpMessage{}, errors.New("a QMP message longer than 1 MiB")
		}
		if !isPrefix {
			break
		}
	}
	var msg qmpMessage
	if err := json.Unmarshal(line, &msg); err != nil {
		return qmpMessage{}, fmt.Errorf("a QMP message that is not JSON: %q", truncate(line, 200))
	}
	return msg, nil
}

// VCPULines picks from `info registers -a` each CPU's header line and its
// RIP line (instruction pointer, privilege level, halted), one line per
// CPU.
func VCPULines(regs string) []string {
	var lines []string
	cpu := ""
	for line := range strings.Lines(regs) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "CPU#"):
			cpu = line
		case strings.HasPrefix(line, "RIP="):
			if cpu != "" {
				line = cpu + ": " + line
			}
			lines = append(lines, line)
			cpu = ""
		}
	}
	return lines
}

// parseResult reads the guest's result: its digits, a number up to 255.
func parseResult(b []byte) (int, bool) {
	digits := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, string(b))
	if digits == "" || len(digits) > 3 {
		return 0, false
	}
	rc, err := strconv.Atoi(digits)
	if err != nil || rc > 255 {
		return 0, false
	}
	return rc, true
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func seconds(d time.Duration) string {
	if d <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

func exitStatus(err error) string {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "exit code 0"
	case errors.As(err, &exit):
		return exit.ProcessState.String()
	default:
		return err.Error()
	}
}

// tail is the last n lines of b.
func tail(b []byte, n int) []byte {
	s := strings.TrimRight(string(b), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return []byte(strings.Join(lines, "\n") + "\n")
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
