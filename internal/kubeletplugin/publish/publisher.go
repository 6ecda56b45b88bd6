// Package publish keeps the node's ResourceSlice in step with the node
// (Publisher): the swap device swapdevice builds from the node's facts,
// the overcommit taint and the taints a TaintSource adds, the Node events
// that say why, and the publish lock that lets one plugin instance of a
// node publish at a time. The plugin (internal/kubeletplugin) hands
// it the node, the events and the slice writer through small interfaces.
package publish

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

// Node is what the Publisher reads of the node it describes.
type Node interface {
	// Discover reads the node's current swap facts.
	Discover(ctx context.Context) (discovery.Facts, error)
	// Labels returns the Node's current labels (nil when unknown).
	Labels() map[string]string
	// Changed fires when the Node's labels change.
	Changed() <-chan struct{}
	// PreparedSwap returns the swap the node's prepared claims hold;
	// above the offer, the device gets TaintOvercommitted.
	PreparedSwap() (int64, error)
	// Published returns the node's device as currently published (nil if
	// none is). TakeOver calls it once it holds the publish lock, so the
	// first publish keeps the taints published before.
	Published(ctx context.Context) (*resourceapi.Device, error)
}

// EventSink records events on the Node.
type EventSink interface {
	// NodeEvent records an event on the Node. The action names the taint
	// (taintAction): the events API folds events with the same regarding
	// object, reason and action into one series that keeps the first
	// note, so two taints must not share an action.
	NodeEvent(eventType, reason, action, message string)
}

// Reporter is told what the Publisher decided: the Node's events and,
// after each check, whether the device carries TaintOvercommitted (for
// the metrics).
type Reporter interface {
	EventSink
	Overcommitted(tainted bool)
}

// TaintSource adds taints to the device (the pressure taints), each
// keeping its TimeAdded while it stays.
type TaintSource interface {
	Taints() []resourceapi.DeviceTaint
	// Seed is handed the published device's taints when this instance
	// takes over publishing (TaintOvercommitted is the Publisher's own).
	Seed(ctx context.Context, published []resourceapi.DeviceTaint)
	// Changed fires when a taint came or went.
	Changed() <-chan struct{}
}

// SliceWriter publishes the node's ResourceSlice: the kubelet plugin
// helper (*kubeletplugin.Helper), once started.
type SliceWriter interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

// Publisher keeps the node's ResourceSlice in step with the node: it
// rediscovers the swap facts periodically (and whenever the Node's labels
// change) and republishes only when the device changed.
type Publisher struct {
	NodeName string
	Policy   swapdevice.Policy
	// Node is the node described (required).
	Node Node
	// Reporter, if set, is told the events and the overcommit taint.
	Reporter Reporter
	// Taints, if set, adds the pressure taints.
	Taints TaintSource
	// Clock is the clock (clock.RealClock when nil).
	Clock clock.PassiveClock

	// LockPath, if set, is the node's publish lock: a file every plugin
	// instance on the node locks (flock) before it writes the node's
	// ResourceSlice. During a rolling update the old and the new instance
	// run together, and two ResourceSlice controllers publishing one pool
	// undo each other's writes; so an instance publishes only while it
	// holds the lock (see TakeOver). Without it, TakeOver does not wait.
	LockPath string
	// LockRetry is how often TakeOver tries the lock (time.Second).
	LockRetry time.Duration

	taints  deviceTaints
	mu      sync.Mutex
	state   publishedState
	writing chan struct{} // closed once this instance publishes
	// slices is where Sync publishes, set by TakeOver: nil while another
	// instance publishes.
	slices SliceWriter
	unlock func()

	// configUnreadable is the kubelet configuration's state the writer
	// told the Node of last (false, readable, before the first sync).
	configUnreadable bool
	// behavior is the kubelet's swap behavior the writer told the Node
	// of last (NoSwap, which needs no event, before the first sync).
	behavior string
	// hookNotRunnable is the hook's state the writer told the Node of
	// last (false, runs, before the first sync).
	hookNotRunnable bool
}

