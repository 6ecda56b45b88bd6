package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
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
		{"over-granted on v1", func(r *limitReporter) {
			d := d
			d.Container.CgroupVersion, d.Found = 1, 1<<40
			r.NotRestored(context.Background(), d, fmt.Errorf("%w: %w", err, syscall.EBUSY))
		}, "SwapLimitNotRestored Swap limit of container"},
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

// TestOverGrantReported (cgroup v1): a container's limit that the kernel
// refuses to lower (its memory limit was lowered while it had memory
// swapped out) gets one SwapLimitNotRestored event that says what
// happened and what comes next, shows in dra_swap_limits_not_restored,
// dra_swap_over_granted_bytes and, for the claim's SwapApplied condition,
// in the claims' status (claimstatus.Writer.LimitNotHeld) while it lasts,
// and leaves all three when it is gone.
func TestOverGrantReported(t *testing.T) {
	ctx := context.Background()
	m := NewMetrics()
	s := &statusRecorder{}
	rec := events.NewFakeRecorder(10)
	r := &limitReporter{node: "node-a", metrics: m, recorder: rec, statuses: s}
	condition := func() string {
		t.Helper()
		text, ok := s.notHeld["worker"]
		if !ok {
			return "held"
		}
		return "not held: " + text
	}
	metrics := func(want string) {
		t.Helper()
		page := scrapeHandler(t, m)
		for _, line := range strings.Split(want, "\n") {
			if !strings.Contains(page, "\n"+line+"\n") {
				t.Errorf("metrics lack %q", line)
			}
		}
	}
	since := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	d := limitcheck.Drift{Container: hookstate.Container{ID: "0123456789abcdef", CgroupVersion: 1, Namespace: "ns", Pod: "p", PodUID: "uid", Name: "worker"},
		Found: 164 << 20, Want: 100 << 20, Trigger: "interval", Since: since, Attempts: 1}
	err := fmt.Errorf("container ns/p/worker: set memory.memsw.limit_in_bytes to 171966464: %w", &os.PathError{Op: "write", Path: "memory.memsw.limit_in_bytes", Err: syscall.EBUSY})

	r.NotRestored(ctx, d, err)
	if len(rec.Events) != 1 {
		t.Fatalf("%d events, want one", len(rec.Events))
	}
	event := <-rec.Events
	for _, want := range []string{"Warning SwapLimitNotRestored", "is 164Mi, 64Mi more than its claims' 100Mi", "in-place resize", "at most 5 times over 15m30s",
		"whenever its memory+swap usage fits", "dra_swap_over_granted_bytes", "device or resource busy"} {
		if !strings.Contains(event, want) {
			t.Errorf("event %q does not say %q", event, want)
		}
	}
	metrics("dra_swap_limits_not_restored 1\ndra_swap_over_granted_bytes 6.7108864e+07")
	if got := condition(); !strings.HasPrefix(got, "not held: container worker: swap limit 164Mi, 64Mi more than its claims grant (100Mi), since 2026-11-27T12:00:00Z (1 writes failed): ") {
		t.Errorf("condition %q", got)
	}

	// A later failed attempt, with less over-granted: no event, the
	// figures follow.
	d.Found, d.Attempts = 132<<20, 2
	r.StillNotRestored(ctx, d)
	if len(rec.Events) != 0 {
		t.Errorf("an event for a later attempt: %q", <-rec.Events)
	}
	metrics("dra_swap_limits_not_restored 1\ndra_swap_over_granted_bytes 3.3554432e+07")
	if got := condition(); !strings.Contains(got, "swap limit 132Mi, 32Mi more") || !strings.Contains(got, "(2 writes failed): container ns/p/worker") {
		t.Errorf("condition %q", got)
	}

	r.Cleared(ctx, d)
	metrics("dra_swap_limits_not_restored 0\ndra_swap_over_granted_bytes 0")
	if got := condition(); got != "held" {
		t.Errorf("condition %q after it holds again, want held", got)
	}
	if len(rec.Events) != 0 {
		t.Errorf("an event when it holds again: %q", <-rec.Events)
	}
}

// statusRecorder records what the reporters tell the claims' status
// (limitStatuses, offloadStatuses).
type statusRecorder struct {
	notHeld   map[string]string // by container name ("" for the pod's budget)
	offloaded [][]offload.ClaimFigures
	interval  time.Duration
}

func (r *statusRecorder) LimitNotHeld(d limitcheck.Drift, text string) {
	if r.notHeld == nil {
		r.notHeld = map[string]string{}
	}
	r.notHeld[driftName(d)] = text
}

func (r *statusRecorder) LimitHeld(d limitcheck.Drift) { delete(r.notHeld, driftName(d)) }

func (r *statusRecorder) Offloaded(figures []offload.ClaimFigures, interval time.Duration) {
	r.offloaded = append(r.offloaded, figures)
	r.interval = interval
}

func driftName(d limitcheck.Drift) string {
	if d.Pod {
		return ""
	}
	return d.Container.Name
}
