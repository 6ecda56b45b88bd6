package limitcheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

const (
	mi       = int64(1) << 20
	group    = "/kubepods/burstable/pod1/ctr1"
	claimA   = "aaaaaaaa-0000-4000-8000-000000000001"
	claimB   = "bbbbbbbb-0000-4000-8000-000000000002"
	podUID   = "cccccccc-0000-4000-8000-000000000003"
	ctrID    = "0123456789abcdef"
	otherCtr = "fedcba9876543210"
)

type report struct {
	restored    bool
	pod         bool
	found, want int64
	trigger     string
	err         error
	// still and cleared mark StillNotRestored and Cleared; attempts is
	// the drift's.
	still, cleared bool
	attempts       int
}

type fakeReporter struct{ reports []report }

func (f *fakeReporter) StillNotRestored(_ context.Context, d Drift) {
	f.reports = append(f.reports, report{still: true, pod: d.Pod, found: d.Found, want: d.Want, trigger: d.Trigger, attempts: d.Attempts})
}

func (f *fakeReporter) Cleared(_ context.Context, d Drift) {
	f.reports = append(f.reports, report{cleared: true, pod: d.Pod, found: d.Found, want: d.Want, trigger: d.Trigger, attempts: d.Attempts})
}

func (f *fakeReporter) Restored(_ context.Context, d Drift) {
	f.reports = append(f.reports, report{restored: true, pod: d.Pod, found: d.Found, want: d.Want, trigger: d.Trigger, attempts: d.Attempts})
}

func (f *fakeReporter) NotRestored(_ context.Context, d Drift, err error) {
	f.reports = append(f.reports, report{pod: d.Pod, found: d.Found, want: d.Want, trigger: d.Trigger, err: err, attempts: d.Attempts})
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// node is a hook state directory and a cgroup tree with one container.
type node struct {
	stateDir, cgroupRoot, file string
	version                    int
}

func newNode(t *testing.T, version int, shares ...int64) node {
	t.Helper()
	n := node{stateDir: t.TempDir(), cgroupRoot: t.TempDir(), version: version}
	switch version {
	case 1:
		dir := filepath.Join(n.cgroupRoot, "memory", group)
		write(t, filepath.Join(dir, "memory.limit_in_bytes"), "134217728\n")
		n.file = filepath.Join(dir, "memory.memsw.limit_in_bytes")
	case 2:
		write(t, filepath.Join(n.cgroupRoot, "cgroup.controllers"), "memory\n")
		n.file = filepath.Join(n.cgroupRoot, group, "memory.swap.max")
	}
	dir := filepath.Join(n.stateDir, ctrID)
	c := hookstate.Container{ID: ctrID, CgroupVersion: version, CgroupGroup: group, Namespace: "ns", Pod: "p", PodUID: podUID, Name: "worker"}
	if err := hookstate.WriteContainer(dir, c); err != nil {
		t.Fatal(err)
	}
	for i, s := range shares {
		if err := hookstate.Record(dir, hookstate.ShareKey([]string{claimA, claimB}[i], 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: s}}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name        string
		version     int
		shares      []int64
		cgroupValue string // what the cgroup file holds before the check
		want        Outcome
		wantFile    string
		wantReport  *report
	}{
		{name: "v1 held", version: 1, shares: []int64{100 * mi}, cgroupValue: "239075328", want: Held, wantFile: "239075328"},
		{name: "v1 after a resize: memsw equals the memory limit", version: 1, shares: []int64{100 * mi}, cgroupValue: "134217728",
			want: Restored, wantFile: "239075328", wantReport: &report{restored: true, found: 0, want: 100 * mi, trigger: "test"}},
		{name: "v1 two claims add up", version: 1, shares: []int64{100 * mi, 28 * mi}, cgroupValue: "134217728",
			want: Restored, wantFile: "268435456", wantReport: &report{restored: true, found: 0, want: 128 * mi, trigger: "test"}},
		{name: "v2 held", version: 2, shares: []int64{64 * mi}, cgroupValue: "67108864", want: Held, wantFile: "67108864"},
		{name: "v2 rewritten by hand", version: 2, shares: []int64{64 * mi}, cgroupValue: "max",
			want: Restored, wantFile: "67108864", wantReport: &report{restored: true, found: -1, want: 64 * mi, trigger: "test"}},
		{name: "v2 kubelet's NoSwap value", version: 2, shares: []int64{64 * mi}, cgroupValue: "0",
			want: Restored, wantFile: "67108864", wantReport: &report{restored: true, found: 0, want: 64 * mi, trigger: "test"}},
		{name: "container record without a share yet", version: 2, cgroupValue: "0", want: Held, wantFile: "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.version, tc.shares...)
			write(t, n.file, tc.cgroupValue+"\n")
			rep := &fakeReporter{}
			v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: rep}
			got, err := v.Check(context.Background(), ctrID, "test")
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("outcome %s, want %s", got, tc.want)
			}
			if f := read(t, n.file); f != tc.wantFile {
				t.Errorf("%s = %s, want %s", filepath.Base(n.file), f, tc.wantFile)
			}
			switch {
			case tc.wantReport == nil && len(rep.reports) > 0:
				t.Errorf("reports %+v, want none", rep.reports)
			case tc.wantReport != nil && (len(rep.reports) != 1 || rep.reports[0] != *tc.wantReport):
				t.Errorf("reports %+v, want %+v", rep.reports, *tc.wantReport)
			}
		})
	}
}