// Event reasons on the Node.
const (
	ReasonOvercommitted     = "SwapOvercommitted"
	ReasonOvercommitCleared = "SwapOvercommitCleared"
	// ReasonKubeletConfigUnreadable: the kubelet's swap behavior cannot
	// be told, published as Unknown; ReasonKubeletConfigRead: it can
	// again.
	ReasonKubeletConfigUnreadable = "KubeletConfigUnreadable"
	ReasonKubeletConfigRead       = "KubeletConfigRead"
	// actionReadKubeletConfig is those events' action, which no taint
	// event shares (see NodeEvent).
	actionReadKubeletConfig = "ReadKubeletConfig"
	// ReasonSwapBehaviorConflict: the kubelet's swap behavior gives
	// containers swap of its own, so the node offers none (the device is
	// tainted TaintKubeletSwapBehavior); ReasonSwapOfferedUnsafely: it is
	// offered all the same, as the policy says (UnsafeOfferUnder);
	// ReasonSwapBehaviorConflictCleared: the behavior is NoSwap again.
	ReasonSwapBehaviorConflict        = "SwapBehaviorConflict"
	ReasonSwapOfferedUnsafely         = "SwapOfferedUnsafely"
	ReasonSwapBehaviorConflictCleared = "SwapBehaviorConflictCleared"
	// ReasonHookNotRunnable: the installed hook does not run, the node
	// offers no swap; ReasonHookRuns: it runs again. Action actionRunHook.
	ReasonHookNotRunnable = "HookNotRunnable"
	ReasonHookRuns        = "HookRuns"
	actionRunHook         = "RunHook"
)

type publishedState struct {
	synced bool
	// published reports that device is what this instance published
	// last; a sync before this instance became the writer computes the
	// device (for Offer and Device) without publishing it.
	published bool
	device    *resourceapi.Device
	reason    string
	facts     discovery.Facts
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

// Overcommit returns the value of the device's TaintOvercommitted
// ("held-768Mi-offered-512Mi") and whether the device carries it: the
// decision checkOvercommit took at the last sync of the writer.
func (p *Publisher) Overcommit() (string, bool) {
	return p.taints.value(v1alpha1.TaintOvercommitted)
}

// Offer returns the swap the published device offers (0 on a node that
// offers none), or -1 before the first sync.
func (p *Publisher) Offer() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.state.synced || p.state.device == nil {
		return -1
	}
	return offerOf(p.state.device, p.state.reason)
}

// offerOf is the swap a device offers: its capacity, 0 when it offers
// none (reason says why).
func offerOf(device *resourceapi.Device, reason string) int64 {
	if q, ok := device.Capacity[v1alpha1.CapacitySwap]; ok && reason == "" {
		return q.Value.Value()
	}
	return 0
}

// Sync discovers the node's facts and publishes them if they changed. It
// reports whether it published. Not safe for concurrent use: Run calls it
// from one goroutine. When what it reads of the kubelet's configuration is
// a file replaced on the host since (discovery.ErrKubeletConfigReplaced),
// it publishes what it knows (the behavior Unknown) and returns that
// error: only a restarted container sees the new file.
func (p *Publisher) Sync(ctx context.Context) (bool, error) {
	published, facts, err := p.sync(ctx)
	if err == nil && facts.KubeletConfigReplaced {
		err = fmt.Errorf("read the kubelet's configuration on node %s: %w", p.NodeName, discovery.ErrKubeletConfigReplaced)
	}
	return published, err
}

