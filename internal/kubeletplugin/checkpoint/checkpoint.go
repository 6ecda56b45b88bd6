// Package checkpoint records which claims the kubelet plugin has prepared,
// so that a restarted plugin answers repeated prepare calls identically and
// knows the swap granted to the claims on its node. The file is replaced
// atomically (temporary file, rename), carries a format version and the
// boot ID, and is ignored after a reboot: transient CDI specs and hook
// state live on tmpfs and are gone then too. So it needs to outlive the
// plugin's process, not the machine, and is not fsynced.
//
// Several plugin instances may share the file: during a rolling update of
// the DaemonSet the old and the new pod run side by side and the kubelet
// may call either. So nobody keeps the checkpoint in memory: every change
// reads the file, changes it and saves it under an exclusive flock(2) on a
// lock file beside it (Update), which excludes other processes and other
// Stores in the same process alike. The changes of one Store's concurrent
// callers are committed in groups: those that wait while the lock is held
// are applied in turn to one read of the file and saved with one write.
package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-driver-swap/dra-driver-swap/internal/atomicfile"
	"github.com/dra-driver-swap/dra-driver-swap/internal/filelock"
)

// Version is the format version this package writes and reads.
const Version = 1

// ErrUnusable is wrapped by Load's errors for a file that exists but cannot
// be used: corrupt, or written in another format version.
var ErrUnusable = errors.New("checkpoint unusable")

// ErrNewerVersion is wrapped, with ErrUnusable, by Load's errors for a
// file of this boot in a format version newer than Version: a newer
// release wrote it, and its claims must not be discarded (Open refuses it).
var ErrNewerVersion = errors.New("checkpoint written by a newer release")

// Checkpoint is the whole file.
type Checkpoint struct {
	Version int                     `json:"version"`
	BootID  string                  `json:"bootID"`
	Claims  map[types.UID]ClaimInfo `json:"claims"`
}

// ClaimInfo is what was prepared for one claim.
type ClaimInfo struct {
	// Namespace and Name are the claim's; both empty for an unconfirmed
	// entry (see Confirmed).
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// LimitBytes is the swap the claim grants (sum of its consumed
	// capacity on this driver's devices).
	LimitBytes int64 `json:"swapBytes"`
	// EnvLimitBytes is the DRA_SWAP_LIMIT_BYTES value written into its spec.
	EnvLimitBytes int64            `json:"envBytes"`
	Devices       []PreparedDevice `json:"devices"`
}

// Confirmed reports whether the entry is one whose claim the API server
// confirmed: one prepare saved, or one rebuilt from the claim and its CDI
// spec. An unconfirmed entry (no name) stands for a CDI spec the plugin
// keeps although the API server has not confirmed which claim it serves
// (its entry was lost with an unusable checkpoint, see
// internal/kubeletplugin/prepare.ReconcileSpecs): LimitBytes and the
// devices' CDIDeviceIDs are the spec's, the rest is unknown. It counts
// against the offer like any entry, unprepare removes it, and a prepare of
// its claim confirms it.
func (c ClaimInfo) Confirmed() bool { return c.Name != "" }

// PreparedDevice is one device result returned to the kubelet.
type PreparedDevice struct {
	Requests     []string   `json:"requests"`
	PoolName     string     `json:"poolName"`
	DeviceName   string     `json:"deviceName"`
	ShareID      *types.UID `json:"shareID,omitempty"`
	CDIDeviceIDs []string   `json:"cdiDeviceIDs"`
}

// New returns an empty checkpoint for the given boot.
func New(bootID string) *Checkpoint {
	return &Checkpoint{Version: Version, BootID: bootID, Claims: map[types.UID]ClaimInfo{}}
}

// Store reads and writes the checkpoint file at one path. It keeps no
// checkpoint between calls, so any number of Stores, in one process or in
// several, can share a file; what it keeps is the queue of its callers'
// changes that wait for the lock. A Store must not be copied.
type Store struct {
	path   string
	bootID string

	mu sync.Mutex
	// queue holds the Updates that wait for the group being committed.
	queue []*update
	// committing: one caller commits a group and hands that on.
	committing bool
}

// update is one caller's change, waiting to be committed with others.
type update struct {
	change func(cp *Checkpoint) error
	undo   func() error
	err    error
	// panicked is what change panicked with, raised again in its caller.
	panicked any
	// wake receives true when this caller is to commit the next group,
	// false when its change was committed by another.
	wake chan bool
}

// NewStore returns a Store for path on the boot identified by bootID.
func NewStore(path, bootID string) *Store {
	return &Store{path: path, bootID: bootID}
}

// Path is the checkpoint file's path.
func (s *Store) Path() string { return s.path }

// LockPath is the path of the lock file beside the checkpoint. It is
// created on first use and never removed: removing a lock file while
// another process waits on it would let two holders in.
func (s *Store) LockPath() string { return s.path + ".lock" }

