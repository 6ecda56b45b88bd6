package cdi

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
)

func FuzzClaims(f *testing.F) {
	other := "0b5e7c1a-1111-4222-8333-444455556666"
	for _, seed := range []struct {
		names string // separated by "/", which no file name holds
		dirs  uint8  // bit i: the i-th name is a directory, not a file
	}{
		{SpecName(uid) + ".json", 0},
		{SpecName(uid) + ".json/" + SpecName(other) + ".json/" + SpecName(other) + ".yaml", 0},
		{SpecName(uid) + ".json/" + SpecName(other) + ".json", 0b10},
		{"dra.swap-swap.json/vendor.com-gpu_" + uid + ".json/.tmp-123/README", 0},
		{SpecName(strings.ToUpper(uid)) + ".json/" + SpecName(uid+"0") + ".json/" + SpecName(uid) + ".json.tmp", 0},
		{SpecName("../"+uid) + ".json/" + SpecName(uid) + "json/" + SpecName("") + ".json", 0},
		{"./../", 0},
		{"", 0},
		{"\xff\xfe/\n\t", 0b1},
	} {
		f.Add(seed.names, seed.dirs)
	}
	f.Fuzz(func(t *testing.T, names string, dirs uint8) {
		w, dir := newTestWriter(t)
		created := map[string]bool{} // name -> regular file
		for i, name := range strings.Split(names, "/") {
			if name == "" || name == "." || name == ".." || strings.ContainsRune(name, 0) || len(name) > 255 {
				continue
			}
			if _, done := created[name]; done {
				continue
			}
			var err error
			if i < 8 && dirs&(1<<i) != 0 {
				err = os.Mkdir(filepath.Join(dir, name), 0o700)
			} else {
				err = os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600)
			}
			if err != nil {
				t.Skipf("cannot create %q: %v", name, err)
			}
			created[name] = i >= 8 || dirs&(1<<i) == 0
		}
		uids, err := w.Claims()
		if err != nil {
			t.Fatalf("Claims with %q: %v", names, err)
		}
		for i, u := range uids {
			if !limits.IsUID(u) {
				t.Fatalf("Claims listed %q, not a UID (files %q)", u, names)
			}
			if slices.Contains(uids[:i], u) {
				t.Fatalf("Claims listed %q twice: %q", u, uids)
			}
			fi, err := os.Lstat(filepath.Join(dir, SpecName(u)+".json"))
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("Claims listed %q, but its spec is not a file: %v", u, err)
			}
		}
		// And every spec of a claim is listed.
		for name, regular := range created {
			u, ok := strings.CutSuffix(name, ".json")
			if !ok || !regular {
				continue
			}
			u, ok = strings.CutPrefix(u, SpecName(""))
			if ok && limits.IsUID(u) && SpecName(u)+".json" == name && !slices.Contains(uids, u) {
				t.Fatalf("Claims = %q misses the spec %q", uids, name)
			}
		}
	})
}

func FuzzParseDeviceID(f *testing.F) {
	for _, id := range []string{
		DeviceID(uid, 0),
		DeviceID(uid, 31),
		DeviceID(uid, 9999),
		DeviceID(uid, 10000),
		parser.QualifiedName(Vendor, Class, uid),
		"dra.swap/swap=" + uid + "-01",
		"dra.swap/swap=" + uid + "-+1",
		"dra.swap/swap=" + uid + "--1",
		"dra.swap/swap=" + uid + "-x",
		"other.vendor/swap=" + uid + "-0",
		"dra.swap/swap=abc-0",
		"dra.swap/swap=",
		"/dev/dra.swap",
		"garbage",
	} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		claimUID, index, ok := ParseDeviceID(id)
		if !ok {
			return
		}
		if !limits.IsUID(claimUID) {
			t.Fatalf("ParseDeviceID(%q) accepted claim UID %q", id, claimUID)
		}
		// Every accepted ID is the one this package writes for what it
		// names: no two spellings of one share.
		switch {
		case index >= 0 && index <= limits.MaxResultIndex:
			if want := DeviceID(claimUID, index); id != want {
				t.Fatalf("ParseDeviceID(%q) = %q, %d, which is written %q", id, claimUID, index, want)
			}
		default:
			t.Fatalf("ParseDeviceID(%q) accepted result index %d", id, index)
		}
	})
}