func (p *Publisher) sync(ctx context.Context) (bool, discovery.Facts, error) {
	logger := klog.FromContext(ctx)
	facts, err := p.Node.Discover(ctx)
	if err != nil {
		return false, facts, fmt.Errorf("discover swap on node %s: %w", p.NodeName, err)
	}
	device, reason := swapdevice.Device(facts, maps.Clone(p.Node.Labels()), p.Policy)
	slices := p.writer()
	if slices == nil {
		// Another instance publishes: know the offer, leave the taints
		// and their events to the writer.
		p.mu.Lock()
		p.state = publishedState{synced: true, device: device, reason: reason, facts: facts}
		p.mu.Unlock()
		return false, facts, nil
	}
	p.checkOvercommit(ctx, offerOf(device, reason), reason)
	p.checkKubeletConfig(facts)
	p.checkSwapBehavior(ctx, facts, offerOf(device, reason))
	p.checkHook(facts)
	device.Taints = append(device.Taints, p.taints.list()...)
	if p.Taints != nil && reason == "" {
		device.Taints = append(device.Taints, p.Taints.Taints()...)
	}
	p.mu.Lock()
	unchanged := p.state.published && equality.Semantic.DeepEqual(device, p.state.device)
	if facts.SwapBehaviorProblem != "" && facts.SwapBehaviorProblem != p.state.facts.SwapBehaviorProblem {
		logger.Info("Cannot tell the kubelet's swap behavior; publishing it as Unknown", "problem", facts.SwapBehaviorProblem)
	}
	p.state.facts = facts
	p.mu.Unlock()
	if unchanged {
		return false, facts, nil
	}
	if err := slices.PublishResources(ctx, swapdevice.Resources(p.NodeName, device)); err != nil {
		return false, facts, fmt.Errorf("publish ResourceSlice of node %s: %w", p.NodeName, err)
	}
	if reason != "" {
		logger.Info("Node offers no swap: publishing its device with zero capacity, tainted", "node", p.NodeName, "taints", taintKeys(device.Taints),
			"reason", reason, "swapBehavior", facts.SwapBehavior)
	} else {
		q := device.Capacity[v1alpha1.CapacitySwap].Value
		logger.Info("Publishing swap device", "node", p.NodeName, "offer", q.String(),
			"totalBytes", facts.TotalBytes, "swapBehavior", facts.SwapBehavior, "cgroupVersion", facts.CgroupVersion, "medium", facts.Medium)
	}
	p.mu.Lock()
	p.state = publishedState{synced: true, published: true, device: device, reason: reason, facts: facts}
	p.mu.Unlock()
	return true, facts, nil
}

// taintKeys lists the taints' keys.
func taintKeys(taints []resourceapi.DeviceTaint) []string {
	keys := make([]string, 0, len(taints))
	for _, t := range taints {
		keys = append(keys, t.Key)
	}
	return keys
}

// checkOvercommit taints the device while the prepared claims hold more
// swap than the node offers, telling the Node when it starts and ends;
// reason says why the node offers none, if it does not.
func (p *Publisher) checkOvercommit(ctx context.Context, offer int64, reason string) {
	prepared, err := p.Node.PreparedSwap()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot read the prepared claims; keeping the overcommit taint as it is")
		return
	}
	if p.Reporter != nil {
		defer func() { p.Reporter.Overcommitted(p.taints.has(v1alpha1.TaintOvercommitted)) }()
	}
	if prepared > offer {
		value := fmt.Sprintf("held-%dMi-offered-%dMi", prepared>>20, offer>>20)
		if p.taints.set(v1alpha1.TaintOvercommitted, value, p.now()) {
			cause := "its swap shrank or was turned off"
			if reason != "" {
				cause = "it offers none: " + reason
			}
			msg := eventmsg.Note("Swap claims prepared on the node hold %s but the node offers %s now: "+
				"its swap device is tainted %s:NoSchedule, so no new swap claim is allocated here until swap returns or claims end (%s)",
				quantity(prepared), quantity(offer), v1alpha1.TaintOvercommitted, cause)
			klog.FromContext(ctx).Info("Swap overcommitted: tainting the device", "node", p.NodeName, "prepared", prepared, "offer", offer)
			p.nodeEvent(corev1.EventTypeWarning, ReasonOvercommitted, TaintAction("Taint", v1alpha1.TaintOvercommitted), msg)
		}
		return
	}
	if p.taints.clear(v1alpha1.TaintOvercommitted) {
		klog.FromContext(ctx).Info("Swap no longer overcommitted: taint removed", "node", p.NodeName, "prepared", prepared, "offer", offer)
		p.nodeEvent(corev1.EventTypeNormal, ReasonOvercommitCleared, TaintAction("Untaint", v1alpha1.TaintOvercommitted), fmt.Sprintf(
			"The node offers %s of swap again and its swap claims hold %s: taint %s removed", quantity(offer), quantity(prepared), v1alpha1.TaintOvercommitted))
	}
}