// The pod's budget, kept in the container's parent cgroup when its
// containers share a claim, is held like the container's own limit.
func TestCheckPodBudget(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			n := newNode(t, version)
			dir := filepath.Join(n.stateDir, ctrID)
			c, err := hookstate.ReadContainer(dir)
			if err != nil {
				t.Fatal(err)
			}
			c.PodCgroupGroup = filepath.Dir(group)
			if err := hookstate.WriteContainer(dir, c); err != nil {
				t.Fatal(err)
			}
			if err := hookstate.Record(dir, hookstate.ShareKey(claimA, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 100 * mi}, PodLimitBytes: ptr.To(100 * mi)}); err != nil {
				t.Fatal(err)
			}
			podFile, podWant := filepath.Join(n.cgroupRoot, filepath.Dir(group), "memory.swap.max"), "104857600"
			if version == 1 {
				podDir := filepath.Join(n.cgroupRoot, "memory", filepath.Dir(group))
				write(t, filepath.Join(podDir, "memory.limit_in_bytes"), "268435456\n")
				podFile, podWant = filepath.Join(podDir, "memory.memsw.limit_in_bytes"), "373293056"
				write(t, n.file, "239075328\n")
			} else {
				write(t, n.file, "104857600\n")
			}
			write(t, podFile, "max\n") // systemd's daemon-reload put the default back
			rep := &fakeReporter{}
			v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: rep}
			got, err := v.Check(context.Background(), ctrID, "test")
			if err != nil || got != Restored {
				t.Fatalf("Check = %s, %v; want restored", got, err)
			}
			if f := read(t, podFile); f != podWant {
				t.Errorf("pod %s = %s, want %s", filepath.Base(podFile), f, podWant)
			}
			if len(rep.reports) != 1 || !rep.reports[0].pod || rep.reports[0].want != 100*mi {
				t.Errorf("reports %+v, want one restore of the pod budget", rep.reports)
			}
			if got, err := v.Check(context.Background(), ctrID, "test"); err != nil || got != Held {
				t.Errorf("second Check = %s, %v; want held", got, err)
			}
		})
	}
}

