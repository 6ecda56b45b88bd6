// Package podevents carries the outcome of the OCI hook to the pod as a
// Kubernetes Event. The hook runs inside the container runtime with no API
// access, so it drops a small record into a directory on the node; the
// kubelet plugin picks the records up and emits a Normal "SwapApplied" or
// a Warning "SwapNotApplied" event on the pod, then deletes them.
package podevents

import (
	"context"
	"encoding/json"
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
)

// Event reasons.
const (
	ReasonApplied    = "SwapApplied"
	ReasonNotApplied = "SwapNotApplied"
	// Dir is the records' directory under the hook state directory; the
	// leading dot keeps it apart from container IDs.
	Dir = ".events"

	maxRecordBytes = 8 << 10
	maxErrorLen    = 1024
)

// Record is what the hook reports about one container.
type Record struct {
	Namespace  string `json:"namespace"`
	Pod        string `json:"pod"`
	PodUID     string `json:"podUID"`
	Container  string `json:"container"`
	LimitBytes int64  `json:"limitBytes"`
	// PodLimitBytes is the pod's swap budget, when its containers share one.
	PodLimitBytes *int64 `json:"podLimitBytes,omitempty"`
	// Claims are the UIDs of the container's dra.swap claims (or, when the
	// hook failed, of the claim whose hook failed).
	Claims        []string  `json:"claims,omitempty"`
	CgroupVersion int       `json:"cgroupVersion,omitempty"`
	Error         string    `json:"error,omitempty"`
	Time          time.Time `json:"time"`
}

// FromAnnotations fills in the pod and container from the CRI annotations
// in the OCI state (containerd's, then CRI-O's). ok is false for a
// container that is not a Kubernetes one.
func FromAnnotations(a map[string]string) (Record, bool) {
	for _, k := range [][4]string{
		{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.sandbox-uid", "io.kubernetes.cri.container-name"},
		{"io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.pod.uid", "io.kubernetes.container.name"},
	} {
		r := Record{Namespace: a[k[0]], Pod: a[k[1]], PodUID: a[k[2]], Container: a[k[3]]}
		if r.Namespace != "" && r.Pod != "" && r.PodUID != "" && r.Container != "" {
			return r, true
		}
	}
	return Record{}, false
}

// Write stores the record for a container atomically under stateDir,
// replacing an earlier one (each claim's hook run rewrites it with the
// container's new total).
func Write(stateDir, containerID string, r Record) error {
	r.Error = eventmsg.Truncate(r.Error, maxErrorLen)
	dir := filepath.Join(stateDir, Dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create event directory %s: %w", dir, err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode event record: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("event record in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write event record %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write event record %s: %w", tmp.Name(), err)
	}
	final := filepath.Join(dir, containerID+".json")
	if err := os.Rename(tmp.Name(), final); err != nil {
		return fmt.Errorf("store event record %s: %w", final, err)
	}
	return nil
}

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
	Reported func(r Record)
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
	dir := filepath.Join(e.StateDir, Dir)
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

func read(path string) (Record, error) {
	var r Record
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	data := make([]byte, maxRecordBytes+1)
	n, err := f.Read(data)
	if err != nil && n == 0 {
		return r, fmt.Errorf("read %s: %w", path, err)
	}
	if n > maxRecordBytes {
		return r, fmt.Errorf("%s is larger than %d bytes", path, maxRecordBytes)
	}
	if err := json.Unmarshal(data[:n], &r); err != nil {
		return r, fmt.Errorf("decode %s: %w", path, err)
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

func (e *Emitter) emit(r Record) {
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