// checkKubeletConfig tells the Node when the kubelet's configuration
// becomes unreadable (at the first check too) and when it is read again:
// once per change, not on every rescan; readable from the start is the
// normal case, worth no event. A file replaced on the host is told in any
// case: the plugin exits on it.
func (p *Publisher) checkKubeletConfig(facts discovery.Facts) {
	unreadable := facts.SwapBehaviorProblem != ""
	// A replaced file is told in any case: the plugin exits on it.
	if unreadable == p.configUnreadable && !facts.KubeletConfigReplaced {
		return
	}
	p.configUnreadable = unreadable
	if unreadable {
		advice := "Point --kubelet-config and --kubelet-config-dir (the chart's kubeletPlugin.kubeletConfig) at where this node keeps the kubelet's configuration"
		if facts.KubeletConfigReplaced {
			advice = "The plugin exits, and its restarted container reads the new file"
		}
		p.nodeEvent(corev1.EventTypeWarning, ReasonKubeletConfigUnreadable, actionReadKubeletConfig, eventmsg.Note(
			"Cannot tell the kubelet's swap behavior, so the node's swap device is published with swapBehavior %s "+
				"(the node label %s stays as it is): %s. %s", v1alpha1.SwapBehaviorUnknown, v1alpha1.LabelSwapBehavior, facts.SwapBehaviorProblem, advice))
		return
	}
	p.nodeEvent(corev1.EventTypeNormal, ReasonKubeletConfigRead, actionReadKubeletConfig, eventmsg.Note(
		"The kubelet's configuration is readable again: swapBehavior %s is published", facts.SwapBehavior))
}

// checkSwapBehavior tells the Node when the kubelet's swap behavior
// changes to one under which the node offers no swap (a Warning saying
// why and how to fix it), to one under which the policy offers it all the
// same (a Warning saying what that risks), and back to NoSwap (Normal);
// NoSwap from the start is the normal case, worth no event. Each event's
// action names the behavior, so that the events API does not fold a
// second behavior's event into the first one's series (see NodeEvent).
func (p *Publisher) checkSwapBehavior(ctx context.Context, facts discovery.Facts, offer int64) {
	behavior := facts.SwapBehavior
	last := p.behavior
	if last == "" {
		last = v1alpha1.SwapBehaviorNoSwap
	}
	if behavior == last {
		return
	}
	p.behavior = behavior
	logger := klog.FromContext(ctx)
	if behavior == v1alpha1.SwapBehaviorNoSwap {
		logger.Info("The kubelet's swap behavior is NoSwap: swap is offered to claims alone", "node", p.NodeName, "previous", last, "offer", offer)
		p.nodeEvent(corev1.EventTypeNormal, ReasonSwapBehaviorConflictCleared, TaintAction("Untaint", v1alpha1.TaintKubeletSwapBehavior), eventmsg.Note(
			"The kubelet's memorySwap.swapBehavior is NoSwap (it was %s): containers without a swap claim get no swap, so the node's swap is sold to claims "+
				"alone; it offers %s (taint %s removed)", last, quantity(offer), v1alpha1.TaintKubeletSwapBehavior))
		return
	}
	if why := p.Policy.Withheld(behavior); why != "" {
		logger.Info("The kubelet's swap behavior gives containers swap of its own: the node offers none", "node", p.NodeName, "swapBehavior", behavior, "reason", why)
		fix := "set memorySwap.swapBehavior: NoSwap in the kubelet's configuration and restart the kubelet"
		switch {
		case facts.KubeletConfigReplaced:
			fix = "wait for the plugin's restart: its container reads the kubelet's configuration file that was replaced on the host, which must say memorySwap.swapBehavior: NoSwap"
		case behavior == v1alpha1.SwapBehaviorUnknown:
			fix = "point the chart's kubeletPlugin.kubeletConfig (--kubelet-config, --kubelet-config-dir) at the kubelet's configuration, which must say memorySwap.swapBehavior: NoSwap"
		}
		p.nodeEvent(corev1.EventTypeWarning, ReasonSwapBehaviorConflict, TaintAction("Taint", v1alpha1.TaintKubeletSwapBehavior)+behavior, eventmsg.Note(
			"The node offers no swap to claims: its swap device has capacity 0 and the taint %s=%s:NoSchedule, because %s. To sell swap here, %s "+
				"(the plugin follows within its rescan interval, no reinstall), or, accepting that risk, add %s to the chart's kubeletPlugin.unsafeOfferSwapUnder "+
				"(--unsafe-offer-swap-under)", v1alpha1.TaintKubeletSwapBehavior, behavior, swapdevice.SwapBehaviorRisk(behavior), fix, behavior))
		return
	}
	logger.Info("The kubelet's swap behavior gives containers swap of its own, but the node offers swap all the same as configured (--unsafe-offer-swap-under)",
		"node", p.NodeName, "swapBehavior", behavior, "offer", offer)
	p.nodeEvent(corev1.EventTypeWarning, ReasonSwapOfferedUnsafely, "OfferUnder"+behavior, eventmsg.Note(
		"The node offers %s of swap to claims although %s. It does because the chart's kubeletPlugin.unsafeOfferSwapUnder (--unsafe-offer-swap-under) names %s; "+
			"with memorySwap.swapBehavior: NoSwap in the kubelet's configuration it would be safe", quantity(offer), swapdevice.SwapBehaviorRisk(behavior), behavior))
}

