package podevents

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
)

func TestFlush(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ok := Record{Namespace: "ns", Pod: "p", PodUID: "u1", Container: "worker", LimitBytes: 300 << 20, CgroupVersion: 1, Time: now}
	failed := ok
	failed.Error = "container ns/p/worker has no memory limit"
	stale := ok
	stale.Time = now.Add(-time.Hour)
	badName := ok
	badName.Pod = "../../etc"
	tests := []struct {
		name    string
		records map[string]any // file name → Record or raw string
		want    []string
	}{
		{name: "applied", records: map[string]any{"c1.json": ok}, want: []string{`Normal SwapApplied Swap limit 300Mi applied to container "worker" on node "node-a" (cgroup v1)`}},
		{name: "not applied", records: map[string]any{"c1.json": failed}, want: []string{`Warning SwapNotApplied Swap limit not applied to container "worker" on node "node-a": container ns/p/worker has no memory limit`}},
		{name: "garbage is dropped", records: map[string]any{"c1.json": "{not json"}},
		{name: "bad pod name is dropped", records: map[string]any{"c1.json": badName}},
		{name: "stale is dropped", records: map[string]any{"c1.json": stale}},
		{name: "temporary files wait", records: map[string]any{".tmp-123": ok}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			for name, r := range tc.records {
				if rec, isRecord := r.(Record); isRecord {
					if err := Write(dir, strings.TrimSuffix(name, ".json"), rec); err != nil {
						t.Fatal(err)
					}
					if !strings.HasSuffix(name, ".json") {
						if err := os.Rename(filepath.Join(dir, Dir, strings.TrimSuffix(name, ".json")+".json"), filepath.Join(dir, Dir, name)); err != nil {
							t.Fatal(err)
						}
					}
					continue
				}
				if err := os.MkdirAll(filepath.Join(dir, Dir), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, Dir, name), []byte(r.(string)), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rec := events.NewFakeRecorder(10)
			e := &Emitter{StateDir: dir, Node: "node-a", Recorder: rec, Now: func() time.Time { return now }}
			n, err := e.Flush(ctx)
			if err != nil {
				t.Fatal(err)
			}
			close(rec.Events)
			var got []string
			for ev := range rec.Events {
				got = append(got, ev)
			}
			if n != len(tc.want) || strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("events (%d) %q, want %q", n, got, tc.want)
			}
			left, _ := os.ReadDir(filepath.Join(dir, Dir))
			for _, f := range left {
				if strings.HasSuffix(f.Name(), ".json") {
					t.Errorf("record %s left behind", f.Name())
				}
			}
		})
	}
}

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
	if err != nil || fi.Size() > maxRecordBytes {
		t.Fatalf("record size %v, %v", fi, err)
	}
}
