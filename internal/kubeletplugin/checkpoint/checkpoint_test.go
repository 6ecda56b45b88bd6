package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const boot = "5b1b4a3e-0000-4000-8000-000000000001"

func sample() *Checkpoint {
	cp := New(boot)
	cp.Claims["uid-1"] = ClaimInfo{
		Namespace: "ns", Name: "claim", LimitBytes: 1 << 30, EnvLimitBytes: 1 << 30,
		Devices: []PreparedDevice{{Requests: []string{"swap"}, PoolName: "node-a", DeviceName: "swap", CDIDeviceIDs: []string{"dra.swap/swap=uid-1"}}},
	}
	return cp
}

func TestSaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "checkpoint.json")
	s := NewStore(path, boot)
	if err := s.save(sample()); err != nil {
		t.Fatal(err)
	}
	got, stale, err := s.Load()
	if err != nil || stale {
		t.Fatalf("Load: stale=%v err=%v", stale, err)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Fatalf("Load = %+v, want %+v", got, sample())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("leftover files: %v", entries)
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name      string
		content   string // "" means no file
		wantStale bool
		wantEmpty bool
		wantErr   string
	}{
		{name: "missing file", wantEmpty: true},
		{name: "other boot", content: `{"version":1,"bootID":"old-boot","claims":{"u":{"namespace":"n","name":"c","swapBytes":1,"envBytes":1,"devices":[]}}}`, wantStale: true, wantEmpty: true},
		{name: "null claims", content: `{"version":1,"bootID":"` + boot + `","claims":null}`, wantEmpty: true},
		{name: "truncated", content: `{"version":1,"bootID":"` + boot + `","cla`, wantErr: "checkpoint unusable"},
		{name: "garbage", content: "\x00\x01binary", wantErr: "checkpoint unusable"},
		{name: "empty file", content: " ", wantErr: "checkpoint unusable"},
		{name: "old version", content: `{"version":0,"claims":{}}`, wantErr: "format version 0, this driver reads version 1"},
		{name: "newer version", content: `{"version":2,"bootID":"` + boot + `","things":[]}`, wantErr: "format version 2, newer than version 1"},
		{name: "newer version of an earlier boot", content: `{"version":2,"bootID":"old-boot","things":[]}`, wantStale: true, wantEmpty: true},
		{name: "unknown field", content: `{"version":1,"bootID":"` + boot + `","claims":{},"extra":1}`, wantErr: `unknown field "extra"`},
		{name: "wrong type", content: `{"version":1,"bootID":"` + boot + `","claims":{"u":{"swapBytes":"lots"}}}`, wantErr: "checkpoint unusable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cp, stale, err := NewStore(path, boot).Load()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrUnusable) {
					t.Fatalf("Load error = %v, want ErrUnusable containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if stale != tc.wantStale {
				t.Errorf("stale = %v, want %v", stale, tc.wantStale)
			}
			if tc.wantEmpty && (len(cp.Claims) != 0 || cp.Claims == nil || cp.BootID != boot || cp.Version != Version) {
				t.Errorf("Load = %+v, want an empty checkpoint of this boot", cp)
			}
		})
	}
}

func TestSaveFailsCleanly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	// A directory where the file should be makes the rename fail.
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	err := NewStore(path, boot).save(sample())
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Save error = %v, want one naming %s", err, path)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary file left behind: %v", entries)
	}
}