func TestCheckNotRestored(t *testing.T) {
	// cgroup v1 refuses a container without a memory limit: the drift is
	// reported with the reason, and the file is left alone.
	n := newNode(t, 1, 100*mi)
	write(t, filepath.Join(n.cgroupRoot, "memory", group, "memory.limit_in_bytes"), "9223372036854771712\n")
	write(t, n.file, "9223372036854771712\n")
	rep := &fakeReporter{}
	v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: rep}
	got, err := v.Check(context.Background(), ctrID, "test")
	if got != Failed || err == nil || !strings.Contains(err.Error(), "no memory limit") {
		t.Fatalf("outcome %s, error %v; want failed naming the missing memory limit", got, err)
	}
	if len(rep.reports) != 1 || rep.reports[0].restored || rep.reports[0].err == nil || rep.reports[0].want != 100*mi {
		t.Errorf("reports %+v, want one NotRestored with the error", rep.reports)
	}
}

func TestCheckUnknownAndGone(t *testing.T) {
	n := newNode(t, 2, 64*mi)
	rep := &fakeReporter{}
	v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: rep}
	// A container the hook never saw is not the driver's.
	if got, err := v.Check(context.Background(), otherCtr, "test"); got != Held || err != nil {
		t.Errorf("unknown container: %s, %v; want held", got, err)
	}
	// A path in a container ID never reaches the file system.
	if got, err := v.Check(context.Background(), "../etc", "test"); got != Failed || err == nil {
		t.Errorf("container id ../etc: %s, %v; want an error", got, err)
	}
	// No cgroup directory: the container is gone, nothing to report.
	if got, err := v.Check(context.Background(), ctrID, "test"); got != Gone || err != nil {
		t.Errorf("container without a cgroup: %s, %v; want gone", got, err)
	}
	if len(rep.reports) > 0 {
		t.Errorf("reports %+v, want none", rep.reports)
	}
}

func TestCheckMalformedRecord(t *testing.T) {
	n := newNode(t, 2, 64*mi)
	write(t, n.file, "0\n")
	write(t, filepath.Join(n.stateDir, ctrID, hookstate.ShareKey(claimB, 0)), "{not json")
	v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: &fakeReporter{}}
	got, err := v.Check(context.Background(), ctrID, "test")
	if got != Failed || err == nil || !strings.Contains(err.Error(), claimB) {
		t.Errorf("malformed share: %s, %v; want an error naming the file", got, err)
	}
	if f := read(t, n.file); f != "0" {
		t.Errorf("memory.swap.max = %s after a malformed record; want it untouched", f)
	}
}

