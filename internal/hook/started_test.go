package hook

import (
	"strings"
	"testing"
	"time"
)

func TestParseStartTicks(t *testing.T) {
	// Fields 3 to 22 after the command name; the start time is 4242.
	tail := " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 19 20"
	tests := []struct {
		name, stat string
		want       uint64
		wantErr    string
	}{
		{name: "plain", stat: "123 (dra-swap-hook)" + tail, want: 4242},
		{name: "a command name with spaces and parentheses", stat: "123 (a) b (c))" + tail, want: 4242},
		{name: "no command name", stat: "123 dra-swap-hook" + tail, wantErr: "has no command name"},
		{name: "too few fields", stat: "123 (x) S 1 2 3", wantErr: "has 4 fields after the command name, want at least 20"},
		{name: "not a number", stat: "123 (x)" + strings.Replace(tail, "4242", "-1", 1), wantErr: `start time "-1"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStartTicks(tc.stat)
			switch {
			case tc.wantErr == "" && (err != nil || got != tc.want):
				t.Errorf("parseStartTicks = %d, %v; want %d", got, err, tc.want)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("parseStartTicks = %d, %v; want an error saying %q", got, err, tc.wantErr)
			}
		})
	}
}

// TestStartedAgo reads this process's age twice, 500 ms apart: the kernel's
// clock and its unit (USER_HZ) are what startedAgo assumes when the second
// is 500 ms older, within the kernel's 10 ms ticks.
func TestStartedAgo(t *testing.T) {
	first, err := startedAgo()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	second, err := startedAgo()
	if err != nil {
		t.Fatal(err)
	}
	if first < 0 || first > time.Hour {
		t.Errorf("this test process started %v ago", first)
	}
	if d := second - first; d < 480*time.Millisecond || d > 700*time.Millisecond {
		t.Errorf("two readings 500ms apart differ by %v (%v, then %v)", d, first, second)
	}
}

func TestBudget(t *testing.T) {
	tests := []struct {
		name     string
		deadline time.Duration
		age      time.Duration
		want     time.Duration
	}{
		{name: "started at once", deadline: Deadline, age: 20 * time.Millisecond, want: Deadline},
		{name: "started 4s late", deadline: Deadline, age: 4 * time.Second, want: 4 * time.Second},
		{name: "started 7.9s late", deadline: Deadline, age: 7900 * time.Millisecond, want: minBudget},
		{name: "a test's short deadline", deadline: 300 * time.Millisecond, age: 9 * time.Second, want: 300 * time.Millisecond},
		{name: "age unknown (startedAgo's 0)", deadline: Deadline, age: 0, want: Deadline},
		{name: "age negative", deadline: Deadline, age: -time.Second, want: Deadline},
		{name: "age past the runtime's timeout", deadline: Deadline, age: time.Hour, want: Deadline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := budget(tc.deadline, tc.age); got != tc.want {
				t.Errorf("budget(%v, %v) = %v, want %v", tc.deadline, tc.age, got, tc.want)
			}
		})
	}
}

// TestLateStartShortensTheDeadline: a hook started 7 s after the runtime
// ran it, whose cgroup write hangs, gives up 1 s later (before the
// runtime's 10 s timeout, exitMargin kept), saying how late it started.
func TestLateStartShortensTheDeadline(t *testing.T) {
	n := hangingWriteNode(t)
	age := 7 * time.Second
	lim := runLimits{deadline: budget(Deadline, age), lockWait: LockWait, age: age}
	start := time.Now()
	err := run(n.args("--swap-limit=104857600", "--claim-uid="+claimA), strings.NewReader(stateJSON(cid, pid)), lim)
	took := time.Since(start)
	const want = "the hook having started 7s after the runtime ran it (the node is short of CPU or memory) (the runtime kills"
	if err == nil || !strings.Contains(err.Error(), "gave up after 1s writing the container's swap limit to its cgroup "+group) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one saying it gave up after 1s and %q", err, want)
	}
	if took >= Deadline {
		t.Errorf("the hook gave up after %v, no sooner than its deadline for a hook started at once (%v)", took, Deadline)
	}
	if r := readRecord(t, n); !strings.Contains(r.Error, want) {
		t.Errorf("record %+v, want the deadline's error", r)
	}
}
