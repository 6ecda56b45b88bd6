package offload

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/swapsettings"
)

// node is a fake node for the loop: the hook's records in a state
// directory and each container's cgroup v2 files (regular files: a write
// to memory.reclaim stays there to be read back).
type node struct {
	t        testing.TB
	state    string
	cgroup   string
	prepared map[types.UID]types.NamespacedName
	now      time.Time
	reporter *recorder
}

func newFakeNode(t testing.TB) *node {
	base := t.TempDir()
	return &node{t: t, state: filepath.Join(base, "state"), cgroup: filepath.Join(base, "cgroup"),
		prepared: map[types.UID]types.NamespacedName{}, now: t0, reporter: &recorder{}}
}

func (n *node) Prepared() (map[types.UID]types.NamespacedName, error) {
	if n.prepared == nil {
		return nil, fmt.Errorf("checkpoint unreadable")
	}
	return n.prepared, nil
}

func (n *node) loop() *Loop {
	return &Loop{StateDir: n.state, CgroupRoot: n.cgroup, Claims: n, Reporter: n.reporter, Params: DefaultParams(),
		Interval: interval, Now: func() time.Time { return n.now }}
}

// share is one claim's share of a container.
type share struct {
	claim  string // UID
	limit  int64
	budget *int32 // hundredths of a percent; nil: no offload
}

// container records a container with its shares and makes its cgroup: 1
// GiB in use, no swap, no stall yet.
func (n *node) container(id string, shares ...share) string {
	n.t.Helper()
	dir := filepath.Join(n.state, id)
	group := "/kubepods.slice/pod-" + id + "/" + id
	if err := hookstate.WriteContainer(dir, hookstate.Container{ID: id, CgroupVersion: 2, CgroupGroup: group, Namespace: "ns", Pod: "pod-" + id, Name: "worker"}); err != nil {
		n.t.Fatal(err)
	}
	for i, s := range shares {
		if err := hookstate.Record(dir, hookstate.ShareKey(s.claim, i), hookstate.Share{Settings: swapsettings.Settings{LimitBytes: s.limit, OffloadMaxStall: s.budget}}); err != nil {
			n.t.Fatal(err)
		}
	}
	cg := filepath.Join(n.cgroup, group)
	n.set(cg, filePressure, "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	n.set(cg, fileCurrent, strconv.FormatInt(1024*mi, 10))
	n.set(cg, fileSwapCurrent, "0")
	n.set(cg, fileReclaim, "")
	return cg
}

func (n *node) set(dir, file, content string) {
	n.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// stall adds to a cgroup's "some" total.
func (n *node) stall(cg string, d time.Duration) {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join(cg, filePressure))
	if err != nil {
		n.t.Fatal(err)
	}
	total, err := someTotal(data)
	if err != nil {
		n.t.Fatal(err)
	}
	n.set(cg, filePressure, fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", total+uint64(d.Microseconds())))
}

// reclaimed returns what was last written to a cgroup's memory.reclaim and
// empties it.
func (n *node) reclaimed(cg string) string {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join(cg, fileReclaim))
	if err != nil {
		n.t.Fatal(err)
	}
	n.set(cg, fileReclaim, "")
	return string(data)
}

// pass advances the clock one interval and runs a pass.
func (n *node) pass(ctx context.Context, l *Loop) PassReport {
	n.now = n.now.Add(interval)
	l.Pass(ctx)
	return n.reporter.last()
}

type recorder struct {
	mu       sync.Mutex
	passes   []PassReport
	episodes []string
}

func (r *recorder) Pass(_ context.Context, p PassReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passes = append(r.passes, p)
}

func (r *recorder) BackedOff(_ context.Context, c hookstate.Container, claims []types.NamespacedName, stallPPM, budgetPPM int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.episodes = append(r.episodes, fmt.Sprintf("%s %v %d>%d", c.ID, claims, stallPPM, budgetPPM))
}

func (r *recorder) last() PassReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.passes) == 0 {
		return PassReport{}
	}
	return r.passes[len(r.passes)-1]
}

const (
	claimA = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	claimB = "0b5e7c1a-1111-4222-8333-444455556666"
	step1G = "10735616" // 1 % of 1 GiB, page-aligned
)

