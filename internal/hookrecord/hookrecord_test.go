package hookrecord

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestFromAnnotations(t *testing.T) {
	full := map[string]string{"io.kubernetes.cri.sandbox-namespace": "ns", "io.kubernetes.cri.sandbox-name": "p", "io.kubernetes.cri.sandbox-uid": "u", "io.kubernetes.cri.container-name": "c"}
	crio := map[string]string{"io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.name": "p", "io.kubernetes.pod.uid": "u", "io.kubernetes.container.name": "c"}
	for _, tc := range []struct {
		a  map[string]string
		ok bool
	}{{full, true}, {crio, true}, {nil, false}, {map[string]string{"io.kubernetes.cri.sandbox-name": "p"}, false}} {
		r, ok := FromAnnotations(tc.a)
		if ok != tc.ok || ok && (r.Namespace != "ns" || r.Pod != "p" || r.PodUID != "u" || r.Container != "c") {
			t.Errorf("FromAnnotations(%v) = %+v, %v", tc.a, r, ok)
		}
	}
}

func TestWriteCapsError(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, "c", Record{Error: strings.Repeat("x", 5000)}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, Dir, "c.json"))
	if err != nil || fi.Size() > MaxBytes {
		t.Fatalf("record size %v, %v", fi, err)
	}
}

// TestWriteBytes pins the file a hook writes: the plugin of another
// release reads it (a hook and a plugin of different releases run side by
// side during an upgrade), so its bytes only change on purpose.
func TestWriteBytes(t *testing.T) {
	budget := int64(600 << 20)
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		r    Record
		want string
	}{
		{
			name: "applied",
			r: Record{Namespace: "ns", Pod: "p", PodUID: "0b5e7c1a-1111-4222-8333-444455556666", Container: "worker", LimitBytes: 300 << 20,
				PodLimitBytes: &budget, Claims: []string{"00000000-0000-4000-8000-00000000000a"}, CgroupVersion: 2, Time: at},
			want: `{"namespace":"ns","pod":"p","podUID":"0b5e7c1a-1111-4222-8333-444455556666","container":"worker","limitBytes":314572800,"podLimitBytes":629145600,"claims":["00000000-0000-4000-8000-00000000000a"],"cgroupVersion":2,"time":"2026-11-22T12:00:00Z"}`,
		},
		{
			name: "not applied",
			r:    Record{Namespace: "ns", Pod: "p", PodUID: "u1", Container: "worker", Error: "container ns/p/worker has no memory limit", Time: at},
			want: `{"namespace":"ns","pod":"p","podUID":"u1","container":"worker","limitBytes":0,"error":"container ns/p/worker has no memory limit","time":"2026-11-22T12:00:00Z"}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Write(dir, "c1", tc.r); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, Dir, "c1.json")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tc.want {
				t.Errorf("record file\n%s\nwant\n%s", data, tc.want)
			}
			got, err := Read(path)
			if err != nil || !reflect.DeepEqual(got, tc.r) {
				t.Errorf("Read = %+v, %v; want %+v", got, err, tc.r)
			}
		})
	}
}

func TestReadRefuses(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", "read "},
		{"not json", "{not json", "decode "},
		{"too large", strings.Repeat(" ", MaxBytes) + "{}", "larger than 8192 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c1.json")
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Read(path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Read of %.20q: %v, want an error with %q", tc.data, err, tc.want)
			}
		})
	}
}
