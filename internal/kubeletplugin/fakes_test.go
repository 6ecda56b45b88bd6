package kubeletplugin

import (
	"context"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
)

// facts are a node's facts with total bytes of swap on one partition.
func facts(total int64) discovery.Facts {
	f := discovery.Facts{TotalBytes: total, Medium: discovery.MediumSSD, CgroupVersion: 2, SwapControl: true,
		KernelVersion: "6.8.0", SwapBehavior: v1alpha1.SwapBehaviorNoSwap, BootID: "b"}
	if total > 0 {
		f.Devices = []discovery.SwapDevice{{Path: "/dev/sda2", Type: "partition", SizeBytes: total}}
	}
	return f
}

// fakeNode is a Node whose facts, labels and prepared swap the test sets.
type fakeNode struct {
	facts    discovery.Facts
	err      error
	labels   map[string]string
	prepared int64
	// published, if set, returns the published device (none otherwise).
	published func(context.Context) (*resourceapi.Device, error)
}

var _ publish.Node = (*fakeNode)(nil)

func (n *fakeNode) Discover(context.Context) (discovery.Facts, error) { return n.facts, n.err }
func (n *fakeNode) Labels() map[string]string                         { return n.labels }
func (n *fakeNode) Changed() <-chan struct{}                          { return nil }
func (n *fakeNode) PreparedSwap() (int64, error)                      { return n.prepared, nil }

func (n *fakeNode) Published(ctx context.Context) (*resourceapi.Device, error) {
	if n.published == nil {
		return nil, nil
	}
	return n.published(ctx)
}

// sliceRecorder is a SliceWriter that keeps what it is given.
type sliceRecorder struct {
	mu        sync.Mutex
	published []resourceslice.DriverResources
}

func (r *sliceRecorder) PublishResources(_ context.Context, resources resourceslice.DriverResources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.published = append(r.published, resources)
	return nil
}

// nodeEvent is an event told to the Node.
type nodeEvent struct{ eventType, reason, action, message string }

// eventRecorder is a Reporter that keeps the events.
type eventRecorder struct {
	events        []nodeEvent
	overcommitted bool
}

func (r *eventRecorder) NodeEvent(eventType, reason, action, message string) {
	r.events = append(r.events, nodeEvent{eventType, reason, action, message})
}

func (r *eventRecorder) Overcommitted(tainted bool) { r.overcommitted = tainted }