func TestCheckAllRemovesRecordsOfGoneContainers(t *testing.T) {
	n := newNode(t, 2, 64*mi)
	write(t, n.file, "max\n")
	// A second container whose cgroup is gone and whose poststop never ran.
	gone := hookstate.Container{ID: otherCtr, CgroupVersion: 2, CgroupGroup: "/kubepods/burstable/pod1/ctr2"}
	goneDir := filepath.Join(n.stateDir, otherCtr)
	if err := hookstate.WriteContainer(goneDir, gone); err != nil {
		t.Fatal(err)
	}
	if err := hookstate.Record(goneDir, hookstate.ShareKey(claimA, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: mi}}); err != nil {
		t.Fatal(err)
	}
	rep := &fakeReporter{}
	v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: rep}

	// Young records stay: the hook may be creating that container now.
	sum, err := v.CheckAll(context.Background(), "test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if sum != (Summary{Restored: 1}) {
		t.Errorf("first pass %+v, want one restored", sum)
	}
	if _, err := os.Stat(goneDir); err != nil {
		t.Errorf("young records of a gone container removed: %v", err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(goneDir, old, old); err != nil {
		t.Fatal(err)
	}
	sum, err = v.CheckAll(context.Background(), "test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if sum != (Summary{Held: 1, Removed: 1}) {
		t.Errorf("second pass %+v, want one held, one removed", sum)
	}
	if _, err := os.Stat(goneDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("records of a gone container still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.stateDir, ctrID, hookstate.ContainerFile)); err != nil {
		t.Errorf("records of a live container: %v", err)
	}
}

// Containers of one pod may record different budgets (claims prepared in
// different kubelet calls): the pod's cgroup holds one, the largest, and
// the verifier writes it once, not once per container, the last one
// winning and every pass "restoring" it again.
func TestOneBudgetPerPod(t *testing.T) {
	const otherGroup = "/kubepods/burstable/pod1/ctr2"
	podGroup := filepath.Dir(group)
	n := newNode(t, 2)
	for id, s := range map[string]struct {
		group          string
		limit, podSwap int64
	}{ctrID: {group, 100 * mi, 100 * mi}, otherCtr: {otherGroup, 300 * mi, 300 * mi}} {
		dir := filepath.Join(n.stateDir, id)
		c := hookstate.Container{ID: id, CgroupVersion: 2, CgroupGroup: s.group, PodCgroupGroup: podGroup, Namespace: "ns", Pod: "p", PodUID: podUID, Name: id}
		if err := hookstate.WriteContainer(dir, c); err != nil {
			t.Fatal(err)
		}
		if err := hookstate.Record(dir, hookstate.ShareKey(claimA, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: s.limit}, PodLimitBytes: ptr.To(s.podSwap)}); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(n.cgroupRoot, s.group, "memory.swap.max"), fmt.Sprint(s.limit)+"\n")
	}
	podFile := filepath.Join(n.cgroupRoot, podGroup, "memory.swap.max")
	write(t, podFile, "max\n")
	rep := &fakeReporter{}
	v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: rep}
	ctx := context.Background()

	sum, err := v.CheckAll(ctx, "test", time.Hour)
	if err != nil || sum != (Summary{Held: 1, Restored: 1}) {
		t.Errorf("first pass %+v, %v; want one held, one restored", sum, err)
	}
	if f := read(t, podFile); f != fmt.Sprint(300*mi) {
		t.Errorf("pod memory.swap.max = %s, want the largest budget %d", f, 300*mi)
	}
	if len(rep.reports) != 1 || !rep.reports[0].pod || rep.reports[0].want != 300*mi {
		t.Errorf("first pass reports %+v, want one restore of the pod's 300Mi", rep.reports)
	}
	rep.reports = nil
	for i := range 3 {
		sum, err := v.CheckAll(ctx, "test", time.Hour)
		if err != nil || sum != (Summary{Held: 2}) {
			t.Errorf("pass %d: %+v, %v; want both held", i+2, sum, err)
		}
		for _, id := range []string{ctrID, otherCtr} {
			if got, err := v.Check(ctx, id, "test"); got != Held || err != nil {
				t.Errorf("pass %d: Check(%s) = %s, %v; want held", i+2, id, got, err)
			}
		}
	}
	if f := read(t, podFile); f != fmt.Sprint(300*mi) || len(rep.reports) > 0 {
		t.Errorf("after repeated passes: pod memory.swap.max = %s, reports %+v; want 300Mi and none", f, rep.reports)
	}
}

// While the hook changes a container's records and applies them (under
// hookstate.Lock), the records may already say what the cgroup does not
// yet hold: the verifier does not take that for drift, and writes nothing.
func TestCheckWhileTheHookWrites(t *testing.T) {
	n := newNode(t, 2, 100*mi)
	write(t, n.file, fmt.Sprint(100*mi)+"\n")
	rep := &fakeReporter{}
	v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: rep, LockWait: time.Nanosecond}
	ctx := context.Background()

	// The hook of a second claim, half-way: its share is recorded, the
	// container's sum not yet written.
	unlock, err := hookstate.Lock(n.stateDir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := hookstate.Record(filepath.Join(n.stateDir, ctrID), hookstate.ShareKey(claimB, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 200 * mi}}); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Check(ctx, ctrID, "update"); got != Busy || err != nil {
		t.Errorf("Check while the hook writes = %s, %v; want busy", got, err)
	}
	if sum, err := v.CheckAll(ctx, "interval", time.Minute); sum != (Summary{Busy: 1}) || err != nil {
		t.Errorf("CheckAll while the hook writes = %+v, %v; want one busy", sum, err)
	}
	if f := read(t, n.file); f != fmt.Sprint(100*mi) || len(rep.reports) > 0 {
		t.Errorf("while the hook writes: memory.swap.max = %s, reports %+v; want untouched, none", f, rep.reports)
	}
	// The hook applies the sum and lets go.
	write(t, n.file, fmt.Sprint(300*mi)+"\n")
	unlock()
	if got, err := v.Check(ctx, ctrID, "update"); got != Held || err != nil || len(rep.reports) > 0 {
		t.Errorf("Check after the hook = %s, %v, reports %+v; want held, none", got, err, rep.reports)
	}
}