// Update changes the checkpoint under the exclusive lock: it reads the
// file (a missing file or one from an earlier boot reads as an empty
// checkpoint of this boot), calls change with it and, when change returns
// nil, saves the result, all before unlocking, so that changes made by
// other instances in the meantime are never lost. When change returns an
// error, what it changed is taken back, nothing of it is saved and Update
// returns that error as it is. When saving fails, undo (if not nil) runs
// while the lock is still held, to take back what went with the change (a
// CDI spec written for a new claim), and Update returns the save error
// joined with undo's.
//
// Concurrent Updates of one Store are committed in groups: the calls that
// arrive while a group is being committed wait, and the first of them then
// takes the lock, reads the file once, calls each waiting change in turn
// (each sees those before it, as if the calls had run one after the
// other) and saves once for all of them. A change is never saved without
// its undo having run when the save fails, nor reported done before the
// save that holds it; a group's save is one atomic rename, as a single
// change's is, so a crash leaves all of a group or none of it.
//
// An unusable file (see Load) is an error wrapping ErrUnusable; only Open,
// at start-up, sets it aside: a running instance must not discard a file
// that another instance (of another release) may have written.
func (s *Store) Update(change func(cp *Checkpoint) error, undo func() error) error {
	u := &update{change: change, undo: undo, wake: make(chan bool, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, u)
	lead := !s.committing
	s.committing = true
	s.mu.Unlock()
	if !lead && !<-u.wake {
		return u.result()
	}
	s.commitGroup()
	return u.result()
}

// errAbandoned is the result of a change whose group's commit ended
// before it was saved (a change ended its goroutine).
var errAbandoned = errors.New("the checkpoint update was abandoned: another change of its group ended its goroutine")

func (u *update) result() error {
	if u.panicked != nil {
		panic(u.panicked)
	}
	return u.err
}

// commitGroup takes the lock, then every queued update (the caller's own
// among them), commits them, wakes their callers and hands the next group
// to the first caller that queued meanwhile; all of which also happens
// when the caller's goroutine ends in between.
func (s *Store) commitGroup() {
	unlock, err := s.lock(filelock.Exclusive)
	// Those that queued while the lock was awaited go with this group.
	s.mu.Lock()
	group := s.queue
	s.queue = nil
	s.mu.Unlock()
	finished := false
	defer func() {
		if err == nil {
			unlock()
		}
		for _, u := range group {
			if !finished && u.err == nil && u.panicked == nil {
				u.err = errAbandoned
			}
		}
		for _, u := range group[1:] {
			u.wake <- false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.queue) > 0 {
			s.queue[0].wake <- true
			return
		}
		s.committing = false
	}()
	if err != nil {
		for _, u := range group {
			u.err = err
		}
	} else {
		s.commit(group)
	}
	finished = true
}

// commit applies the group's changes to one read of the file and saves
// them once; the caller holds the lock. Each update's err is its result.
func (s *Store) commit(group []*update) {
	cp, _, err := s.Load()
	if err != nil {
		for _, u := range group {
			u.err = err
		}
		return
	}
	var changed []*update
	for _, u := range group {
		// A change that fails must leave nothing behind in what the
		// others' changes are saved with.
		before := cp.clone()
		if !u.apply(cp) {
			*cp = *before
			continue
		}
		changed = append(changed, u)
	}
	if len(changed) == 0 {
		return
	}
	if err := s.save(cp); err != nil {
		for _, u := range changed {
			u.err = err
			if u.undo != nil {
				if undoErr := u.undo(); undoErr != nil {
					u.err = errors.Join(err, fmt.Errorf("undo the change that was not saved: %w", undoErr))
				}
			}
		}
	}
}

// apply calls the change; a panic is kept for its caller. It reports
// whether the change succeeded.
func (u *update) apply(cp *Checkpoint) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			u.panicked, ok = r, false
		}
	}()
	u.err = u.change(cp)
	return u.err == nil
}

// clone is a deep copy of cp.
func (cp *Checkpoint) clone() *Checkpoint {
	out := *cp
	out.Claims = make(map[types.UID]ClaimInfo, len(cp.Claims))
	for uid, c := range cp.Claims {
		c.Devices = slices.Clone(c.Devices)
		for i := range c.Devices {
			d := &c.Devices[i]
			d.Requests = slices.Clone(d.Requests)
			d.CDIDeviceIDs = slices.Clone(d.CDIDeviceIDs)
			if d.ShareID != nil {
				share := *d.ShareID
				d.ShareID = &share
			}
		}
		out.Claims[uid] = c
	}
	return &out
}

// Read returns the checkpoint as Update would see it, read under a shared
// lock.
func (s *Store) Read() (*Checkpoint, error) {
	unlock, err := s.lock(filelock.Shared)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cp, _, err := s.Load()
	return cp, err
}

// Opened is what Open found.
type Opened struct {
	// Claims is the number of prepared claims the checkpoint holds.
	Claims int
	// Stale reports a file from an earlier boot, which reads as empty.
	Stale bool
	// Unusable is why the file could not be used, if it could not; it was
	// then renamed to SetAside.
	Unusable error
	SetAside string
}

