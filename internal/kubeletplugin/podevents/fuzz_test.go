package podevents

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
)

func FuzzRead(f *testing.F) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, seed := range []string{
		`{"namespace":"ns","pod":"p","podUID":"0b5e7c1a-1111-4222-8333-444455556666","container":"worker","limitBytes":314572800,"cgroupVersion":2,"time":"2026-11-22T11:59:00Z"}`,
		`{"namespace":"ns","pod":"p","podUID":"u1","container":"worker","limitBytes":314572800,"podLimitBytes":629145600,"cgroupVersion":1,"time":"2026-11-22T12:00:00Z"}`,
		`{"namespace":"ns","pod":"p","podUID":"u1","container":"worker","error":"container ns/p/worker has no memory limit","time":"2026-11-22T12:00:00Z"}`,
		`{"namespace":"ns","pod":"p","podUID":"u1","container":"worker","time":"2026-11-22T11:00:00Z"}`,
		`{"namespace":"ns","pod":"../../etc","podUID":"u1","container":"worker","time":"2026-11-22T12:00:00Z"}`,
		`{"namespace":"NS","pod":"p","podUID":"","container":"","time":"0001-01-01T00:00:00Z"}`,
		`{"namespace":"ns","pod":"p","podUID":"u1","container":"c","limitBytes":-1,"time":"9999-12-31T23:59:59Z"}`,
		`{"time":"not a time"}`,
		`{not json`,
		`null`,
		``,
		strings.Repeat(" ", hookrecord.MaxBytes) + `{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		records := filepath.Join(dir, hookrecord.Dir)
		if err := os.MkdirAll(records, 0o700); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(records, "3f2a9c0d1e.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := read(path)
		if err == nil {
			// What the emitter turns into an event names a pod the
			// API could hold.
			for what, v := range map[string]string{"namespace": r.Namespace, "pod": r.Pod} {
				if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
					t.Fatalf("read(%q) accepted %s %q: %v", data, what, v, errs)
				}
			}
			if r.Container == "" || r.PodUID == "" {
				t.Fatalf("read(%q) accepted a record without container or pod UID: %+v", data, r)
			}
		}
		// Flush emits exactly the records read accepts that are recent,
		// and removes the file either way.
		_, ctx := ktesting.NewTestContext(t)
		rec := events.NewFakeRecorder(10)
		e := &Emitter{StateDir: dir, Node: "node-a", Recorder: rec, Now: func() time.Time { return now }}
		n, ferr := e.Flush(ctx)
		if ferr != nil {
			t.Fatalf("Flush of %q: %v", data, ferr)
		}
		want := 0
		if err == nil && now.Sub(r.Time) <= 10*time.Minute {
			want = 1
		}
		if n != want || len(rec.Events) != want {
			t.Fatalf("Flush of %q emitted %d events (%d recorded), want %d (read error %v)", data, n, len(rec.Events), want, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("Flush left record %q behind: %v", data, err)
		}
	})
}