// With crun's systemd driver the container's process is in its scope's
// "container" subgroup and the scope bounds it: a scope that systemd set
// back to the kubelet's 0 (its MemorySwapMax, on a daemon-reload) lets
// the container swap nothing although the subgroup holds the limit. The
// verifier holds both.
func TestCheckCrunScope(t *testing.T) {
	const scope = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podx.slice/crio-0123456789abcdef.scope"
	for _, tc := range []struct {
		name            string
		scope, subgroup string // before the check
		wantReports     int
	}{
		{name: "both held", scope: "67108864", subgroup: "67108864"},
		{name: "scope reset to the kubelet's 0", scope: "0", subgroup: "67108864", wantReports: 1},
		{name: "both reset", scope: "0", subgroup: "0", wantReports: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stateDir, root := t.TempDir(), t.TempDir()
			dir := filepath.Join(stateDir, ctrID)
			c := hookstate.Container{ID: ctrID, CgroupVersion: 2, CgroupGroup: scope + "/container", OuterCgroupGroup: scope,
				Namespace: "ns", Pod: "p", PodUID: podUID, Name: "worker"}
			if err := hookstate.WriteContainer(dir, c); err != nil {
				t.Fatal(err)
			}
			if err := hookstate.Record(dir, hookstate.ShareKey(claimA, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 64 * mi}}); err != nil {
				t.Fatal(err)
			}
			scopeFile, subFile := filepath.Join(root, scope, "memory.swap.max"), filepath.Join(root, scope, "container", "memory.swap.max")
			write(t, scopeFile, tc.scope+"\n")
			write(t, subFile, tc.subgroup+"\n")
			rep := &fakeReporter{}
			v := &Verifier{StateDir: stateDir, CgroupRoot: root, Reporter: rep}
			want := Held
			if tc.wantReports > 0 {
				want = Restored
			}
			if got, err := v.Check(context.Background(), ctrID, "test"); err != nil || got != want {
				t.Fatalf("Check = %s, %v; want %s", got, err, want)
			}
			if s, c := read(t, scopeFile), read(t, subFile); s != "67108864" || c != "67108864" {
				t.Errorf("scope %s, subgroup %s; want both 67108864", s, c)
			}
			if len(rep.reports) != tc.wantReports {
				t.Errorf("reports %+v, want %d", rep.reports, tc.wantReports)
			}
		})
	}
}

// kernelV1 writes a v1 limit as the kernel takes it: memory+swap below
// the cgroup's memory+swap usage is refused (EBUSY; reclaim cannot swap
// its way there). writes counts the calls.
type kernelV1 struct {
	writes int
}

func (k *kernelV1) write(t cgroupswap.Target, s swapsettings.Settings) error {
	k.writes++
	dir := filepath.Join(t.Root, "memory", t.Group)
	num := func(name string) int64 {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		return v
	}
	if memsw := num("memory.limit_in_bytes") + s.LimitBytes; num("memory.memsw.usage_in_bytes") > memsw {
		file := filepath.Join(dir, "memory.memsw.limit_in_bytes")
		return fmt.Errorf("container %s: set %s to %d: %w", t.Container, file, memsw, &os.PathError{Op: "write", Path: file, Err: syscall.EBUSY})
	}
	return cgroupswap.Apply(t, s)
}

