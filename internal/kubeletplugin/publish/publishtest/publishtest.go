// Package publishtest has the fakes that the publisher's tests and the
// kubelet plugin's share: a Node whose facts the test sets, and recorders
// of the slices written and the events told to the Node.
package publishtest

import (
	"context"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
)

// Facts are a node's facts with total bytes of swap on one partition.
func Facts(total int64) discovery.Facts {
	f := discovery.Facts{TotalBytes: total, Medium: discovery.MediumSSD, CgroupVersion: 2, SwapControl: true,
		KernelVersion: "6.8.0", SwapBehavior: v1alpha1.SwapBehaviorNoSwap, BootID: "b"}
	if total > 0 {
		f.Devices = []discovery.SwapDevice{{Path: "/dev/sda2", Type: "partition", SizeBytes: total}}
	}
	return f
}

// Node is a publish.Node whose facts, labels and prepared swap the test sets.
type Node struct {
	Facts      discovery.Facts
	Err        error
	NodeLabels map[string]string
	Prepared   int64
	// Publish, if set, returns the published device (none otherwise).
	Publish func(context.Context) (*resourceapi.Device, error)
}

func (n *Node) Discover(context.Context) (discovery.Facts, error) { return n.Facts, n.Err }
func (n *Node) Labels() map[string]string                         { return n.NodeLabels }
func (n *Node) Changed() <-chan struct{}                          { return nil }
func (n *Node) PreparedSwap() (int64, error)                      { return n.Prepared, nil }

func (n *Node) Published(ctx context.Context) (*resourceapi.Device, error) {
	if n.Publish == nil {
		return nil, nil
	}
	return n.Publish(ctx)
}

// SliceRecorder is a publish.SliceWriter that keeps what it is given.
type SliceRecorder struct {
	mu        sync.Mutex
	Published []resourceslice.DriverResources
}

func (r *SliceRecorder) PublishResources(_ context.Context, resources resourceslice.DriverResources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Published = append(r.Published, resources)
	return nil
}

// NodeEvent is an event told to the Node.
type NodeEvent struct{ EventType, Reason, Action, Message string }

// EventRecorder is a publish.Reporter that keeps the events.
type EventRecorder struct {
	Events []NodeEvent
	// Tainted is what Overcommitted was last told.
	Tainted bool
}

func (r *EventRecorder) NodeEvent(eventType, reason, action, message string) {
	r.Events = append(r.Events, NodeEvent{eventType, reason, action, message})
}

func (r *EventRecorder) Overcommitted(tainted bool) { r.Tainted = tainted }
