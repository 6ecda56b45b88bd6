package driver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/nri"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/prepare"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
	"github.com/dra-driver-swap/dra-driver-swap/internal/podevents"
)

// Config is the kubelet plugin's configuration (its command-line flags).
type Config struct {
	DriverName string
	NodeName   string
	// PodUID enables seamless rolling updates of the DaemonSet.
	PodUID string
	// Discovery says where the host's /proc, /sys and kubelet config are.
	Discovery discovery.Options
	// Policy is what the node offers.
	Policy swapdevice.Policy
	// RescanInterval is how often the node's swap is rediscovered.
	RescanInterval time.Duration
	// CDIDir is where the per-claim CDI specs are written.
	CDIDir string
	// HookPath is the host path of dra-swap-hook that the CDI specs name.
	HookPath string
	// HookStateDir is the host directory of the hook's per-container state.
	HookStateDir string
	// InstallHookFrom, if set, is copied to HookPath under the host root
	// at start-up, before any CDI spec is written, so that a DaemonSet
	// ships the hook with its image and a spec never names a hook older
	// than the plugin that wrote it (see internal/hook.ParseArgs).
	InstallHookFrom string
	// PluginDataDir holds the plugin's socket and checkpoint.
	PluginDataDir string
	// RegistrarDir is the kubelet's plugin registration directory.
	RegistrarDir string
	// AllowCriticalPods lets critical pods have swap.
	AllowCriticalPods bool
	// MetricsAddress serves /metrics and the probes /readyz and /healthz
	// when not empty (host:port).
	MetricsAddress string
	// NRISocket is the container runtime's NRI socket as the plugin sees
	// it; empty turns the NRI plugin off.
	NRISocket string
	// VerifyInterval is how often every prepared container's swap limit
	// is read back and restored if something rewrote it.
	VerifyInterval time.Duration
	// Pressure says when the swap device is tainted for memory pressure
	// or full swap; PressureInterval is how often it is sampled (0: never,
	// no pressure taints).
	Pressure         pressure.Config
	PressureInterval time.Duration
	// ClaimUsageMetrics exports the swap in use per prepared claim, one
	// series per claim (refreshed every VerifyInterval).
	ClaimUsageMetrics bool
	// BackgroundClient, if set, writes events and claim status: with a
	// rate limiter of its own, those writes never delay the claim reads
	// of the kubelet's calls.
	BackgroundClient kubernetes.Interface
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.DriverName == "" || c.NodeName == "" {
		errs = append(errs, errors.New("driver name and node name must be set"))
	}
	if c.RescanInterval <= 0 {
		errs = append(errs, fmt.Errorf("rescan interval %v must be positive", c.RescanInterval))
	}
	if c.VerifyInterval <= 0 {
		errs = append(errs, fmt.Errorf("verify interval %v must be positive", c.VerifyInterval))
	}
	if c.PressureInterval < 0 {
		errs = append(errs, fmt.Errorf("pressure interval %v must not be negative", c.PressureInterval))
	}
	if c.PressureInterval > 0 {
		if err := c.Pressure.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("pressure taints: %w", err))
		}
	}
	if c.NRISocket != "" && !filepath.IsAbs(c.NRISocket) {
		errs = append(errs, fmt.Errorf("NRI socket %q must be an absolute path", c.NRISocket))
	}
	for name, p := range map[string]string{"CDI directory": c.CDIDir, "hook path": c.HookPath, "hook state directory": c.HookStateDir,
		"plugin data directory": c.PluginDataDir, "registrar directory": c.RegistrarDir} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q must be an absolute path", name, p))
		}
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run runs the kubelet plugin until ctx is canceled or a fatal error
// occurs.
func Run(ctx context.Context, cfg Config, client kubernetes.Interface) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The probes answer from the start: a slow start-up is no reason to
	// be killed.
	metrics := NewMetrics()
	probes := newProbes(ctx)
	if cfg.MetricsAddress != "" {
		stop, err := serveHTTP(ctx, cfg.MetricsAddress, metrics.Handler(), probes)
		if err != nil {
			return err
		}
		defer stop()
	}

	facts, err := discovery.Discover(ctx, cfg.Discovery)
	if err != nil {
		return fmt.Errorf("discover swap: %w", err)
	}
	metrics.setKubeletConfigReadable(facts.SwapBehaviorProblem == "")
	if cfg.InstallHookFrom != "" {
		dst := filepath.Join(cfg.Discovery.Root, cfg.HookPath)
		installed, err := installHook(cfg.InstallHookFrom, dst)
		if err != nil {
			return fmt.Errorf("install hook %s as %s: %w", cfg.InstallHookFrom, dst, err)
		}
		if installed {
			logger.Info("Hook installed", "from", cfg.InstallHookFrom, "to", dst)
		} else {
			logger.Info("Hook already installed, identical", "from", cfg.InstallHookFrom, "to", dst)
		}
	}
	for _, dir := range []string{cfg.PluginDataDir, cfg.CDIDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	store := checkpoint.NewStore(filepath.Join(cfg.PluginDataDir, "checkpoint.json"), facts.BootID)
	if err := openCheckpoint(ctx, store); err != nil {
		return err
	}
	writer, err := cdi.NewWriter(cfg.CDIDir, cfg.HookPath, cfg.HookStateDir)
	if err != nil {
		return err
	}

	node, trigger, err := watchNode(ctx, client, cfg.NodeName)
	if err != nil {
		return err
	}
	nodeLabels := func() map[string]string {
		if n := node(); n != nil {
			return n.Labels
		}
		return nil
	}
	// One writer per slice: the instance holding the publish lock (see
	// Publisher.TakeOver). Given up after the helper stopped (defers run
	// last to first), whose ResourceSlice controller writes until then.
	publisher := &Publisher{NodeName: cfg.NodeName, Policy: cfg.Policy, NodeLabels: nodeLabels,
		LockPath: filepath.Join(cfg.PluginDataDir, "publish.lock"),
		ReadPublished: func(ctx context.Context) (*resourceapi.Device, error) {
			return publishedDevice(ctx, client, cfg.DriverName, cfg.NodeName)
		}}
	defer publisher.Close()
	publisher.Discover = func(ctx context.Context) (discovery.Facts, error) {
		f, err := discovery.Discover(ctx, cfg.Discovery)
		if err == nil {
			metrics.setNode(cfg.Policy.Offer(f.TotalBytes), f.TotalBytes, f.UsedBytes)
			metrics.setKubeletConfigReadable(f.SwapBehaviorProblem == "")
		}
		return f, err
	}
	background := cfg.BackgroundClient
	if background == nil {
		background = client
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: background.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("start event recording: %w", err)
	}
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, cfg.DriverName)
	publisher.NodeEvent = func(eventType, reason, action, message string) {
		ref := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: cfg.NodeName}}
		if n := node(); n != nil {
			ref.UID = n.UID
		}
		recorder.Eventf(ref, nil, eventType, reason, action, "%s", eventmsg.Truncate(message, eventmsg.NoteLimit))
	}
	reporter := &limitReporter{node: cfg.NodeName, metrics: metrics, recorder: recorder}
	verifier := &limitcheck.Verifier{
		StateDir:   cfg.HookStateDir,
		CgroupRoot: filepath.Join(rootOf(cfg.Discovery), "sys", "fs", "cgroup"),
		Reporter:   reporter,
	}
	var nriPlugin *nri.Plugin
	if cfg.NRISocket != "" {
		nriPlugin = &nri.Plugin{SocketPath: cfg.NRISocket, HookPath: cfg.HookPath, StateDir: cfg.HookStateDir,
			CgroupVersion: facts.CgroupVersion, Verifier: verifier, Changed: metrics.setNRI,
			LockPath: filepath.Join(cfg.PluginDataDir, "nri.lock")}
		probes.nri = nriPlugin.Status
	}

	pods, err := watchPods(ctx, client, cfg.NodeName)
	if err != nil {
		return err
	}
	reporter.initContainer = pods.initContainer
	statuses := newClaimStatuses(background, cfg.DriverName, cfg.NodeName, metrics)
	manager := prepare.NewManager(prepare.Options{
		DriverName: cfg.DriverName,
		PoolName:   cfg.NodeName,
		// The kubelet may call before the first Sync: fall back to the
		// start-up discovery until the publisher has facts of its own.
		CgroupVersion: func() int {
			if v := publisher.Facts().CgroupVersion; v != 0 {
				return v
			}
			return facts.CgroupVersion
		},
		AllowCriticalPods: cfg.AllowCriticalPods,
		Recorded:          metrics.setPrepared,
		Offer:             publisher.Offer,
		Events:            podEventSink{recorder},
		Prepared:          statuses.prepared,
	}, writer, store, pods)
	publisher.Overcommitted = metrics.setOvercommitted
	var watcher *pressureWatcher
	if cfg.PressureInterval > 0 {
		monitor, err := pressure.NewMonitor(cfg.Pressure)
		if err != nil {
			return fmt.Errorf("pressure taints: %w", err)
		}
		root := rootOf(cfg.Discovery)
		watcher = &pressureWatcher{
			source:  pressure.Source{Root: root, CgroupV2KubepodsPath: kubepodsCgroup(root, facts.CgroupVersion)},
			monitor: monitor, metrics: metrics, nodeEvent: publisher.NodeEvent, kick: publisher.Kick, now: time.Now,
		}
		publisher.ExtraTaints = watcher.taints
		publisher.Seed = func(published []resourceapi.DeviceTaint) {
			if keys := watcher.seed(published); len(keys) > 0 {
				logger.Info("Keeping the pressure taints published before until they clear", "taints", keys)
			}
		}
		logger.Info("Watching memory pressure and swap use for the device's taints", "interval", cfg.PressureInterval,
			"kubepodsCgroup", watcher.source.CgroupV2KubepodsPath, "config", cfg.Pressure)
	}
	publisher.Prepared = func() (int64, error) {
		_, swapBytes, err := manager.Prepared()
		return swapBytes, err
	}
	d := &driver{poolName: cfg.NodeName, manager: manager, publisher: publisher, metrics: metrics, fatal: cancel, unprepared: statuses.unprepared}
	if claims, swapBytes, err := manager.Prepared(); err != nil {
		logger.Error(err, "Cannot read the prepared claims for the metrics")
	} else {
		metrics.setPrepared(claims, swapBytes)
	}

	// Start-up sweep: specs no checkpoint entry owns, hook records of
	// containers that are gone, limits that drifted while no plugin ran.
	if removed, err := manager.RemoveOrphanSpecs(); err != nil {
		logger.Error(err, "Removing CDI specs that no prepared claim owns")
	} else if len(removed) > 0 {
		logger.Info("Removed CDI specs that no prepared claim owns", "claims", removed)
	}
	if sum, err := verifier.CheckAll(ctx, "start-up", time.Minute); err != nil {
		logger.Error(err, "Verifying swap limits at start-up", "held", sum.Held, "restored", sum.Restored, "failed", sum.Failed)
	} else {
		logger.Info("Verified swap limits at start-up", "held", sum.Held, "restored", sum.Restored, "removedRecords", sum.Removed)
	}

	prefetch := &claimPrefetch{client: client}
	opts := []kubeletplugin.Option{
		kubeletplugin.KubeClient(prefetchingClient{Interface: client}),
		kubeletplugin.GRPCInterceptor(prefetch.interceptor),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.DriverName(cfg.DriverName),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDataDir),
		// The Manager handles concurrent calls (and the other instance's)
		// under the checkpoint's lock: independent pods' claims are looked
		// up and planned in parallel instead of one call at a time.
		kubeletplugin.Serialize(false),
	}
	if cfg.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(cfg.PodUID)))
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	probes.started(helper)
	publisher.Publish = helper.PublishResources

	// The first sync learns the offer for prepare; Run publishes once this
	// instance holds the publish lock and has read the published taints.
	if _, err := publisher.Sync(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { publisher.Run(ctx, cfg.RescanInterval, trigger) })

	// The hook's outcomes become events on the pods; the verifier and the
	// NRI plugin keep the limits true from here on.
	emitter := &podevents.Emitter{StateDir: cfg.HookStateDir, Node: cfg.NodeName, Recorder: recorder, Reported: statuses.reported,
		InitContainer: pods.initContainer}
	wg.Go(func() { statuses.run(ctx) })
	wg.Go(func() { emitter.Run(ctx, time.Second) })
	wg.Go(func() { verifier.Run(ctx, cfg.VerifyInterval) })
	if watcher != nil {
		// Sampling starts with publishing: the writer's monitor, seeded
		// with the published taints, is the one that decides them.
		wg.Go(func() {
			select {
			case <-ctx.Done():
			case <-publisher.Writing():
				watcher.run(ctx, cfg.PressureInterval)
			}
		})
	}
	if cfg.ClaimUsageMetrics {
		metrics.enableClaimUsage()
		usage := &usageReporter{stateDir: cfg.HookStateDir, cgroupRoot: verifier.CgroupRoot, store: store, metrics: metrics}
		wg.Go(func() { usage.run(ctx, cfg.VerifyInterval) })
	}
	if nriPlugin != nil {
		wg.Go(func() { nriPlugin.Run(ctx) })
	}
	logger.Info("Kubelet plugin running", "driver", cfg.DriverName, "node", cfg.NodeName, "cdiDir", cfg.CDIDir, "hook", cfg.HookPath,
		"nriSocket", cfg.NRISocket, "verifyInterval", cfg.VerifyInterval)
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// rootOf is the host root the plugin reads under.
func rootOf(o discovery.Options) string {
	if o.Root == "" {
		return "/"
	}
	return o.Root
}

