// Package podevents carries the outcome of the OCI hook to the pod as a
// Kubernetes Event. The hook runs inside the container runtime with no API
// access, so it drops a small record into a directory on the node
// (internal/hookrecord); the kubelet plugin picks the records up and emits
// a Normal "SwapApplied" or a Warning "SwapNotApplied" event on the pod,
// then deletes them.
package podevents

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
)

// Event reasons.
const (
	ReasonApplied    = "SwapApplied"
	ReasonNotApplied = "SwapNotApplied"
)

// Emitter turns records into events on the pods.
type Emitter struct {
	// StateDir is the hook state directory (records are in StateDir/.events).
	StateDir string
	Node     string
	Recorder events.EventRecorder
	// MaxAge drops records older than this without an event (10m).
	MaxAge time.Duration
	// Reported, if set, is told about every record emitted (for the
	// claims' status).
	Reported func(r hookrecord.Record)
	Now      func() time.Time
	// InitContainer, if set, says whether the pod's container is an init
	// (or sidecar) container, for the event's field path; without it
	// every container is taken for one of spec.containers.
	InitContainer func(namespace, pod, container string) bool
}

// ContainerRef is the reference an event about one container of a pod
// regards: the pod with the container's field path, as the kubelet's own
// container events have it. The field path keeps events about two
// containers of one pod apart: the events API folds events with the same
// regarding object, reason and action into one series that keeps the
// first note, so without it the second container's event would only
// raise the first one's count.
func ContainerRef(namespace, pod, uid, container string, init bool) *corev1.ObjectReference {
	ref := PodRef(namespace, pod, uid)
	ref.FieldPath = "spec.containers{" + container + "}"
	if init {
		ref.FieldPath = "spec.initContainers{" + container + "}"
	}
	return ref
}

// PodRef is the reference an event about the pod as a whole regards.
func PodRef(namespace, pod, uid string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: pod, UID: types.UID(uid)}
}

// Flush emits an event for every record and deletes it. A malformed record
// is logged and deleted. It returns how many events it emitted.
func (e *Emitter) Flush(ctx context.Context) (int, error) {
	logger := klog.FromContext(ctx)
	dir := filepath.Join(e.StateDir, hookrecord.Dir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read event records in %s: %w", dir, err)
	}
	now, maxAge := time.Now(), e.MaxAge
	if e.Now != nil {
		now = e.Now()
	}
	if maxAge <= 0 {
		maxAge = 10 * time.Minute
	}
	emitted := 0
	for _, entry := range entries {
		name := entry.Name()
		if !entry.Type().IsRegular() || !strings.HasSuffix(name, ".json") {
			continue // temporary files of a hook still writing
		}
		path := filepath.Join(dir, name)
		r, err := read(path)
		switch {
		case err != nil:
			logger.Error(err, "Dropping malformed hook event record", "path", path)
		case now.Sub(r.Time) > maxAge:
			logger.V(2).Info("Dropping stale hook event record", "path", path, "time", r.Time)
		default:
			e.emit(r)
			if e.Reported != nil {
				e.Reported(r)
			}
			emitted++
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return emitted, fmt.Errorf("remove event record %s: %w", path, err)
		}
	}
	return emitted, nil
}

// read is hookrecord.Read of a record that names a pod the API could hold.
func read(path string) (hookrecord.Record, error) {
	r, err := hookrecord.Read(path)
	if err != nil {
		return r, err
	}
	for _, v := range []struct{ what, value string }{{"namespace", r.Namespace}, {"pod", r.Pod}} {
		if errs := validation.IsDNS1123Subdomain(v.value); len(errs) > 0 {
			return r, fmt.Errorf("%s: %s %q: %s", path, v.what, v.value, strings.Join(errs, "; "))
		}
	}
	if r.Container == "" || r.PodUID == "" {
		return r, fmt.Errorf("%s: no container or pod UID", path)
	}
	return r, nil
}

func (e *Emitter) emit(r hookrecord.Record) {
	init := e.InitContainer != nil && e.InitContainer(r.Namespace, r.Pod, r.Container)
	pod := ContainerRef(r.Namespace, r.Pod, r.PodUID, r.Container, init)
	if r.Error != "" {
		e.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonNotApplied, "ApplySwapLimit", "%s",
			eventmsg.Note("Swap limit not applied to container %q on node %q: %s", r.Container, e.Node, r.Error))
		return
	}
	limit := resource.NewQuantity(r.LimitBytes, resource.BinarySI)
	budget := ""
	if r.PodLimitBytes != nil {
		budget = fmt.Sprintf("; the pod's containers share a swap budget of %s", resource.NewQuantity(*r.PodLimitBytes, resource.BinarySI))
	}
	e.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, ReasonApplied, "ApplySwapLimit", "%s",
		eventmsg.Note("Swap limit %s applied to container %q on node %q (cgroup v%d)%s", limit.String(), r.Container, e.Node, r.CgroupVersion, budget))
}

// Run flushes every interval until ctx ends.
func (e *Emitter) Run(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if _, err := e.Flush(ctx); err != nil {
			logger.Error(err, "Emitting swap events failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