// TestOverGrantAfterAMemoryDecrease (cgroup v1): a resize lowered the
// container's memory limit from 128Mi to 64Mi while it had memory swapped
// out; memory+swap stayed at 128Mi + the claim's 100Mi, so the container
// may swap 164Mi, and the kernel refuses to lower memory+swap below the
// 200Mi it uses. The verifier reports it once (NotRestored), writes it
// again 5 times on the schedule (30 s, 1, 2, 4, 8 minutes), then only
// reads it; once the usage fits, it writes it back (Restored).
func TestOverGrantAfterAMemoryDecrease(t *testing.T) {
	n := newNode(t, 1, 100*mi)
	dir := filepath.Join(n.cgroupRoot, "memory", group)
	write(t, filepath.Join(dir, "memory.limit_in_bytes"), fmt.Sprint(64*mi))
	write(t, n.file, fmt.Sprint(228*mi))
	write(t, filepath.Join(dir, "memory.memsw.usage_in_bytes"), fmt.Sprint(200*mi))
	rep := &fakeReporter{}
	kernel := &kernelV1{}
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: rep, Clock: clk, write: kernel.write}
	ctx := context.Background()

	sum, err := v.CheckAll(ctx, "interval", time.Minute)
	if sum != (Summary{Failed: 1}) || !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("first pass %+v, %v; want one failed with EBUSY", sum, err)
	}
	if len(rep.reports) != 1 || rep.reports[0].still || rep.reports[0].found != 164*mi || rep.reports[0].want != 100*mi || !errors.Is(rep.reports[0].err, syscall.EBUSY) {
		t.Fatalf("reports %+v, want one NotRestored of 164Mi found, 100Mi wanted, EBUSY", rep.reports)
	}
	// Half an hour of passes every 10 s, each a moment early (a ticker
	// measures from the last pass's start, the write came later in it).
	var writesAt []time.Duration
	for at := 10*time.Second - 20*time.Millisecond; at <= 30*time.Minute; at += 10 * time.Second {
		clk.SetTime(start.Add(at))
		before := kernel.writes
		sum, err := v.CheckAll(ctx, "interval", time.Minute)
		if sum != (Summary{NotHeld: 1}) || err != nil {
			t.Fatalf("pass at %v: %+v, %v; want one not held, no error", at, sum, err)
		}
		if kernel.writes > before {
			writesAt = append(writesAt, at)
		}
	}
	early := 20 * time.Millisecond
	want := []time.Duration{30*time.Second - early, 90*time.Second - early, 210*time.Second - early, 450*time.Second - early, 930*time.Second - early}
	if !slices.Equal(writesAt, want) {
		t.Errorf("writes again at %v, want at %v (then none)", writesAt, want)
	}
	notRestored, still := 0, 0
	for _, r := range rep.reports {
		switch {
		case r.still:
			still++
		case !r.restored && !r.cleared:
			notRestored++
		}
	}
	if notRestored != 1 || still != MaxRetries || rep.reports[len(rep.reports)-1].attempts != 1+MaxRetries {
		t.Errorf("reports %+v: want one NotRestored, then %d StillNotRestored up to %d attempts", rep.reports, MaxRetries, 1+MaxRetries)
	}
	// The container frees memory: its usage fits, and the next pass
	// writes the limit back.
	rep.reports = nil
	write(t, filepath.Join(dir, "memory.memsw.usage_in_bytes"), fmt.Sprint(150*mi))
	clk.SetTime(start.Add(30*time.Minute + 10*time.Second))
	if sum, err := v.CheckAll(ctx, "interval", time.Minute); sum != (Summary{Restored: 1}) || err != nil {
		t.Fatalf("after the usage fell: %+v, %v; want one restored", sum, err)
	}
	if f := read(t, n.file); f != fmt.Sprint(164*mi) {
		t.Errorf("memsw = %s, want 64Mi + 100Mi", f)
	}
	if len(rep.reports) != 1 || !rep.reports[0].restored || rep.reports[0].attempts != 1+MaxRetries {
		t.Errorf("reports %+v, want one Restored", rep.reports)
	}
	if sum, _ := v.CheckAll(ctx, "interval", time.Minute); sum != (Summary{Held: 1}) {
		t.Errorf("then %+v, want held", sum)
	}
}

