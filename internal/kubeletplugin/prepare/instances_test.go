package prepare

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/testprocess"
)

// These tests run two plugin instances on one node, as a rolling update of
// the DaemonSet does: two Managers, each with its own checkpoint.Store and
// CDI writer, on the same checkpoint file and CDI directory.

func claimObj(uid types.UID, name string) kubeletplugin.NamespacedObject {
	return kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, UID: uid}
}

func TestTwoInstancesShareTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	one, two := newEnvIn(t, dir), newEnvIn(t, dir)
	ctx := testContext(t)
	if r := one.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidA, "a", mi)})[uidA]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := two.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidB, "b", 2*mi)})[uidB]; r.Err != nil {
		t.Fatal(r.Err)
	}
	third := checkpoint.NewStore(filepath.Join(dir, "checkpoint.json"), boot)
	cp, _, err := third.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.Claims) != 2 {
		t.Fatalf("checkpoint after prepares on two instances holds %d claims, want 2: %v", len(cp.Claims), cp.Claims)
	}
	for _, e := range []*env{one, two} {
		if n, b, err := e.m.Prepared(); n != 2 || b != 3*mi || err != nil {
			t.Errorf("Prepared() = %d, %d, %v; want both instances' claims", n, b, err)
		}
	}

	// The kubelet may unprepare on the other instance.
	if err := two.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{claimObj(uidA, "a")})[uidA]; err != nil {
		t.Fatal(err)
	}
	cp, _, err = third.Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cp.Claims[uidA]; ok || len(cp.Claims) != 1 {
		t.Errorf("after unprepare of A on the other instance the checkpoint holds %v, want only B", cp.Claims)
	}
	if files := one.specFiles(); len(files) != 1 || files[0] != cdiSpecFile(uidB) {
		t.Errorf("spec files = %v, want only B's", files)
	}

	// A claim prepared on one instance is prepared on the other: its spec
	// survives a failed repeat there, since the checkpoint on disk says it
	// was prepared before.
	two.saver.fail = true
	if r := two.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidB, "b", 2*mi)})[uidB]; r.Err == nil {
		t.Fatal("want an error")
	}
	if files := one.specFiles(); len(files) != 1 {
		t.Errorf("spec of the claim prepared on the other instance was removed: %v", files)
	}
}

func cdiSpecFile(uid string) string {
	return "dra.swap-swap_" + uid + ".json"
}

func TestPrepareBatchSaveFailure(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	old := newClaim(uidA, "a", mi)
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{old})[uidA]; r.Err != nil {
		t.Fatal(r.Err)
	}
	e.saver.fail = true
	res := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{old, newClaim(uidB, "b", mi)})
	for _, uid := range []types.UID{uidA, uidB} {
		if err := res[uid].Err; err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), string(uid)) {
			t.Errorf("claim %s: error %v, want the save error naming the claim", uid, err)
		}
	}
	if files := e.specFiles(); len(files) != 1 || files[0] != cdiSpecFile(uidA) {
		t.Errorf("spec files = %v, want only the earlier claim's", files)
	}
	if cp := e.checkpointed(); len(cp) != 1 {
		t.Errorf("checkpoint = %v, want only the earlier claim", cp)
	}
}

func TestUnusableCheckpointFailsCalls(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	// Another instance of another release wrote a format this one cannot
	// read: calls fail loudly and the file stays for its writer.
	content := `{"version":2,"bootID":"` + boot + `","claims":{}}`
	if err := os.WriteFile(e.store.Path(), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidA, "a", mi)})[uidA]; r.Err == nil || !strings.Contains(r.Err.Error(), "format version 2") {
		t.Errorf("prepare error = %v", r.Err)
	}
	if files := e.specFiles(); len(files) != 0 {
		t.Errorf("spec files = %v", files)
	}
	if err := e.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{claimObj(uidA, "a")})[uidA]; err == nil || !strings.Contains(err.Error(), "format version 2") {
		t.Errorf("unprepare error = %v", err)
	}
	if _, _, err := e.m.Prepared(); err == nil {
		t.Error("Prepared() read an unusable checkpoint")
	}
	if data, _ := os.ReadFile(e.store.Path()); string(data) != content {
		t.Errorf("checkpoint changed to %s", data)
	}
}

