package plugin

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/pkg/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/pkg/slice"
)

// Publisher keeps the node's ResourceSlice in step with the node: it
// rediscovers the swap facts periodically (and whenever the Node's labels
// change) and republishes only when the device changed.
type Publisher struct {
	NodeName string
	Policy   slice.Policy
	// Discover reads the node's current facts.
	Discover func(ctx context.Context) (discovery.Facts, error)
	// NodeLabels returns the Node's current labels (nil when unknown).
	NodeLabels func() map[string]string
	// Publish hands the resources to the kubelet plugin helper.
	Publish func(ctx context.Context, resources resourceslice.DriverResources) error

	mu    sync.Mutex
	state publishedState
}

type publishedState struct {
	synced bool
	device *resourceapi.Device
	reason string
	facts  discovery.Facts
}

// Facts returns the facts of the last successful sync.
func (p *Publisher) Facts() discovery.Facts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.facts
}

// Device returns the published device (nil before the first sync) and,
// when it offers no swap, why.
func (p *Publisher) Device() (*resourceapi.Device, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.device, p.state.reason
}

// Sync discovers the node's facts and publishes them if they changed. It
// reports whether it published. Not safe for concurrent use: Run calls it
// from one goroutine.
func (p *Publisher) Sync(ctx context.Context) (bool, error) {
	logger := klog.FromContext(ctx)
	facts, err := p.Discover(ctx)
	if err != nil {
		return false, fmt.Errorf("discover swap on node %s: %w", p.NodeName, err)
	}
	var labels map[string]string
	if p.NodeLabels != nil {
		labels = maps.Clone(p.NodeLabels())
	}
	device, reason := slice.Device(facts, labels, p.Policy)
	p.mu.Lock()
	unchanged := p.state.synced && equality.Semantic.DeepEqual(device, p.state.device)
	if facts.SwapBehaviorProblem != "" && facts.SwapBehaviorProblem != p.state.facts.SwapBehaviorProblem {
		logger.Info("Cannot tell the kubelet's swap behavior; publishing it as Unknown", "problem", facts.SwapBehaviorProblem)
	}
	p.state.facts = facts
	p.mu.Unlock()
	if unchanged {
		return false, nil
	}
	if err := p.Publish(ctx, slice.Resources(p.NodeName, device)); err != nil {
		return false, fmt.Errorf("publish ResourceSlice of node %s: %w", p.NodeName, err)
	}
	if reason != "" {
		logger.Info("Node offers no swap: publishing its device with zero capacity, tainted "+slice.TaintNoUsableSwap, "node", p.NodeName, "reason", reason, "swapBehavior", facts.SwapBehavior)
	} else {
		q := device.Capacity[slice.CapacitySwap].Value
		logger.Info("Publishing swap device", "node", p.NodeName, "offer", q.String(),
			"totalBytes", facts.TotalBytes, "swapBehavior", facts.SwapBehavior, "cgroupVersion", facts.CgroupVersion, "medium", facts.Medium)
	}
	p.mu.Lock()
	p.state = publishedState{synced: true, device: device, reason: reason, facts: facts}
	p.mu.Unlock()
	return true, nil
}

// Run syncs every interval and whenever trigger fires, until ctx ends.
// Errors are logged and retried at the next tick; the last published
// slice stays in place meanwhile.
func (p *Publisher) Run(ctx context.Context, interval time.Duration, trigger <-chan struct{}) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-trigger:
		}
		if _, err := p.Sync(ctx); err != nil {
			logger.Error(err, "Swap rediscovery failed; keeping the last published state")
		}
	}
}