// A limit not held is let go when it holds again without the verifier
// (a later resize wrote it), or when its container is gone.
func TestNotHeldCleared(t *testing.T) {
	for _, how := range []string{"written by someone else", "container gone"} {
		t.Run(how, func(t *testing.T) {
			n := newNode(t, 2, 64*mi)
			write(t, n.file, "0\n")
			rep := &fakeReporter{}
			v := &Verifier{StateDir: n.stateDir, CgroupRoot: n.cgroupRoot, Reporter: rep,
				write: func(cgroupswap.Target, swapsettings.Settings) error { return syscall.EACCES }}
			ctx := context.Background()
			if got, _ := v.Check(ctx, ctrID, "update"); got != Failed {
				t.Fatalf("first check %s, want failed", got)
			}
			if got, _ := v.Check(ctx, ctrID, "update"); got != NotHeld {
				t.Fatalf("second check %s, want not held (no write before 30 s)", got)
			}
			switch how {
			case "written by someone else":
				write(t, n.file, fmt.Sprint(64*mi))
				if sum, err := v.CheckAll(ctx, "interval", time.Minute); sum != (Summary{Held: 1}) || err != nil {
					t.Fatalf("pass %+v, %v; want held", sum, err)
				}
			default:
				if err := hookstate.Remove(n.stateDir, ctrID); err != nil {
					t.Fatal(err)
				}
				if sum, err := v.CheckAll(ctx, "interval", time.Minute); sum != (Summary{}) || err != nil {
					t.Fatalf("pass %+v, %v; want nothing", sum, err)
				}
			}
			last := rep.reports[len(rep.reports)-1]
			if len(rep.reports) != 2 || !last.cleared {
				t.Errorf("reports %+v, want NotRestored, then Cleared", rep.reports)
			}
			if len(v.notHeld) != 0 {
				t.Errorf("still tracked: %v", v.notHeld)
			}
		})
	}
}

// CheckPods, after an update of a pod's own cgroup, holds that pod's
// budget (systemd wrote max there) and its containers' limits, and touches
// no other pod's; given several pods, it holds each.
func TestCheckPods(t *testing.T) {
	const otherPod = "dddddddd-0000-4000-8000-000000000004"
	root, stateDir := t.TempDir(), t.TempDir()
	pods := map[string]string{podUID: "/kubepods.slice/kubepods-pod1.slice", otherPod: "/kubepods.slice/kubepods-pod2.slice"}
	for id, uid := range map[string]string{ctrID: podUID, otherCtr: otherPod} {
		g := pods[uid] + "/cri-containerd-" + id + ".scope"
		dir := filepath.Join(stateDir, id)
		c := hookstate.Container{ID: id, CgroupVersion: 2, CgroupGroup: g, PodCgroupGroup: pods[uid], Namespace: "ns", Pod: id, PodUID: uid, Name: "worker"}
		if err := hookstate.WriteContainer(dir, c); err != nil {
			t.Fatal(err)
		}
		if err := hookstate.Record(dir, hookstate.ShareKey(claimA, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 50 * mi}, PodLimitBytes: ptr.To(100 * mi)}); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, g, "memory.swap.max"), fmt.Sprint(50*mi)+"\n")
		write(t, filepath.Join(root, pods[uid], "memory.swap.max"), "max\n") // the kubelet's pod update, through systemd
	}
	rep := &fakeReporter{}
	v := &Verifier{StateDir: stateDir, CgroupRoot: root, Reporter: rep}
	sum, err := v.CheckPods(context.Background(), []string{podUID}, "pod-update")
	if err != nil || sum != (Summary{Restored: 1}) {
		t.Fatalf("CheckPods = %+v, %v; want one container's pod budget restored", sum, err)
	}
	if f := read(t, filepath.Join(root, pods[podUID], "memory.swap.max")); f != fmt.Sprint(100*mi) {
		t.Errorf("the pod's memory.swap.max = %s, want %d", f, 100*mi)
	}
	if f := read(t, filepath.Join(root, pods[otherPod], "memory.swap.max")); f != "max" {
		t.Errorf("the other pod's memory.swap.max = %s, want it untouched", f)
	}
	if len(rep.reports) != 1 || !rep.reports[0].pod || rep.reports[0].trigger != "pod-update" {
		t.Errorf("reports %+v, want one restore of the pod's budget", rep.reports)
	}
	sum, err = v.CheckPods(context.Background(), []string{podUID, otherPod}, "pod-update")
	if err != nil || sum != (Summary{Held: 1, Restored: 1}) {
		t.Fatalf("CheckPods of both pods = %+v, %v; want the first held and the other's budget restored", sum, err)
	}
	if f := read(t, filepath.Join(root, pods[otherPod], "memory.swap.max")); f != fmt.Sprint(100*mi) {
		t.Errorf("the other pod's memory.swap.max = %s, want %d", f, 100*mi)
	}
	if _, err := v.CheckPods(context.Background(), []string{podUID, ""}, "pod-update"); err == nil {
		t.Error("CheckPods with an empty pod UID did not fail")
	}
	if sum, err := v.CheckPods(context.Background(), nil, "pod-update"); err != nil || sum != (Summary{}) {
		t.Errorf("CheckPods of no pods = %+v, %v; want nothing checked", sum, err)
	}
}