// TestLoopOffloadsWithinTheBudget: a container of a prepared offload claim
// is sampled once, then reclaimed from while its stall is within the
// budget, paused (and its pod told, once) above it; the claim's figures
// say so.
func TestLoopOffloadsWithinTheBudget(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := newFakeNode(t)
	n.prepared[claimA] = types.NamespacedName{Namespace: "ns", Name: "offloaded"}
	cg := n.container("c1", share{claim: claimA, limit: 512 * mi, budget: ptr.To[int32](50)})
	l := n.loop()

	if r := n.pass(ctx, l); r.Containers != 1 || n.reclaimed(cg) != "" || len(r.Claims) != 1 || r.Claims[0].Reason != ReasonSampling {
		t.Fatalf("first pass: %+v; it must only sample", r)
	}
	r := n.pass(ctx, l)
	if got := n.reclaimed(cg); !strings.HasPrefix(got, step1G) {
		t.Errorf("second pass wrote %q to memory.reclaim, want %s bytes", got, step1G)
	}
	want := ClaimFigures{UID: claimA, Claim: n.prepared[claimA], Containers: 1, ReclaimedBytes: 10735616, SwapPeakBytes: -1, StallPPM: 0, BudgetPPM: 5000, Reason: ReasonOffloading}
	if len(r.Claims) != 1 || r.Claims[0] != want || r.ReclaimedBytes != 10735616 {
		t.Errorf("second pass = %+v, want the claim's figures %+v", r, want)
	}

	// 60 ms of stall in 6 s is 1 %, above the 0.5 % budget.
	n.stall(cg, 60*time.Millisecond)
	n.set(cg, fileSwapCurrent, strconv.FormatInt(10*mi, 10))
	n.set(cg, fileSwapPeak, strconv.FormatInt(12*mi, 10))
	r = n.pass(ctx, l)
	if got := n.reclaimed(cg); got != "" {
		t.Errorf("over the budget, the loop wrote %q", got)
	}
	if f := r.Claims[0]; f.Reason != ReasonOverBudget || f.StallPPM != 10000 || f.SwapBytes != 10*mi || f.SwapPeakBytes != 12*mi || f.ReclaimedBytes != 10735616 {
		t.Errorf("over the budget: %+v", f)
	}
	n.stall(cg, 60*time.Millisecond)
	n.pass(ctx, l)
	if want := []string{"c1 [ns/offloaded] 10000>5000"}; !equalStrings(n.reporter.episodes, want) {
		t.Errorf("episodes told: %q, want %q", n.reporter.episodes, want)
	}
	// Within the budget again: offloading resumes.
	n.pass(ctx, l)
	if got := n.reclaimed(cg); got == "" {
		t.Error("within the budget again, the loop wrote nothing")
	}
}

// TestLoopOnlyPreparedOffloadClaims: the loop never touches a container
// without an offload share, nor one whose offload claim is no longer
// prepared (its checkpoint entry gone), nor any while the checkpoint
// cannot be read.
func TestLoopOnlyPreparedOffloadClaims(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := newFakeNode(t)
	n.prepared[claimA] = types.NamespacedName{Namespace: "ns", Name: "a"}
	n.prepared[claimB] = types.NamespacedName{Namespace: "ns", Name: "b"}
	plain := n.container("plain", share{claim: claimB, limit: 512 * mi})
	off := n.container("off", share{claim: claimA, limit: 512 * mi, budget: ptr.To[int32](50)}, share{claim: claimB, limit: 256 * mi})
	l := n.loop()
	n.pass(ctx, l)
	r := n.pass(ctx, l)
	if r.Containers != 1 || n.reclaimed(plain) != "" || n.reclaimed(off) == "" {
		t.Fatalf("pass = %+v; the loop must drive the offload container only", r)
	}
	if len(r.Claims) != 1 || r.Claims[0].UID != claimA {
		t.Errorf("claims reported: %+v, want the offload claim only", r.Claims)
	}

	delete(n.prepared, claimA) // unprepared
	r = n.pass(ctx, l)
	if got := n.reclaimed(off); got != "" || r.Containers != 0 || len(r.Claims) != 0 {
		t.Errorf("after its claim was unprepared the loop wrote %q (pass %+v)", got, r)
	}
	n.prepared[claimA] = types.NamespacedName{Namespace: "ns", Name: "a"}
	saved := n.prepared
	n.prepared = nil // the checkpoint cannot be read
	before := len(n.reporter.passes)
	n.pass(ctx, l)
	if got := n.reclaimed(off); got != "" || len(n.reporter.passes) != before {
		t.Errorf("without the checkpoint the loop wrote %q", got)
	}
	n.prepared = saved
}