// Open checks the checkpoint at start-up, under the exclusive lock. A file
// of a newer format version (ErrNewerVersion) is an error, left as it is:
// starting empty would make the plugin remove every CDI spec that file's
// claims own, so an older plugin must not start on it. Any other unusable
// file (corrupt, or of an older format version) is set aside, kept for
// inspection, so that the plugin starts with no prepared claims instead
// of failing every call: no release can read it, and unprepare removes a
// claim's spec by its UID whether or not the checkpoint knows the claim.
func (s *Store) Open() (Opened, error) {
	unlock, err := s.lock(filelock.Exclusive)
	if err != nil {
		return Opened{}, err
	}
	defer unlock()
	cp, stale, err := s.Load()
	switch {
	case errors.Is(err, ErrNewerVersion):
		return Opened{}, err
	case errors.Is(err, ErrUnusable):
		aside, asideErr := s.setAside()
		if asideErr != nil {
			return Opened{}, errors.Join(err, asideErr)
		}
		return Opened{Unusable: err, SetAside: aside}, nil
	case err != nil:
		return Opened{}, err
	}
	return Opened{Claims: len(cp.Claims), Stale: stale}, nil
}

// lock takes a flock(2) of kind mode on the lock file, waiting as long as
// another holder keeps it (filelock.Wait); holders only do local file I/O.
// Locks taken through different open files exclude each other also within
// one process. The returned function releases it.
func (s *Store) lock(mode filelock.Mode) (unlock func(), err error) {
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create checkpoint directory %s: %w", dir, err)
	}
	f, err := os.OpenFile(s.LockPath(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint lock %s: %w", s.LockPath(), err)
	}
	if err := filelock.Wait(f, mode); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock checkpoint lock %s: %w", s.LockPath(), err)
	}
	// Closing the file releases the lock.
	return func() { f.Close() }, nil
}

// Load reads the checkpoint without taking the lock: it sees a complete
// file, the old or the new one, since saves replace it atomically, but a
// change made on what Load returned could lose another instance's change;
// use Update for that. A missing file, or one from an earlier boot, gives
// an empty checkpoint (stale reports true for the latter). A corrupt file
// or one of another format version gives an error wrapping ErrUnusable,
// and also ErrNewerVersion for a newer version (of this boot, or with no
// boot ID).
func (s *Store) Load() (cp *Checkpoint, stale bool, err error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return New(s.bootID), false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read checkpoint %s: %w", s.path, err)
	}
	var header struct {
		Version int    `json:"version"`
		BootID  string `json:"bootID"`
	}
	if err := json.Unmarshal(data, &header); err != nil {
		return nil, false, fmt.Errorf("%w: %s: %w", ErrUnusable, s.path, err)
	}
	if header.Version > Version {
		if header.BootID != "" && header.BootID != s.bootID {
			// From an earlier boot: stale whatever its format.
			return New(s.bootID), true, nil
		}
		return nil, false, fmt.Errorf("%w: %w: %s has format version %d, newer than version %d, the newest this plugin reads; "+
			"refusing it rather than discard its prepared claims and their CDI specs (run a release that reads version %d, or move the file away to start empty)",
			ErrUnusable, ErrNewerVersion, s.path, header.Version, Version, header.Version)
	}
	if header.Version != Version {
		return nil, false, fmt.Errorf("%w: %s has format version %d, this driver reads version %d", ErrUnusable, s.path, header.Version, Version)
	}
	cp = &Checkpoint{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cp); err != nil {
		return nil, false, fmt.Errorf("%w: %s: %w", ErrUnusable, s.path, err)
	}
	if cp.BootID != s.bootID {
		return New(s.bootID), true, nil
	}
	if cp.Claims == nil {
		cp.Claims = map[types.UID]ClaimInfo{}
	}
	return cp, false, nil
}

// save writes cp atomically: readers see the old file or the new one,
// never a mix, also across a crash or power loss. Callers hold the lock.
func (s *Store) save(cp *Checkpoint) error {
	cp.Version, cp.BootID = Version, s.bootID
	data, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create checkpoint directory %s: %w", dir, err)
	}
	// Atomic, not synced: the checkpoint has to outlive the plugin's
	// process (and the kubelet's), not the machine. After a reboot it is
	// stale by design (its boot ID), like the transient CDI specs and hook
	// records on tmpfs; a crashed process leaves the page cache intact.
	// Not syncing keeps fsync off every prepare and unprepare.
	return atomicfile.Replace(s.path, bytes.NewReader(data), 0o600, "checkpoint")
}

// setAside renames an unusable checkpoint file out of the way (keeping it
// for inspection) and returns the new name. Callers hold the lock.
func (s *Store) setAside() (string, error) {
	aside := s.path + ".unusable"
	if err := os.Rename(s.path, aside); err != nil {
		return "", fmt.Errorf("set aside checkpoint %s: %w", s.path, err)
	}
	return aside, atomicfile.SyncDir(filepath.Dir(s.path))
}
