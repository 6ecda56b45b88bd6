package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
)

// TestLimitEventsBounded: the verifier's events fit the API server's
// 1,024-byte limit on a note, also with a long error (a cgroup path and the
// kernel's answer, wrapped) and the longest names.
func TestLimitEventsBounded(t *testing.T) {
	long := strings.Repeat("n", 253)
	d := limitcheck.Drift{Container: hookstate.Container{Namespace: strings.Repeat("s", 63), Pod: long, PodUID: "uid", Name: strings.Repeat("c", 63)},
		Found: -1, Want: 100 << 20, Trigger: "interval"}
	err := fmt.Errorf("write /sys/fs/cgroup/%s/memory.swap.max: %w", strings.Repeat("kubepods.slice/", 100), errors.New("device or resource busy"))
	for _, tc := range []struct {
		name   string
		report func(r *limitReporter)
		want   string
	}{
		{"not restored", func(r *limitReporter) { r.NotRestored(context.Background(), d, err) }, "SwapLimitNotRestored Swap limit of container"},
		{"not restored, pod budget", func(r *limitReporter) { d := d; d.Pod = true; r.NotRestored(context.Background(), d, err) }, "SwapLimitNotRestored The pod's shared swap budget"},
		{"restored", func(r *limitReporter) { r.Restored(context.Background(), d) }, "SwapLimitRestored Swap limit of container"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(1)
			tc.report(&limitReporter{node: long, metrics: NewMetrics(), recorder: rec})
			note, ok := strings.CutPrefix(<-rec.Events, "Warning ")
			if !ok || !strings.HasPrefix(note, tc.want) {
				t.Fatalf("event %q, want it to start with %q", note, tc.want)
			}
			note = note[strings.Index(note, " ")+1:]
			if len(note) > eventmsg.NoteLimit || !utf8.ValidString(note) {
				t.Errorf("note of %d bytes (limit %d): %q", len(note), eventmsg.NoteLimit, note)
			}
		})
	}
}

// TestPodEventSinkBounded: prepare's events reach the pod within the note
// limit whatever their text.
func TestPodEventSinkBounded(t *testing.T) {
	rec := events.NewFakeRecorder(1)
	podEventSink{recorder: rec}.PodEvent(&corev1.Pod{}, corev1.EventTypeNormal, "SwapNotGranted", strings.Repeat("ä", 1500))
	note := strings.TrimPrefix(<-rec.Events, "Normal SwapNotGranted ")
	if len(note) > eventmsg.NoteLimit || !utf8.ValidString(note) || !strings.HasSuffix(note, eventmsg.Marker) {
		t.Errorf("note of %d bytes (limit %d), valid UTF-8 %v", len(note), eventmsg.NoteLimit, utf8.ValidString(note))
	}
}
