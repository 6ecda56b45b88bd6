package checkpoint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		`{"version":1,"bootID":"` + boot + `","claims":{"uid-1":{"namespace":"ns","name":"claim","swapBytes":1073741824,"envBytes":1073741824,"devices":[{"requests":["swap"],"poolName":"node-a","deviceName":"swap","cdiDeviceIDs":["dra.swap/swap=uid-1"]}]}}}`,
		`{"version":1,"bootID":"` + boot + `","claims":{"u":{"devices":[{"requests":null,"shareID":"s-1","cdiDeviceIDs":[]}]}}}`,
		`{"version":1,"bootID":"old-boot","claims":{"u":{"namespace":"n","name":"c","swapBytes":1,"envBytes":1,"devices":[]}}}`,
		`{"version":1,"bootID":"` + boot + `","claims":null}`,
		`{"version":1,"bootID":"` + boot + `"}`,
		`{"version":1,"bootID":"` + boot + `","cla`,
		`{"version":0,"claims":{}}`,
		`{"version":2,"bootID":"` + boot + `","things":[]}`,
		`{"version":1,"bootID":"` + boot + `","claims":{},"extra":1}`,
		`{"version":1,"bootID":"` + boot + `","claims":{"u":{"swapBytes":"lots"}}}`,
		`{"version":1,"bootID":"` + boot + `","claims":{}} {"version":2}`,
		`{"VERSION":1,"BootID":"` + boot + `","claims":{}}`,
		`null`,
		` `,
		"\x00\x01binary",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "checkpoint.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s := NewStore(path, boot)
		cp, stale, err := s.Load()
		if err != nil {
			if !errors.Is(err, ErrUnusable) {
				t.Fatalf("Load(%q) error %v does not wrap ErrUnusable", data, err)
			}
			if _, rerr := s.Read(); !errors.Is(rerr, ErrUnusable) {
				t.Fatalf("Load(%q) is unusable (%v), Read gives %v", data, err, rerr)
			}
			if errors.Is(err, ErrNewerVersion) {
				// A newer release's file: Open refuses it, untouched.
				if _, oerr := s.Open(); !errors.Is(oerr, ErrNewerVersion) {
					t.Fatalf("Open of newer %q = %v, want ErrNewerVersion", data, oerr)
				}
				if kept, rerr := os.ReadFile(path); rerr != nil || !bytes.Equal(kept, data) {
					t.Fatalf("Open changed the newer file: %q (%v), want %q", kept, rerr, data)
				}
				return
			}
			// Open sets the file aside, keeping its bytes; the store then
			// starts empty.
			opened, oerr := s.Open()
			if oerr != nil || !errors.Is(opened.Unusable, ErrUnusable) || opened.Claims != 0 {
				t.Fatalf("Open of unusable %q = %+v, %v", data, opened, oerr)
			}
			if kept, rerr := os.ReadFile(opened.SetAside); rerr != nil || !bytes.Equal(kept, data) {
				t.Fatalf("set-aside file %s holds %q (%v), want %q", opened.SetAside, kept, rerr, data)
			}
			if cp, _, err := s.Load(); err != nil || len(cp.Claims) != 0 {
				t.Fatalf("Load after Open = %+v, %v; want an empty checkpoint", cp, err)
			}
			return
		}
		if cp == nil || cp.Version != Version || cp.Claims == nil || cp.BootID != boot {
			t.Fatalf("Load(%q) = %+v: want version %d, boot %q and non-nil claims", data, cp, Version, boot)
		}
		if stale && len(cp.Claims) != 0 {
			t.Fatalf("Load(%q) of an earlier boot kept claims %+v", data, cp.Claims)
		}
		read, err := s.Read()
		if err != nil || !reflect.DeepEqual(read, cp) {
			t.Fatalf("Read = %+v, %v; Load = %+v", read, err, cp)
		}
		// What loads is saved unchanged by an update that changes nothing.
		if err := s.Update(func(*Checkpoint) error { return nil }, nil); err != nil {
			t.Fatalf("Update of loaded %q: %v", data, err)
		}
		again, stale, err := s.Load()
		if err != nil || stale || !reflect.DeepEqual(again, cp) {
			t.Fatalf("after a no-op Update, Load = %+v (stale %v), %v; want %+v", again, stale, err, cp)
		}
		opened, err := s.Open()
		if err != nil || opened.Unusable != nil || opened.Stale || opened.Claims != len(cp.Claims) {
			t.Fatalf("Open after Update = %+v, %v", opened, err)
		}
	})
}
