package checkpoint

import (
	"errors"
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
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/testprocess"
)

const (
	stale    = `{"version":1,"bootID":"old-boot","claims":{"old":{"namespace":"n","name":"c","swapBytes":1,"envBytes":1,"devices":[]}}}`
	unusable = `{"version":1,"bootID":"` + boot + `","cla`
)

func writeCheckpoint(t *testing.T, path, content string) {
	t.Helper()
	if content == "" {
		return
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func addClaim(uid types.UID) func(*Checkpoint) error {
	return func(cp *Checkpoint) error {
		cp.Claims[uid] = ClaimInfo{Namespace: "ns", Name: string(uid), LimitBytes: 1}
		return nil
	}
}

func TestUpdate(t *testing.T) {
	errChange := errors.New("change refused")
	tests := []struct {
		name       string
		content    string // "" means no file
		change     func(t *testing.T, path string) func(*Checkpoint) error
		wantClaims []types.UID // nil: the file is as it was
		wantErr    string
		wantUndo   bool
	}{
		{
			name:       "missing file",
			change:     func(*testing.T, string) func(*Checkpoint) error { return addClaim("new") },
			wantClaims: []types.UID{"new"},
		},
		{
			name:       "earlier boot reads as empty",
			content:    stale,
			change:     func(*testing.T, string) func(*Checkpoint) error { return addClaim("new") },
			wantClaims: []types.UID{"new"},
		},
		{
			name:    "change sees the file",
			content: `{"version":1,"bootID":"` + boot + `","claims":{"old":{"namespace":"n","name":"c","swapBytes":1,"envBytes":1,"devices":[]}}}`,
			change: func(t *testing.T, _ string) func(*Checkpoint) error {
				return func(cp *Checkpoint) error {
					if _, ok := cp.Claims["old"]; !ok {
						t.Errorf("change got %+v, want the claim on disk", cp)
					}
					return addClaim("new")(cp)
				}
			},
			wantClaims: []types.UID{"new", "old"},
		},
		{
			name:    "failed change saves nothing",
			content: stale,
			change: func(*testing.T, string) func(*Checkpoint) error {
				return func(cp *Checkpoint) error {
					_ = addClaim("new")(cp)
					return fmt.Errorf("claim x: %w", errChange)
				}
			},
			wantErr: "claim x: change refused",
		},
		{
			name:    "unusable file is left alone",
			content: unusable,
			change:  func(*testing.T, string) func(*Checkpoint) error { return addClaim("new") },
			wantErr: "checkpoint unusable",
		},
		{
			name: "failed save runs undo",
			change: func(t *testing.T, path string) func(*Checkpoint) error {
				return func(cp *Checkpoint) error {
					// A directory where the file goes makes the save's
					// rename fail.
					if err := os.Mkdir(path, 0o700); err != nil {
						t.Fatal(err)
					}
					return addClaim("new")(cp)
				}
			},
			wantErr:  "replace checkpoint",
			wantUndo: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			writeCheckpoint(t, path, tc.content)
			undone := false
			err := NewStore(path, boot).Update(tc.change(t, path), func() error {
				undone = true
				return errors.New("undo failed too")
			})
			if undone != tc.wantUndo {
				t.Errorf("undo ran: %v, want %v", undone, tc.wantUndo)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Update error = %v, want one containing %q", err, tc.wantErr)
				}
				if tc.wantUndo && !strings.Contains(err.Error(), "undo failed too") {
					t.Errorf("Update error = %v, want it to carry undo's error", err)
				}
				if tc.content != "" {
					if data, _ := os.ReadFile(path); string(data) != tc.content {
						t.Errorf("file changed to %s", data)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cp, stale, err := NewStore(path, boot).Load()
			if err != nil || stale {
				t.Fatalf("Load: stale=%v err=%v", stale, err)
			}
			if got := sortedUIDs(cp); fmt.Sprint(got) != fmt.Sprint(tc.wantClaims) {
				t.Errorf("claims = %v, want %v", got, tc.wantClaims)
			}
		})
	}
}

func sortedUIDs(cp *Checkpoint) []types.UID {
	var uids []types.UID
	for uid := range cp.Claims {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	return uids
}

func TestRead(t *testing.T) {
	for name, tc := range map[string]struct {
		content string
		claims  int
		wantErr bool
	}{
		"missing":  {},
		"stale":    {content: stale},
		"current":  {content: `{"version":1,"bootID":"` + boot + `","claims":{"u":{"namespace":"n","name":"c","swapBytes":1,"envBytes":1,"devices":[]}}}`, claims: 1},
		"unusable": {content: unusable, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			writeCheckpoint(t, path, tc.content)
			cp, err := NewStore(path, boot).Read()
			if tc.wantErr {
				if !errors.Is(err, ErrUnusable) {
					t.Fatalf("Read error = %v, want ErrUnusable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cp.Claims) != tc.claims || cp.BootID != boot {
				t.Errorf("Read = %+v, want %d claims of this boot", cp, tc.claims)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    Opened
		wantErr string
	}{
		{name: "missing"},
		{name: "stale", content: stale, want: Opened{Stale: true}},
		{name: "current", content: `{"version":1,"bootID":"` + boot + `","claims":{"u":{"namespace":"n","name":"c","swapBytes":1,"envBytes":1,"devices":[]}}}`, want: Opened{Claims: 1}},
		{name: "unusable", content: unusable, want: Opened{SetAside: "checkpoint.json.unusable"}},
		{name: "corrupt, of this version", content: `{"version":1,"bootID":"` + boot + `","claims":{"u":`, want: Opened{SetAside: "checkpoint.json.unusable"}},
		{name: "older version", content: `{"version":0,"claims":{}}`, want: Opened{SetAside: "checkpoint.json.unusable"}},
		// A newer release's file: starting empty would remove the CDI
		// specs its claims own, so Open refuses it and leaves it alone.
		{name: "newer version", content: `{"version":2,"bootID":"` + boot + `","claims":{"u":{}},"more":[]}`,
			wantErr: "format version 2, newer than version 1"},
		{name: "newer version without a boot ID", content: `{"version":3}`, wantErr: "format version 3, newer than version 1"},
		{name: "newer version of an earlier boot", content: `{"version":2,"bootID":"old-boot","claims":{"u":{}}}`, want: Opened{Stale: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "checkpoint.json")
			writeCheckpoint(t, path, tc.content)
			got, err := NewStore(path, boot).Open()
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrNewerVersion) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Open = %+v, %v; want an ErrNewerVersion error containing %q", got, err, tc.wantErr)
				}
				if data, rerr := os.ReadFile(path); rerr != nil || string(data) != tc.content {
					t.Errorf("the newer file was not left as it was: %q, %v", data, rerr)
				}
				if _, serr := os.Stat(path + ".unusable"); serr == nil {
					t.Errorf("the newer file was set aside")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want.SetAside != "" {
				if !errors.Is(got.Unusable, ErrUnusable) || got.SetAside != filepath.Join(dir, tc.want.SetAside) {
					t.Fatalf("Open = %+v, want the file set aside as %s", got, tc.want.SetAside)
				}
				if data, err := os.ReadFile(got.SetAside); err != nil || string(data) != tc.content {
					t.Errorf("set-aside file = %q, %v", data, err)
				}
				if cp, err := NewStore(path, boot).Read(); err != nil || len(cp.Claims) != 0 {
					t.Errorf("Read after Open = %+v, %v", cp, err)
				}
				return
			}
			if got != tc.want {
				t.Errorf("Open = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestUpdateConcurrentStores has Stores in one process, each with its own
// lock file descriptor, update the same file at once.
func TestUpdateConcurrentStores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	const stores, updates = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, stores*updates)
	for i := range stores {
		s := NewStore(path, boot)
		wg.Go(func() {
			for j := range updates {
				errs <- s.Update(addClaim(types.UID(fmt.Sprintf("s%d-%d", i, j))), nil)
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
	cp, _, err := NewStore(path, boot).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.Claims) != stores*updates {
		t.Errorf("checkpoint holds %d claims, want %d", len(cp.Claims), stores*updates)
	}
}

// Environment of TestUpdateAcrossProcesses's child processes.
const (
	envHelperPath  = "CHECKPOINT_TEST_HELPER_PATH"
	envHelperCount = "CHECKPOINT_TEST_HELPER_COUNT"
)

// TestUpdateAcrossProcesses runs two processes (this test binary again)
// that each add distinct claims to one checkpoint at the same time, as two
// plugin pods do during a rolling update: only a lock shared across
// processes keeps every entry.
func TestUpdateAcrossProcesses(t *testing.T) {
	if i, ok := testprocess.Child(); ok {
		updateInChild(t, i)
		return
	}
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	const processes, updates = 2, 60
	testprocess.Run(t, "TestUpdateAcrossProcesses", processes, func(int) []string {
		return []string{envHelperPath + "=" + path, envHelperCount + "=" + strconv.Itoa(updates)}
	})
	cp, _, err := NewStore(path, boot).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.Claims) != processes*updates {
		t.Errorf("checkpoint holds %d claims, want %d", len(cp.Claims), processes*updates)
	}
}

func updateInChild(t *testing.T, index int) {
	n, err := strconv.Atoi(os.Getenv(envHelperCount))
	if err != nil {
		t.Fatal(err)
	}
	testprocess.AwaitStart(t)
	s := NewStore(os.Getenv(envHelperPath), boot)
	for i := range n {
		if err := s.Update(addClaim(types.UID(fmt.Sprintf("p%d-%d", index, i))), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// queued is how many Updates of s wait for their group (test helper).
func (s *Store) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// TestUpdateGroupCommit has changes of one Store wait while another
// instance holds the lock, as the kubelet's calls for pods that start
// together do: they are committed as one group, with one read of the file
// (every change sees the same checkpoint, and the changes before it) and
// one save, and each keeps the outcome it would have had alone: a failed
// change is taken back and saves nothing, a panic is raised in its own
// caller, a failed save undoes every change it would have saved.
func TestUpdateGroupCommit(t *testing.T) {
	const (
		add       = "add"
		fail      = "fail"      // adds its claim, then fails
		panics    = "panic"     // adds its claim, then panics
		breakSave = "breakSave" // adds its claim; a directory where the file goes fails the save
	)
	errChange := errors.New("change refused")
	tests := []struct {
		name    string
		changes []string
		// wantSaved are the claims on disk afterwards (nil: no file).
		wantSaved []types.UID
	}{
		{name: "all succeed", changes: []string{add, add, add, add}, wantSaved: []types.UID{"c0", "c1", "c2", "c3"}},
		{name: "a failed change is taken back", changes: []string{add, fail, add}, wantSaved: []types.UID{"c0", "c2"}},
		{name: "only failures save nothing", changes: []string{fail, fail}},
		{name: "a panic stays with its caller", changes: []string{add, panics, add}, wantSaved: []types.UID{"c0", "c2"}},
		{name: "a failed save undoes every saved change", changes: []string{add, breakSave, fail, add}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			s := NewStore(path, boot)
			// Another instance holds the lock while the changes queue.
			unlockOther, err := NewStore(path, boot).lock(unix.LOCK_EX)
			if err != nil {
				t.Fatal(err)
			}
			type outcome struct {
				err      error
				panicked any
				undone   bool
				seen     *Checkpoint
				before   int // claims the change saw
			}
			var mu sync.Mutex
			order := map[types.UID]int{} // the order the changes ran in
			out := make([]outcome, len(tc.changes))
			var wg sync.WaitGroup
			for i, kind := range tc.changes {
				uid := types.UID(fmt.Sprintf("c%d", i))
				change := func(cp *Checkpoint) error {
					mu.Lock()
					out[i].seen, out[i].before = cp, len(cp.Claims)
					order[uid] = len(order)
					mu.Unlock()
					_ = addClaim(uid)(cp)
					switch kind {
					case fail:
						return fmt.Errorf("%s: %w", uid, errChange)
					case panics:
						panic(uid)
					case breakSave:
						if err := os.Mkdir(path, 0o700); err != nil {
							return err
						}
					}
					return nil
				}
				wg.Go(func() {
					defer func() { out[i].panicked = recover() }()
					out[i].err = s.Update(change, func() error {
						out[i].undone = true
						return nil
					})
				})
				// In this order: the first one takes the group.
				for s.queued() != i+1 {
					runtime.Gosched()
				}
			}
			unlockOther()
			wg.Wait()

			saveFails := slices.Contains(tc.changes, breakSave)
			succeeded := 0
			for i, kind := range tc.changes {
				o := out[i]
				if o.seen != out[0].seen {
					t.Errorf("change %d saw checkpoint %p, change 0 %p: the group was not read once", i, o.seen, out[0].seen)
				}
				if o.before != succeeded {
					t.Errorf("change %d saw %d claims, want the %d of the changes that succeeded before it", i, o.before, succeeded)
				}
				switch kind {
				case fail:
					if !errors.Is(o.err, errChange) || o.undone || o.panicked != nil {
						t.Errorf("change %d: err %v, undone %v, panicked %v; want its own error only", i, o.err, o.undone, o.panicked)
					}
				case panics:
					if o.panicked != types.UID(fmt.Sprintf("c%d", i)) || o.undone {
						t.Errorf("change %d: panicked %v, undone %v; want its own panic, not undone", i, o.panicked, o.undone)
					}
				default:
					succeeded++
					if saveFails {
						if o.err == nil || !strings.Contains(o.err.Error(), "replace checkpoint") || !o.undone {
							t.Errorf("change %d: err %v, undone %v; want the save's error and undo", i, o.err, o.undone)
						}
					} else if o.err != nil || o.undone {
						t.Errorf("change %d: err %v, undone %v; want saved", i, o.err, o.undone)
					}
				}
			}
			for i := range tc.changes {
				if order[types.UID(fmt.Sprintf("c%d", i))] != i {
					t.Errorf("changes ran in the order %v, want the order they were queued in", order)
					break
				}
			}
			if saveFails {
				return
			}
			cp, _, err := s.Load()
			if err != nil {
				t.Fatal(err)
			}
			if got := sortedUIDs(cp); tc.wantSaved == nil && len(got) != 0 || tc.wantSaved != nil && fmt.Sprint(got) != fmt.Sprint(tc.wantSaved) {
				t.Errorf("saved claims %v, want %v", got, tc.wantSaved)
			}
			// The Store is free for the next caller.
			if err := s.Update(addClaim("after"), nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
