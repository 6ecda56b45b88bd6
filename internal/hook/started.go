package hook

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookargs"
)

// The runtime's timeout counts from when it started the hook's process,
// not from when the hook's main ran: on a node short of CPU or memory (a
// thrashing node reads the hook's binary back from disk) the two can be
// seconds apart. So the hook measures how long ago it was started and
// keeps its own deadline that much shorter, giving up, with a record that
// says why, before the runtime kills it without a word.
const (
	// exitMargin is what the hook keeps for writing its record and
	// exiting after it gave up, before the runtime's timeout.
	exitMargin = 2 * time.Second
	// minBudget is what a hook started late still gets: applying a limit
	// takes milliseconds when nothing holds it up.
	minBudget = 500 * time.Millisecond
	// clockTicks is the kernel's USER_HZ, the unit of /proc's start
	// times: 100 on every Linux architecture.
	clockTicks = 100
	// maxStatBytes bounds the read of /proc/self/stat.
	maxStatBytes = 4096
)

// startedAgo is how long ago this process was started: its start time in
// /proc/self/stat (field 22, clock ticks since boot) against
// CLOCK_BOOTTIME, to the kernel's 10 ms; 0 with the error when unknown.
func startedAgo() (time.Duration, error) {
	f, err := os.Open("/proc/self/stat")
	if err != nil {
		return 0, fmt.Errorf("reading the process's start time: %w", err)
	}
	defer f.Close()
	buf := make([]byte, maxStatBytes)
	n, err := f.Read(buf)
	if err != nil {
		return 0, fmt.Errorf("reading /proc/self/stat: %w", err)
	}
	start, err := parseStartTicks(string(buf[:n]))
	if err != nil {
		return 0, err
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &now); err != nil {
		return 0, fmt.Errorf("reading CLOCK_BOOTTIME: %w", err)
	}
	return time.Duration(now.Nano()) - time.Duration(start)*time.Second/clockTicks, nil
}

// parseStartTicks is the start time (field 22) of a /proc/PID/stat line.
// The command name (field 2) is in parentheses and may hold spaces and
// parentheses itself: the fields after it start after the last ')'.
func parseStartTicks(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/self/stat %.40q has no command name", stat)
	}
	fields := strings.Fields(stat[i+1:])
	// fields[0] is field 3 (the state), so field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/self/stat has %d fields after the command name, want at least 20", len(fields))
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/self/stat's start time %q: %w", fields[19], err)
	}
	return ticks, nil
}

// budget is how long the hook's work may take, given how long ago the
// runtime started the hook (age; 0 when unknown): at most deadline, and
// over by exitMargin before the runtime's timeout, but never less than
// minBudget (or deadline, if shorter). An age outside 0 to the runtime's
// timeout is no measurement (the runtime would have killed the hook) and
// leaves deadline.
func budget(deadline, age time.Duration) time.Duration {
	timeout := hookargs.TimeoutSeconds * time.Second
	if age < 0 || age > timeout {
		return deadline
	}
	return max(min(deadline, minBudget), min(deadline, timeout-exitMargin-age))
}

// lateNote is what a message adds about a late start: nothing under a
// second.
func lateNote(age time.Duration) string {
	if age < time.Second {
		return ""
	}
	return fmt.Sprintf(", the hook having started %s after the runtime ran it (the node is short of CPU or memory)", age.Round(10*time.Millisecond))
}