// A pass over many containers lets a hook in as soon as it waits, between
// two containers, instead of after the whole pass: the hook's container
// start waits on the lock (with a bound of its own), and a pass on a busy
// node can take longer than that bound. The containers it did not reach
// are busy until the next pass.
func TestCheckAllLetsAWaitingHookIn(t *testing.T) {
	root, stateDir := t.TempDir(), t.TempDir()
	write(t, filepath.Join(root, "cgroup.controllers"), "memory\n")
	const containers = 20
	for i := range containers {
		id := fmt.Sprintf("%016x", i+1)
		g := fmt.Sprintf("/kubepods.slice/kubepods-pod%d.slice/cri-containerd-%s.scope", i, id)
		c := hookstate.Container{ID: id, CgroupVersion: 2, CgroupGroup: g, Namespace: "ns", Pod: id, PodUID: fmt.Sprintf("cccccccc-0000-4000-8000-%012d", i), Name: "worker"}
		if err := hookstate.WriteContainer(filepath.Join(stateDir, id), c); err != nil {
			t.Fatal(err)
		}
		if err := hookstate.Record(filepath.Join(stateDir, id), hookstate.ShareKey(claimA, 0), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: 50 * mi}}); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, g, "memory.swap.max"), "max\n") // drifted: every check writes
	}
	// A slow kernel: each write takes 50 ms, so the whole pass a second.
	started := make(chan struct{}, containers)
	slow := func(tg cgroupswap.Target, s swapsettings.Settings) error {
		started <- struct{}{}
		time.Sleep(50 * time.Millisecond)
		return cgroupswap.Apply(tg, s)
	}
	v := &Verifier{StateDir: stateDir, CgroupRoot: root, Reporter: &fakeReporter{}, write: slow}
	done := make(chan Summary, 1)
	go func() {
		sum, err := v.CheckAll(context.Background(), "interval", time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- sum
	}()
	<-started // the pass holds the lock and is writing
	begin := time.Now()
	unlock, err := hookstate.Lock(stateDir, 300*time.Millisecond)
	if err != nil {
		t.Fatalf("the hook waited for the whole pass (20 writes of 50 ms): %v", err)
	}
	waited := time.Since(begin)
	unlock()
	sum := <-done
	if sum.Busy == 0 || sum.Restored+sum.Busy != containers {
		t.Errorf("CheckAll = %+v; want the containers after the hook's turn busy, the others restored", sum)
	}
	t.Logf("the hook waited %v; the pass restored %d and left %d busy", waited.Round(time.Millisecond), sum.Restored, sum.Busy)
}
