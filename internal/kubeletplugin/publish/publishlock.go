package publish

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/filelock"
)

// TakeOver makes this instance the writer of the node's ResourceSlice:
// Sync publishes to slices only after it. It waits until it holds the
// publish lock (LockPath; another instance on the node holds it during a
// rolling update, until that process exits or calls Close), then reads
// the device as published (Node.Published, retried until it succeeds) and
// seeds the taints found on it, so that the first publish keeps them. It
// returns ctx's error if ctx ends first. Call it once.
func (p *Publisher) TakeOver(ctx context.Context, slices SliceWriter) error {
	logger := klog.FromContext(ctx)
	retry := p.LockRetry
	if retry <= 0 {
		retry = time.Second
	}
	if p.LockPath != "" {
		unlock, err := lockFile(ctx, p.LockPath, retry, func() {
			logger.Info("Another plugin instance on the node publishes its ResourceSlice; waiting for it to stop", "lock", p.LockPath)
		})
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.unlock = unlock
		p.mu.Unlock()
	}
	for {
		device, err := p.Node.Published(ctx)
		if err == nil {
			p.seed(ctx, device)
			break
		}
		logger.Error(err, "Cannot read the node's published ResourceSlice; retrying before publishing, so as not to drop its taints", "retry", retry)
		select {
		case <-ctx.Done():
			p.Close()
			return fmt.Errorf("read the published ResourceSlice of node %s: %w", p.NodeName, context.Cause(ctx))
		case <-time.After(retry):
		}
	}
	p.mu.Lock()
	p.slices = slices
	p.mu.Unlock()
	close(p.writingChan())
	return nil
}

// seed starts from the taints of the published device: the overcommit
// taint here, the others through Taints.Seed.
func (p *Publisher) seed(ctx context.Context, device *resourceapi.Device) {
	if device == nil {
		return
	}
	var keys []string
	for _, t := range device.Taints {
		keys = append(keys, t.Key+"="+t.Value)
		if t.Key != v1alpha1.TaintOvercommitted {
			continue
		}
		since := p.now()
		if t.TimeAdded != nil {
			since = t.TimeAdded.Time
		}
		p.taints.set(t.Key, t.Value, since)
	}
	if p.Taints != nil {
		p.Taints.Seed(ctx, device.Taints)
	}
	klog.FromContext(ctx).Info("Publishing the node's ResourceSlice from now on, starting from the published taints", "node", p.NodeName, "taints", keys)
}

// Writing is closed once this instance is the writer (TakeOver returned).
func (p *Publisher) Writing() <-chan struct{} { return p.writingChan() }

func (p *Publisher) writingChan() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.writing == nil {
		p.writing = make(chan struct{})
	}
	return p.writing
}

// writer returns where Sync publishes, nil while this instance is not the
// writer.
func (p *Publisher) writer() SliceWriter {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slices
}

// IsWriter reports whether this instance publishes now: it took over and
// has not closed.
func (p *Publisher) IsWriter() bool { return p.writer() != nil }

// Close gives up the publish lock; Sync publishes no more. Call it after
// the kubelet plugin helper stopped, whose ResourceSlice controller
// writes what was published last until then.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slices = nil
	if p.unlock != nil {
		p.unlock()
		p.unlock = nil
	}
}

// lockFile takes path's exclusive flock, trying every retry until it gets
// it or ctx ends; waiting is called once when it has to wait. Locks taken
// through different open files exclude each other, also within one
// process; the lock lasts until unlock or the process ends.
func lockFile(ctx context.Context, path string, retry time.Duration, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	told := false
	var lockErr error // flock(2)'s error other than "held"
	err = filelock.Poll(ctx, f, filelock.Exclusive, retry, func(err error) bool {
		if !errors.Is(err, filelock.ErrHeld) {
			lockErr = err
			return false
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		return true
	})
	switch {
	case err == nil:
		return func() { f.Close() }, nil
	case lockErr != nil:
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, lockErr)
	default:
		f.Close()
		return nil, fmt.Errorf("wait for lock %s: %w", path, err)
	}
}

// PublishedDevice returns the node's swap device as published in the
// driver's ResourceSlices (the slice of the pool named after the node with
// the highest pool generation), nil when none is published.
func PublishedDevice(ctx context.Context, client kubernetes.Interface, driverName, nodeName string) (*resourceapi.Device, error) {
	selector := fields.AndSelectors(
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, driverName),
		fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, nodeName),
	)
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: selector.String()})
	if err != nil {
		return nil, fmt.Errorf("list the ResourceSlices of driver %s on node %s: %w", driverName, nodeName, err)
	}
	var found *resourceapi.Device
	generation := int64(-1)
	for i := range list.Items {
		s := &list.Items[i]
		if s.Spec.Driver != driverName || s.Spec.NodeName == nil || *s.Spec.NodeName != nodeName ||
			s.Spec.Pool.Name != nodeName || s.Spec.Pool.Generation <= generation {
			continue
		}
		for j := range s.Spec.Devices {
			if s.Spec.Devices[j].Name == v1alpha1.DeviceName {
				found, generation = s.Spec.Devices[j].DeepCopy(), s.Spec.Pool.Generation
			}
		}
	}
	return found, nil
}