// TestLoopSwapCeiling: the loop never takes a container's swap past 95 %
// of its offload claims' swap.
func TestLoopSwapCeiling(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := newFakeNode(t)
	n.prepared[claimA] = types.NamespacedName{Namespace: "ns", Name: "a"}
	cg := n.container("c1", share{claim: claimA, limit: 100 * mi, budget: ptr.To[int32](50)})
	l := n.loop()
	n.pass(ctx, l)
	n.set(cg, fileSwapCurrent, strconv.FormatInt(94*mi, 10))
	n.pass(ctx, l)
	if got := n.reclaimed(cg); !strings.HasPrefix(got, "1048576") {
		t.Errorf("1 MiB below the ceiling the loop wrote %q, want 1048576", got)
	}
	n.set(cg, fileSwapCurrent, strconv.FormatInt(95*mi, 10))
	if r := n.pass(ctx, l); n.reclaimed(cg) != "" || r.Claims[0].Reason != ReasonSwapLimit {
		t.Errorf("at the ceiling: %+v", r.Claims)
	}
}

// TestLoopPassBound: a pass reclaims at most MaxPassBytes; the containers
// past it go first in the next pass.
func TestLoopPassBound(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := newFakeNode(t)
	n.prepared[claimA] = types.NamespacedName{Namespace: "ns", Name: "a"}
	var cgs []string
	for i := range 3 {
		cgs = append(cgs, n.container(fmt.Sprintf("c%d", i), share{claim: claimA, limit: 512 * mi, budget: ptr.To[int32](50)}))
	}
	l := n.loop()
	l.MaxPassBytes = 25 * mi // two steps of 10.2 MiB
	n.pass(ctx, l)
	r := n.pass(ctx, l)
	wrote := func() (w []int) {
		for i, cg := range cgs {
			if n.reclaimed(cg) != "" {
				w = append(w, i)
			}
		}
		return w
	}
	if got := wrote(); r.Deferred != 1 || !equalInts(got, []int{0, 1}) {
		t.Errorf("first pass with steps: wrote %v, deferred %d; want c0 and c1, one deferred", got, r.Deferred)
	}
	r = n.pass(ctx, l)
	if got := wrote(); r.Deferred != 1 || !equalInts(got, []int{0, 2}) {
		t.Errorf("next pass: wrote %v, deferred %d; want c2 first, then c0", got, r.Deferred)
	}
}

// TestLoopExhaustedAndGone: EAGAIN rests the container; a container whose
// cgroup is gone is dropped.
func TestLoopExhaustedAndGone(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := newFakeNode(t)
	n.prepared[claimA] = types.NamespacedName{Namespace: "ns", Name: "a"}
	cg := n.container("c1", share{claim: claimA, limit: 512 * mi, budget: ptr.To[int32](50)})
	l := n.loop()
	var writes []string
	l.reclaimer.write = func(path, value string) error {
		writes = append(writes, value)
		if value[0] == '0' {
			return nil // the probe
		}
		return fmt.Errorf("write: %w", syscall.EAGAIN)
	}
	n.pass(ctx, l)
	r := n.pass(ctx, l)
	if r.Exhausted != 1 || r.ReclaimedBytes != 0 || r.Claims[0].Reason != ReasonExhausted || r.Claims[0].ReclaimedBytes != 0 {
		t.Errorf("an exhausted reclaim: %+v", r)
	}
	for range DefaultParams().ExhaustedIntervals {
		n.pass(ctx, l)
	}
	if len(writes) != 2 {
		t.Errorf("writes while resting: %q, want the probe and one step", writes)
	}
	if err := os.RemoveAll(cg); err != nil {
		t.Fatal(err)
	}
	if r := n.pass(ctx, l); len(r.Claims) != 0 || len(l.containers) != 0 {
		t.Errorf("a gone cgroup: %+v, tracked %d", r, len(l.containers))
	}
}

