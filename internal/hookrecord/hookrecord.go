// Package hookrecord is the record the OCI hook leaves on the node about
// one container's outcome, for the kubelet plugin to report: the hook runs
// inside the container runtime with no API access, so it writes a small
// JSON file per container into a directory under its state directory; the
// plugin's internal/kubeletplugin/podevents reads the files, emits a pod event for each
// and deletes them.
//
//	<state-dir>/.events/<container-id>.json   a Record (JSON)
//
// This package is what the hook links of that channel: it depends on no
// Kubernetes package, so that dra-swap-hook, which runs at every container
// start, stays small (make verify checks it, test/layers).
package hookrecord

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dra-driver-swap/dra-driver-swap/internal/atomicfile"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
)

const (
	// Dir is the records' directory under the hook state directory; the
	// leading dot keeps it apart from container IDs.
	Dir = ".events"
	// MaxBytes bounds a record file that Read accepts.
	MaxBytes = 8 << 10

	maxErrorLen = 1024
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
	return atomicfile.Replace(filepath.Join(dir, containerID+".json"), bytes.NewReader(data), 0o600, "event record")
}

// Read decodes the record file at path, of at most MaxBytes. It checks the
// encoding only: whether the names in it are ones the API could hold is
// for the reader that turns it into an event (internal/kubeletplugin/podevents).
func Read(path string) (Record, error) {
	var r Record
	data, err := atomicfile.ReadFile(path, MaxBytes)
	if err != nil {
		return r, err
	}
	if len(data) == 0 {
		return r, fmt.Errorf("read %s: empty file", path)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("decode %s: %w", path, err)
	}
	return r, nil
}
