package guestrun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A fake QEMU: a shell script that plays the guest in the share.
func fakeQEMU(t *testing.T, share, script string) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qemu")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nshare=$1\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{path, share}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name   string
		guest  string
		stall  time.Duration
		want   int
		logHas []string
		outHas string
	}{
		{
			name:   "the guest's result is the exit code",
			guest:  `touch $share/booted; echo "suite output" > $share/run.log; echo 7 > $share/result`,
			want:   7,
			logHas: []string{"guest booted after", "run.sh exited with 7"},
			outHas: "suite output",
		},
		{
			name:   "an unreadable result is a failure",
			guest:  `touch $share/booted; echo 4096 > $share/result`,
			want:   ExitFailed,
			logHas: []string{`unreadable result "4096\n"`},
		},
		{
			name:   "a guest that does not boot",
			guest:  `echo "qemu: no kernel" >&2; exit 1`,
			want:   ExitFailed,
			logHas: []string{"qemu: no kernel", "FAILED: the guest did not boot: qemu exited (exit status 1)"},
		},
		{
			name:   "a guest that booted and died says what its init said",
			guest:  `touch $share/booted; echo "no /share/run.sh" > $share/guest-init-error; echo "Kernel panic" > $share/console.log`,
			want:   ExitFailed,
			logHas: []string{"Kernel panic", "without writing a result", "; no /share/run.sh"},
		},
		{
			name:   "a guest that does not finish in time is stopped",
			guest:  `touch $share/booted; while :; do touch $share/heartbeat; sleep 0.1; done`,
			want:   ExitFailed,
			logHas: []string{"timeout: no result after", "run.sh did not finish within the timeout"},
		},
		{
			name:   "a guest whose heartbeat stands still stalled",
			guest:  `touch $share/booted; touch $share/heartbeat; sleep 100`,
			stall:  500 * time.Millisecond,
			want:   ExitStalled,
			logHas: []string{"the guest stopped: no heartbeat", "stopped making progress"},
		},
		{
			name:   "a guest that does not power off after its result is stopped, the result stands",
			guest:  `touch $share/booted; echo 0 > $share/result; trap "" TERM; sleep 100`,
			want:   0,
			logHas: []string{"did not power off within", "(killed: it did not power off)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			share := t.TempDir()
			// The previous run's files go before QEMU starts.
			if err := os.WriteFile(filepath.Join(share, fileResult), []byte("0"), 0o644); err != nil {
				t.Fatal(err)
			}
			var log, out bytes.Buffer
			stall := tt.stall
			if stall == 0 {
				stall = time.Hour
			}
			start := time.Now()
			got := Run(context.Background(), Config{
				Share: share, Command: fakeQEMU(t, share, tt.guest), Timeout: 2 * time.Second, Stall: stall,
				Poll: 50 * time.Millisecond, PowerOffGrace: 500 * time.Millisecond, StopGrace: 300 * time.Millisecond, CPUGap: 10 * time.Millisecond,
				Log: &log, Out: &out,
			})
			if got != tt.want {
				t.Errorf("exit %d, want %d; log:\n%s", got, tt.want, log.String())
			}
			for _, s := range tt.logHas {
				if !strings.Contains(log.String(), s) {
					t.Errorf("the log lacks %q:\n%s", s, log.String())
				}
			}
			if !strings.Contains(out.String(), tt.outHas) {
				t.Errorf("stdout %q lacks %q", out.String(), tt.outHas)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v: QEMU was not stopped", took)
			}
		})
	}
}

func TestRunInterrupted(t *testing.T) {
	share := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	var log bytes.Buffer
	got := Run(ctx, Config{Share: share, Command: fakeQEMU(t, share, `touch $share/booted; sleep 100`), Timeout: time.Minute, Stall: time.Minute,
		Poll: 50 * time.Millisecond, StopGrace: 300 * time.Millisecond, Log: &log})
	if got != ExitInterrupted || !strings.Contains(log.String(), "interrupted") {
		t.Errorf("exit %d, want %d; log:\n%s", got, ExitInterrupted, log.String())
	}
}