// openCheckpoint checks the checkpoint at start-up, under its lock. One a
// newer release wrote is an error: the plugin does not start, since
// starting empty would remove the CDI specs of every claim it records.
// Any other unusable one is set aside and the plugin starts empty. Nothing
// is lost that matters: unprepare removes a claim's spec by its UID
// whether or not the checkpoint knows the claim. The Manager reads the
// file on every call after that, so another plugin instance on the node
// can share it.
func openCheckpoint(ctx context.Context, store *checkpoint.Store) error {
	logger := klog.FromContext(ctx)
	opened, err := store.Open()
	switch {
	case err != nil:
		return fmt.Errorf("open checkpoint: %w", err)
	case opened.Unusable != nil:
		logger.Error(opened.Unusable, "Checkpoint unusable; starting with no prepared claims", "setAsideAs", opened.SetAside)
	case opened.Stale:
		logger.Info("Checkpoint is from an earlier boot; starting with no prepared claims", "path", store.Path())
	default:
		logger.Info("Checkpoint opened", "path", store.Path(), "preparedClaims", opened.Claims)
	}
	return nil
}

// watchNode follows the Node; trigger fires when its labels change.
func watchNode(ctx context.Context, client kubernetes.Interface, nodeName string) (func() *corev1.Node, <-chan struct{}, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
	}))
	informer := factory.Core().V1().Nodes()
	trigger := make(chan struct{}, 1)
	notify := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { notify() },
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*corev1.Node), newObj.(*corev1.Node)
			if !maps.Equal(o.Labels, n.Labels) {
				notify()
			}
		},
	}); err != nil {
		return nil, nil, fmt.Errorf("watch node %s: %w", nodeName, err)
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.Informer().HasSynced) {
		return nil, nil, fmt.Errorf("watch node %s: cache did not sync", nodeName)
	}
	get := func() *corev1.Node {
		node, err := informer.Lister().Get(nodeName)
		if err != nil {
			return nil
		}
		return node
	}
	return get, trigger, nil
}

// podEventSink records prepare's events on pods.
type podEventSink struct{ recorder events.EventRecorder }

func (s podEventSink) PodEvent(pod *corev1.Pod, eventType, reason, message string) {
	s.recorder.Eventf(pod, nil, eventType, reason, "PrepareSwapClaim", "%s", eventmsg.Truncate(message, eventmsg.NoteLimit))
}
