package publish

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish/publishtest"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

// One writer per slice: of two publishers on one node (a rolling update),
// only the one holding the publish lock publishes; the other computes the
// offer but publishes nothing until the first gives the lock up, then it
// starts from what the first published.
func TestPublisherOneWriter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	lock := filepath.Join(t.TempDir(), "publish.lock")
	total := int64(1 << 30)
	api := &fakeAPI{}
	newPublisher := func() *instance {
		c := &instance{api: api, node: &publishtest.Node{Facts: publishtest.Facts(total), Publish: api.read}}
		c.p = &Publisher{NodeName: "node-a", Policy: swapdevice.Policy{OvercommitRatio: 1}, LockPath: lock, LockRetry: time.Millisecond, Node: c.node}
		return c
	}
	old, updated := newPublisher(), newPublisher()
	if err := old.p.TakeOver(ctx, old); err != nil {
		t.Fatal(err)
	}
	// The lock is held: a take-over that may not wait fails.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := updated.p.TakeOver(canceled, updated); err == nil {
		t.Fatal("the new instance took over while the old one holds the publish lock")
	}
	tookOver := make(chan error, 1)
	go func() { tookOver <- updated.p.TakeOver(ctx, updated) }()
	for i, size := range []int64{1 << 30, 2 << 30, 3 << 30} {
		total = size
		for _, c := range []*instance{old, updated} {
			c.node.Facts = publishtest.Facts(total)
			if _, err := c.p.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if old.calls != i+1 || updated.calls != 0 {
			t.Fatalf("swap %d: publishes old %d, new %d; want %d and 0", size, old.calls, updated.calls, i+1)
		}
		if got := updated.p.Offer(); got != size {
			t.Errorf("the waiting instance's offer is %d, want %d", got, size)
		}
	}
	select {
	case <-updated.p.Writing():
		t.Fatal("the new instance became a writer while the old one holds the lock")
	default:
	}
	old.p.Close()
	if err := <-tookOver; err != nil {
		t.Fatal(err)
	}
	<-updated.p.Writing()
	for _, c := range []*instance{old, updated} {
		if _, err := c.p.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if old.calls != 3 || updated.calls != 1 {
		t.Errorf("after the old instance closed: publishes old %d, new %d; want 3 and 1", old.calls, updated.calls)
	}
	updated.p.Close()
}

// fakeAPI holds the device TestPublisherOneWriter's instances publish.
type fakeAPI struct {
	mu   sync.Mutex
	last *resourceapi.Device
}

func (a *fakeAPI) read(context.Context) (*resourceapi.Device, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last, nil
}

// instance is one plugin instance of TestPublisherOneWriter: its
// publisher, its node and its writes to the API.
type instance struct {
	p     *Publisher
	node  *publishtest.Node
	api   *fakeAPI
	calls int
}

func (i *instance) PublishResources(_ context.Context, r resourceslice.DriverResources) error {
	i.api.mu.Lock()
	defer i.api.mu.Unlock()
	i.calls++
	i.api.last = &r.Pools["node-a"].Slices[0].Devices[0]
	return nil
}