// TestReclaimerProbe: the strongest argument the kernel takes is used.
func TestReclaimerProbe(t *testing.T) {
	for _, tc := range []struct {
		refused []string
		want    string
	}{
		{want: " swappiness=max"},
		{refused: []string{"max"}, want: " swappiness=200"},
		{refused: []string{"max", "200"}, want: ""},
	} {
		var writes []string
		rc := reclaimer{write: func(path, value string) error {
			for _, r := range tc.refused {
				if strings.HasSuffix(value, "swappiness="+r) {
					return fmt.Errorf("write %q: %w", value, syscall.EINVAL)
				}
			}
			writes = append(writes, value)
			return nil
		}}
		if err := rc.reclaim("/cg", 4096); err != nil {
			t.Fatal(err)
		}
		if rc.Argument() != tc.want || writes[len(writes)-1] != "4096"+tc.want {
			t.Errorf("refusing %v: argument %q, writes %q; want %q", tc.refused, rc.Argument(), writes, tc.want)
		}
	}
	rc := reclaimer{write: func(path, value string) error { return fmt.Errorf("write: %w", syscall.ENOENT) }}
	if err := rc.reclaim("/cg", 4096); err == nil || rc.probed {
		t.Errorf("a probe of a gone cgroup: %v, probed %v", err, rc.probed)
	}
}

func TestSomeTotal(t *testing.T) {
	for in, want := range map[string]uint64{
		"some avg10=0.00 avg60=0.00 avg300=0.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n": 123,
		"full avg10=0.00 total=7\nsome total=18446744073709551615 avg10=1.00":                                18446744073709551615,
	} {
		if got, err := someTotal([]byte(in)); err != nil || got != want {
			t.Errorf("someTotal(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "full total=1\n", "some avg10=0.00\n", "some total=-1\n", "some total=x\n", "something total=1\n"} {
		if got, err := someTotal([]byte(bad)); err == nil {
			t.Errorf("someTotal(%q) = %d, want an error", bad, got)
		}
	}
}

func equalStrings(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

func equalInts(a, b []int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// BenchmarkPass is one pass of the loop over fake cgroup files (on the
// disk or tmpfs of the temp dir): 100 opted-in containers, each read
// (records checked by their directory's time, memory.pressure,
// memory.current, memory.swap.current, memory.swap.peak) and a step
// written to each; and 110 containers without offload, which the loop
// only looks at (a stat of each record directory). ns/op is one pass,
// ns/container its share per container.
func BenchmarkPass(b *testing.B) {
	for _, bc := range []struct {
		name    string
		offload bool
		n       int
	}{{"opted-in=100", true, 100}, {"others=110", false, 110}} {
		b.Run(bc.name, func(b *testing.B) {
			_, ctx := ktesting.NewTestContext(b)
			n := newFakeNode(b)
			for i := range bc.n {
				uid := fmt.Sprintf("7c9e6679-7425-40de-944b-%012d", i)
				n.prepared[types.UID(uid)] = types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("claim-%d", i)}
				s := share{claim: uid, limit: 512 * mi}
				if bc.offload {
					s.budget = ptr.To[int32](50)
				}
				cg := n.container(fmt.Sprintf("%064x", i), s)
				n.set(cg, fileSwapPeak, "0")
			}
			l := n.loop()
			n.pass(ctx, l)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				n.now = n.now.Add(interval)
				l.Pass(ctx)
			}
			b.StopTimer()
			want := 0
			if bc.offload {
				want = bc.n
			}
			if r := n.reporter.last(); r.Containers != want || bc.offload && r.ReclaimedBytes == 0 {
				b.Fatalf("the last pass drove %d containers and reclaimed %d bytes", r.Containers, r.ReclaimedBytes)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(bc.n), "ns/container")
		})
	}
}

// TestReadRefaults: read takes memory.stat's workingset_refault_anon, and
// -1 when the file or the key is missing or not a count.
func TestReadRefaults(t *testing.T) {
	for _, tc := range []struct {
		name, stat string // "" : no memory.stat
		want       int64
	}{
		{"a count", "anon 4096\nworkingset_refault_anon 42\nworkingset_refault_file 7\n", 42},
		{"no memory.stat", "", -1},
		{"no key", "anon 4096\nworkingset_refault_file 7\n", -1},
		{"a prefix of another key only", "workingset_refault_anonymous 3\n", -1},
		{"not a count", "workingset_refault_anon -3\n", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{filePressure: "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n", fileCurrent: "100\n", fileSwapCurrent: "0\n"}
			if tc.stat != "" {
				files[fileStat] = tc.stat
			}
			for name, content := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r, _, err := read(dir, time.Now(), make([]byte, maxFileBytes+1))
			if err != nil {
				t.Fatal(err)
			}
			if r.RefaultedPages != tc.want {
				t.Errorf("RefaultedPages = %d, want %d", r.RefaultedPages, tc.want)
			}
		})
	}
}
