package kubeletplugin

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/hookinstall"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
)

// nodeWatch follows the plugin's Node through an informer that lists
// and watches that one object.
type nodeWatch struct {
	name    string
	factory informers.SharedInformerFactory
	lister  listersv1.NodeLister
	synced  cache.InformerSynced
	// changed fires when the Node's labels change (buffered, one).
	changed chan struct{}
}

// newNodeWatch sets up the informer; start starts it.
func newNodeWatch(client kubernetes.Interface, nodeName string) (*nodeWatch, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
	}))
	informer := factory.Core().V1().Nodes()
	w := &nodeWatch{name: nodeName, factory: factory, lister: informer.Lister(), synced: informer.Informer().HasSynced,
		changed: make(chan struct{}, 1)}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { signal(w.changed) },
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*corev1.Node), newObj.(*corev1.Node)
			if !maps.Equal(o.Labels, n.Labels) {
				signal(w.changed)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watch node %s: %w", nodeName, err)
	}
	return w, nil
}

// start starts the informer and waits for its first list.
func (w *nodeWatch) start(ctx context.Context) error {
	return startInformer(ctx, w.factory, w.synced, "watch node "+w.name)
}

// informerSyncTimeout bounds the wait for an informer's first list.
const informerSyncTimeout = time.Minute

// startInformer starts factory's informers and waits, at most
// informerSyncTimeout, until synced; what names the informer in the error.
func startInformer(ctx context.Context, factory informers.SharedInformerFactory, synced cache.InformerSynced, what string) error {
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, informerSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced) {
		return fmt.Errorf("%s: cache did not sync", what)
	}
	return nil
}

// signal wakes whoever waits on ch (buffered, one) without blocking: a
// signal already pending stands for this one too.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// get returns the Node, nil when the cache does not hold it.
func (w *nodeWatch) get() *corev1.Node {
	node, err := w.lister.Get(w.name)
	if err != nil {
		return nil
	}
	return node
}

// hostNode is the Publisher's Node on a real node: the host's swap read
// under the host root (feeding the node's metrics), the Node object from
// the informer, the prepared claims from the checkpoint, the published
// device from the API server.
type hostNode struct {
	discovery  discovery.Options
	policy     swapdevice.Policy
	metrics    *Metrics
	watch      *nodeWatch
	claims     preparedClaims
	client     kubernetes.Interface
	driverName string
	// hook, if set, checks that the hook the plugin installed runs.
	hook *hookinstall.Check
}

// preparedClaims are the claims prepared on the node (*prepare.Manager).
type preparedClaims interface {
	Prepared() (claims int, swapBytes int64, err error)
}

var _ publish.Node = (*hostNode)(nil)

func (n *hostNode) Discover(ctx context.Context) (discovery.Facts, error) {
	f, err := discovery.Discover(ctx, n.discovery)
	if err == nil && n.hook != nil {
		f.HookProblem = n.hook.Problem(ctx)
	}
	if err == nil {
		offer, _ := n.policy.NodeOffer(f)
		n.metrics.setNode(offer, f.TotalBytes, f.UsedBytes)
		n.metrics.setKubeletConfigReadable(f.SwapBehaviorProblem == "")
	}
	return f, err
}

func (n *hostNode) Labels() map[string]string {
	if node := n.watch.get(); node != nil {
		return node.Labels
	}
	return nil
}

func (n *hostNode) Changed() <-chan struct{} { return n.watch.changed }

func (n *hostNode) PreparedSwap() (int64, error) {
	_, swapBytes, err := n.claims.Prepared()
	return swapBytes, err
}

func (n *hostNode) Published(ctx context.Context) (*resourceapi.Device, error) {
	return publish.PublishedDevice(ctx, n.client, n.driverName, n.watch.name)
}

// nodeReporter is the Publisher's Reporter: events on the Node (with its
// UID once the informer has it) and the overcommit metric.
type nodeReporter struct {
	recorder events.EventRecorder
	watch    *nodeWatch
	metrics  *Metrics
	// ledger, if set, counts the events told (see Plugin.exiting).
	ledger *nodeEventLedger
}

var _ publish.Reporter = (*nodeReporter)(nil)

func (r *nodeReporter) NodeEvent(eventType, reason, action, message string) {
	ref := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: r.watch.name}}
	if n := r.watch.get(); n != nil {
		ref.UID = n.UID
	}
	if r.ledger != nil {
		r.ledger.tell(reason)
	}
	r.recorder.Eventf(ref, nil, eventType, reason, action, "%s", eventmsg.Truncate(message, eventmsg.NoteLimit))
}

func (r *nodeReporter) Overcommitted(tainted bool) { r.metrics.setOvercommitted(tainted) }
