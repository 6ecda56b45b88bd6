// Package checkpoint records which claims the kubelet plugin has prepared,
// so that a restarted plugin answers repeated prepare calls identically and
// knows the swap granted to the claims on its node. The file is written
// atomically (temporary file, fsync, rename, fsync of the directory),
// carries a format version and the boot ID, and is ignored after a reboot:
// transient CDI specs and hook state live on tmpfs and are gone then too.
package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// Version is the format version this package writes and reads.
const Version = 1

// ErrUnusable is wrapped by Load's errors for a file that exists but cannot
// be used: corrupt, or written in another format version.
var ErrUnusable = errors.New("checkpoint unusable")

// Checkpoint is the whole file.
type Checkpoint struct {
	Version int                     `json:"version"`
	BootID  string                  `json:"bootID"`
	Claims  map[types.UID]ClaimInfo `json:"claims"`
}

// ClaimInfo is what was prepared for one claim.
type ClaimInfo struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// SwapBytes is the swap the claim grants (sum of its consumed
	// capacity on this driver's devices).
	SwapBytes int64 `json:"swapBytes"`
	// EnvBytes is the DRA_SWAP_LIMIT_BYTES value written into its spec.
	EnvBytes int64            `json:"envBytes"`
	Devices  []PreparedDevice `json:"devices"`
}

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

// Store reads and writes the checkpoint file at one path.
type Store struct {
	path   string
	bootID string
}

// NewStore returns a Store for path on the boot identified by bootID.
func NewStore(path, bootID string) *Store {
	return &Store{path: path, bootID: bootID}
}

// Path is the checkpoint file's path.
func (s *Store) Path() string { return s.path }

// Load reads the checkpoint. A missing file, or one from an earlier boot,
// gives an empty checkpoint (stale reports true for the latter). A corrupt
// file or one of another format version gives an error wrapping
// ErrUnusable.
func (s *Store) Load() (cp *Checkpoint, stale bool, err error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return New(s.bootID), false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read checkpoint %s: %w", s.path, err)
	}
	var header struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &header); err != nil {
		return nil, false, fmt.Errorf("%w: %s: %w", ErrUnusable, s.path, err)
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

// Save writes cp atomically: readers see the old file or the new one,
// never a mix, also across a crash or power loss.
func (s *Store) Save(cp *Checkpoint) error {
	cp.Version, cp.BootID = Version, s.bootID
	data, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create checkpoint directory %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(s.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary checkpoint in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("replace checkpoint %s: %w", s.path, err)
	}
	return syncDir(dir)
}

// SetAside renames an unusable checkpoint file out of the way (keeping it
// for inspection) and returns the new name.
func (s *Store) SetAside() (string, error) {
	aside := s.path + ".unusable"
	if err := os.Rename(s.path, aside); err != nil {
		return "", fmt.Errorf("set aside checkpoint %s: %w", s.path, err)
	}
	return aside, syncDir(filepath.Dir(s.path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
