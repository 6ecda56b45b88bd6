package podevents

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
)

func TestFlush(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ok := hookrecord.Record{Namespace: "ns", Pod: "p", PodUID: "u1", Container: "worker", LimitBytes: 300 << 20, CgroupVersion: 1, Time: now}
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
				if rec, isRecord := r.(hookrecord.Record); isRecord {
					if err := hookrecord.Write(dir, strings.TrimSuffix(name, ".json"), rec); err != nil {
						t.Fatal(err)
					}
					if !strings.HasSuffix(name, ".json") {
						if err := os.Rename(filepath.Join(dir, hookrecord.Dir, strings.TrimSuffix(name, ".json")+".json"), filepath.Join(dir, hookrecord.Dir, name)); err != nil {
							t.Fatal(err)
						}
					}
					continue
				}
				if err := os.MkdirAll(filepath.Join(dir, hookrecord.Dir), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, hookrecord.Dir, name), []byte(r.(string)), 0o600); err != nil {
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
			left, _ := os.ReadDir(filepath.Join(dir, hookrecord.Dir))
			for _, f := range left {
				if strings.HasSuffix(f.Name(), ".json") {
					t.Errorf("record %s left behind", f.Name())
				}
			}
		})
	}
}

// TestTwoContainersTwoEvents: the events API folds events with the same
// regarding object, reason and action into one series that keeps the
// first note. Two containers of one pod that get their limits must show
// up as two events, each naming its container, through a real broadcaster.
func TestTwoContainersTwoEvents(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Now()
	client := fake.NewClientset()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer broadcaster.Shutdown()
	dir := t.TempDir()
	for id, r := range map[string]hookrecord.Record{
		"c1": {Namespace: "ns", Pod: "p", PodUID: "u1", Container: "app", LimitBytes: 100 << 20, CgroupVersion: 2, Time: now},
		"c2": {Namespace: "ns", Pod: "p", PodUID: "u1", Container: "sidecar", LimitBytes: 50 << 20, CgroupVersion: 2, Time: now},
	} {
		if err := hookrecord.Write(dir, id, r); err != nil {
			t.Fatal(err)
		}
	}
	e := &Emitter{StateDir: dir, Node: "node-a", Recorder: broadcaster.NewRecorder(scheme.Scheme, "dra.swap"),
		InitContainer: func(namespace, pod, container string) bool { return container == "sidecar" }}
	if n, err := e.Flush(ctx); err != nil || n != 2 {
		t.Fatalf("Flush = %d, %v", n, err)
	}
	want := map[string]string{
		"spec.containers{app}":         `Swap limit 100Mi applied to container "app"`,
		"spec.initContainers{sidecar}": `Swap limit 50Mi applied to container "sidecar"`,
	}
	var got map[string]string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.EventsV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = map[string]string{}
		for _, ev := range list.Items {
			got[ev.Regarding.FieldPath] = ev.Note
		}
		return len(got) == len(want), nil
	})
	if err != nil {
		t.Fatalf("events by field path %q, want two: %v", got, err)
	}
	for path, note := range want {
		if !strings.HasPrefix(got[path], note) {
			t.Errorf("event on %s: %q, want it to start with %q", path, got[path], note)
		}
	}
}

// TestNotAppliedLongError: a hook error of 2 kB (the hook caps what it
// writes, but a record may hold up to hookrecord.MaxBytes) still makes an event
// the API server accepts: the note is cut to eventmsg.NoteLimit bytes on a
// rune boundary, with a marker, and keeps the container and node.
func TestNotAppliedLongError(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ name, err string }{
		{"ascii", strings.Repeat("write memory.swap.max: device or resource busy; ", 50)[:2048]},
		{"two-byte runes", strings.Repeat("é", 1024)},
		{"cut by the hook", strings.Repeat("ü", 1000)}, // hookrecord.Write keeps 1 kB of it
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			r := hookrecord.Record{Namespace: "ns", Pod: "p", PodUID: "u1", Container: "worker", Time: now, Error: tc.err}
			if tc.name == "cut by the hook" {
				if err := hookrecord.Write(dir, "c1", r); err != nil {
					t.Fatal(err)
				}
			} else {
				// As a hook of another version could leave it.
				data, err := json.Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(dir, hookrecord.Dir), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, hookrecord.Dir, "c1.json"), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rec := events.NewFakeRecorder(1)
			e := &Emitter{StateDir: dir, Node: "node-a", Recorder: rec, Now: func() time.Time { return now }}
			if n, err := e.Flush(ctx); err != nil || n != 1 {
				t.Fatalf("Flush = %d, %v", n, err)
			}
			note, ok := strings.CutPrefix(<-rec.Events, "Warning SwapNotApplied ")
			if !ok || len(note) > eventmsg.NoteLimit || !utf8.ValidString(note) ||
				!strings.HasPrefix(note, `Swap limit not applied to container "worker" on node "node-a": `) || !strings.HasSuffix(note, eventmsg.Marker) {
				t.Errorf("note of %d bytes (limit %d), valid UTF-8 %v: %q", len(note), eventmsg.NoteLimit, utf8.ValidString(note), note)
			}
		})
	}
}