// fakeMonitor serves QMP on a unix socket as QEMU does: a greeting, an
// event before an answer, then the answers.
func fakeMonitor(t *testing.T, registers string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "qmp") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "m.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				enc := json.NewEncoder(conn)
				_ = enc.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{}}})
				in := bufio.NewScanner(conn)
				for in.Scan() {
					var req struct {
						Execute   string
						Arguments map[string]string
					}
					if err := json.Unmarshal(in.Bytes(), &req); err != nil {
						return
					}
					_ = enc.Encode(map[string]any{"event": "RTC_CHANGE"})
					switch {
					case req.Execute == "qmp_capabilities":
						_ = enc.Encode(map[string]any{"return": map[string]any{}})
					case req.Execute == "human-monitor-command" && req.Arguments["command-line"] == "info registers -a":
						_ = enc.Encode(map[string]any{"return": registers})
					default:
						_ = enc.Encode(map[string]any{"error": map[string]string{"class": "CommandNotFound", "desc": "no " + req.Execute}})
					}
				}
			}()
		}
	}()
	return socket
}

const registers = "\r\nCPU#0\r\nRAX=0000000000000000 RBX=ffffffff\r\nRIP=ffffffff81e3c8ee RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\r\n" +
	"\r\nCPU#1\r\nRAX=0000000000000001\r\nRIP=00007f2a1c0d5e1b RFL=00000202 [-------] CPL=3 II=0 A20=1 SMM=0 HLT=0\r\n"

func TestStallShowsVCPUs(t *testing.T) {
	share := t.TempDir()
	var log bytes.Buffer
	got := Run(context.Background(), Config{Share: share, Command: fakeQEMU(t, share, `touch $share/booted; sleep 100`),
		Timeout: time.Minute, Stall: 300 * time.Millisecond, Monitor: fakeMonitor(t, registers),
		Poll: 50 * time.Millisecond, StopGrace: 300 * time.Millisecond, CPUGap: 10 * time.Millisecond, Log: &log})
	if got != ExitStalled {
		t.Fatalf("exit %d, want %d; log:\n%s", got, ExitStalled, log.String())
	}
	for _, want := range []string{"CPU#0: RIP=ffffffff81e3c8ee", "SMM=0 HLT=1", "CPU#1: RIP=00007f2a1c0d5e1b", "CPL=3"} {
		if strings.Count(log.String(), want) != 2 {
			t.Errorf("the log does not show %q twice:\n%s", want, log.String())
		}
	}
}

func TestQMPCommand(t *testing.T) {
	socket := fakeMonitor(t, registers)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := QMPCommand(ctx, socket, "info registers -a")
	if err != nil || out != registers {
		t.Errorf("info registers -a: %q, %v", out, err)
	}
	if _, err := QMPCommand(ctx, socket, "info nothing"); err == nil || !strings.Contains(err.Error(), "CommandNotFound") {
		t.Errorf("an unknown command: %v, want QEMU's error", err)
	}
	if _, err := QMPCommand(ctx, filepath.Join(t.TempDir(), "none"), "info registers -a"); err == nil {
		t.Error("no socket: no error")
	}
}

func TestParseResult(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
	}{{"0\n", 0}, {"1", 1}, {" 255 \n", 255}, {"rc=42", 42}} {
		if got, ok := parseResult([]byte(tt.in)); !ok || got != tt.want {
			t.Errorf("parseResult(%q) = %d, %v; want %d", tt.in, got, ok, tt.want)
		}
	}
	for _, in := range []string{"", "\n", "256", "99999999999999999999", "exit"} {
		if got, ok := parseResult([]byte(in)); ok {
			t.Errorf("parseResult(%q) = %d, want unreadable", in, got)
		}
	}
}