func TestConcurrentInstances(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	const instances, claims = 3, 20
	var wg sync.WaitGroup
	errs := make(chan error, instances*claims)
	for i := range instances {
		e := newEnvIn(t, dir)
		wg.Go(func() {
			for j := range claims {
				uid := fmt.Sprintf("00000000-0000-4000-8000-%06x%06x", i, j)
				errs <- e.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uid, "c"+uid[24:], mi)})[types.UID(uid)].Err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	assertPrepared(t, newEnvIn(t, dir), instances*claims)
}

func assertPrepared(t *testing.T, e *env, want int) {
	t.Helper()
	if n := len(e.checkpointed()); n != want {
		t.Errorf("checkpoint holds %d claims, want %d", n, want)
	}
	if n := len(e.specFiles()); n != want {
		t.Errorf("%d spec files, want %d", n, want)
	}
}

// Environment of TestPrepareAcrossProcesses's child processes.
const (
	envHelperDir    = "PREPARE_TEST_HELPER_DIR"
	envHelperClaims = "PREPARE_TEST_HELPER_CLAIMS"
)

// TestPrepareAcrossProcesses runs two plugin instances as two processes
// (this test binary again), each preparing distinct claims at the same
// time on one checkpoint: every claim must end up in it. Then one instance
// unprepares them all.
func TestPrepareAcrossProcesses(t *testing.T) {
	if i, ok := testprocess.Child(); ok {
		prepareInChild(t, i)
		return
	}
	dir := t.TempDir()
	const processes, claims = 2, 40
	testprocess.Run(t, "TestPrepareAcrossProcesses", processes, func(int) []string {
		return []string{envHelperDir + "=" + dir, envHelperClaims + "=" + strconv.Itoa(claims)}
	})
	e := newEnvIn(t, dir)
	assertPrepared(t, e, processes*claims)

	var objs []kubeletplugin.NamespacedObject
	for uid, c := range e.checkpointed() {
		objs = append(objs, claimObj(uid, c.Name))
	}
	for uid, err := range e.m.Unprepare(testContext(t), objs) {
		if err != nil {
			t.Errorf("unprepare %s: %v", uid, err)
		}
	}
	assertPrepared(t, e, 0)
}

func prepareInChild(t *testing.T, instance int) {
	dir := os.Getenv(envHelperDir)
	n, err := strconv.Atoi(os.Getenv(envHelperClaims))
	if err != nil {
		t.Fatal(err)
	}
	testprocess.AwaitStart(t)
	e := newEnvIn(t, dir)
	ctx := testContext(t)
	for j := range n {
		uid := fmt.Sprintf("00000000-0000-4000-8000-%06x%06x", instance, j)
		if r := e.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uid, "c"+uid[24:], mi)})[types.UID(uid)]; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// TestRecordedTotals: after each prepare and unprepare, Options.Recorded
// gets what the checkpoint holds, claims of other instances included, and
// nothing when the checkpoint could not be saved.
func TestRecordedTotals(t *testing.T) {
	dir := t.TempDir()
	one, two := newEnvIn(t, dir), newEnvIn(t, dir)
	type recorded struct {
		claims int
		bytes  int64
	}
	var got []recorded
	two.recorded = func(claims int, limitBytes int64) { got = append(got, recorded{claims, limitBytes}) }
	ctx := testContext(t)
	if r := one.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidA, "a", mi)})[uidA]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := two.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidB, "b", 2*mi)})[uidB]; r.Err != nil {
		t.Fatal(r.Err)
	}
	two.saver.fail = true
	if r := two.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uidRecordedC, "c", 4*mi)})[uidRecordedC]; r.Err == nil {
		t.Fatal("prepare with a failing save succeeded")
	}
	two.saver.fail = false
	// Unprepare of a claim the checkpoint does not hold changes nothing,
	// and still reports what it holds.
	if err := two.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{claimObj(uidRecordedC, "c")})[uidRecordedC]; err != nil {
		t.Fatal(err)
	}
	if err := two.m.Unprepare(ctx, []kubeletplugin.NamespacedObject{claimObj(uidA, "a")})[uidA]; err != nil {
		t.Fatal(err)
	}
	want := []recorded{{2, 3 * mi}, {2, 3 * mi}, {1, 2 * mi}}
	if !slices.Equal(got, want) {
		t.Errorf("Recorded got %v, want %v", got, want)
	}
}

const uidRecordedC = "00000000-0000-4000-8000-00000000000c"

// countingStore counts the Updates that have been called.
type countingStore struct {
	CheckpointStore
	mu    sync.Mutex
	calls int
}

func (c *countingStore) Update(change func(*checkpoint.Checkpoint) error, undo func() error) error {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.CheckpointStore.Update(change, undo)
}

func (c *countingStore) called() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// TestConcurrentPreparesKeepTheOffer: the kubelet's calls for pods that
// start together (one claim each) wait while another instance holds the
// checkpoint's lock and are then committed together; each still sees the
// claims prepared before it, so the node's offer is never exceeded, and a
// refused claim leaves neither a spec nor an entry.
func TestConcurrentPreparesKeepTheOffer(t *testing.T) {
	const calls, fits = 12, 10
	e := newEnv(t)
	counting := &countingStore{CheckpointStore: e.saver}
	e.offer = fits * mi
	e.m = NewManager(Options{DriverName: "dra.swap", PoolName: node, Node: e, Observer: e}, e.writer, counting, e.pods)
	ctx := testContext(t)
	lock, err := os.OpenFile(e.store.LockPath(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		uid := fmt.Sprintf("00000000-0000-4000-8000-%012x", i)
		wg.Go(func() {
			errs[i] = e.m.Prepare(ctx, []*resourceapi.ResourceClaim{newClaim(uid, "c"+uid[24:], mi)})[types.UID(uid)].Err
		})
	}
	for counting.called() != calls {
		runtime.Gosched()
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	refused := 0
	for _, err := range errs {
		if err != nil {
			if !strings.Contains(err.Error(), "does not fit now") {
				t.Errorf("prepare failed: %v", err)
			}
			refused++
		}
	}
	if refused != calls-fits {
		t.Errorf("%d prepares refused, want %d", refused, calls-fits)
	}
	assertPrepared(t, e, fits)
}