// checkHook tells the Node when the installed hook does not run (the
// node then offers no swap; at the first check too) and when it runs
// again: once per change, not on every rescan.
func (p *Publisher) checkHook(facts discovery.Facts) {
	notRunnable := facts.HookProblem != ""
	if notRunnable == p.hookNotRunnable {
		return
	}
	p.hookNotRunnable = notRunnable
	if notRunnable {
		p.nodeEvent(corev1.EventTypeWarning, ReasonHookNotRunnable, actionRunHook, eventmsg.Note(
			"The node offers no swap (capacity 0, taint %s): %s", v1alpha1.TaintNoUsableSwap, facts.HookProblem))
		return
	}
	p.nodeEvent(corev1.EventTypeNormal, ReasonHookRuns, actionRunHook, "The installed hook runs: the node offers swap again")
}

func (p *Publisher) nodeEvent(eventType, reason, action, message string) {
	if p.Reporter != nil {
		p.Reporter.NodeEvent(eventType, reason, action, message)
	}
}

func (p *Publisher) now() time.Time {
	if p.Clock == nil {
		return time.Now()
	}
	return p.Clock.Now()
}

// TaintAction is an event's action for setting or removing a taint: the
// verb and the key's name in camel case ("dra.swap/swap-full" →
// "TaintSwapFull").
func TaintAction(verb, key string) string {
	name := key[strings.LastIndex(key, "/")+1:]
	var b strings.Builder
	b.WriteString(verb)
	for _, part := range strings.FieldsFunc(name, func(r rune) bool { return r == '-' || r == '.' || r == '_' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

func quantity(b int64) string { return resource.NewQuantity(b, resource.BinarySI).String() }

// Run takes over publishing to slices (TakeOver), then syncs at once,
// every interval and whenever the Node's labels or the taints change,
// until ctx ends. Errors are logged and retried at the next tick; the last
// published slice stays in place meanwhile. A kubelet configuration
// replaced on the host (discovery.ErrKubeletConfigReplaced) cannot be read
// again by this container: Run returns that error, for the plugin to exit
// and its container to restart with the new file mounted.
func (p *Publisher) Run(ctx context.Context, slices SliceWriter, interval time.Duration) error {
	logger := klog.FromContext(ctx)
	if err := p.TakeOver(ctx, slices); err != nil {
		return nil // ctx ended
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var taintsChanged <-chan struct{} // nil: never
	if p.Taints != nil {
		taintsChanged = p.Taints.Changed()
	}
	for {
		if _, err := p.Sync(ctx); errors.Is(err, discovery.ErrKubeletConfigReplaced) {
			return err
		} else if err != nil {
			logger.Error(err, "Swap rediscovery failed; keeping the last published state")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-p.Node.Changed():
		case <-taintsChanged:
		}
	}
}
