package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/cdi"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/claimstatus"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/health"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/hookinstall"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/nri"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/podevents"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/prepare"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/swapdevice"
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
	// than the plugin that wrote it (see internal/hookargs.ParseArgs).
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
	// NodePressureFile is the node's memory PSI file as the plugin sees it
	// (the chart: /proc/pressure/memory, the plugin's own procfs, which
	// shows the kernel's system-wide PSI); empty: under the host root.
	NodePressureFile string
	// ClaimUsageMetrics exports the swap in use per prepared claim, one
	// series per claim (refreshed every VerifyInterval).
	ClaimUsageMetrics bool
	// OffloadInterval is how often the offload loop reads and offloads
	// the containers of claims with SwapConfig offload (0: no loop, and
	// such claims fail to prepare); Offload are its knobs, and
	// OffloadMaxPassBytes bounds what one pass reclaims on the node.
	OffloadInterval     time.Duration
	Offload             offload.Params
	OffloadMaxPassBytes int64
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
	if c.OffloadInterval < 0 {
		errs = append(errs, fmt.Errorf("offload interval %v must not be negative", c.OffloadInterval))
	}
	if c.OffloadInterval > 0 {
		if err := c.Offload.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("offload: %w", err))
		}
		if c.OffloadMaxPassBytes < c.Offload.MaxStepBytes {
			errs = append(errs, fmt.Errorf("offload: a pass's bound %d bytes must be at least one step, %d bytes", c.OffloadMaxPassBytes, c.Offload.MaxStepBytes))
		}
	}
	if c.NodePressureFile != "" && !filepath.IsAbs(c.NodePressureFile) {
		errs = append(errs, fmt.Errorf("node pressure file %q must be an absolute path", c.NodePressureFile))
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

// Plugin is the kubelet plugin: New builds it, Run starts it.
type Plugin struct {
	cfg    Config
	client kubernetes.Interface
	// facts are the node's facts when New discovered them: prepare's
	// cgroup version until the publisher's first sync.
	facts       discovery.Facts
	metrics     *Metrics
	node        *nodeWatch
	pods        *podSource
	broadcaster events.EventBroadcaster
	ledger      *nodeEventLedger // the Node events told and written (see exiting)
	store       *checkpoint.Store
	statuses    *claimstatus.Writer
	manager     *prepare.Manager
	publisher   *publish.Publisher
	verifier    *limitcheck.Verifier
	nri         *nri.Plugin      // nil: NRI off
	pressure    *pressureWatcher // nil: no pressure taints
	emitter     *podevents.Emitter
	usage       *usageReporter // nil: no per-claim usage metrics
	offload     *offload.Loop  // nil: no offload loop
	specs       *specReconciler
	prefetch    *claimPrefetch
	driver      *driver
	// hook checks that the installed hook runs (nil: the plugin does not
	// install it).
	hook *hookinstall.Check
	// failed receives the first fatal background error of the kubelet
	// plugin helper (driver.fatal); Run stops on it.
	failed chan error
}

// New validates the configuration, discovers the node's swap and builds
// every component of the plugin. It starts nothing and writes nothing, on
// the node or to the API server: what must precede the kubelet's first
// call (installing the hook, creating the directories, opening the
// checkpoint, the start-up sweep) is Run's first step. client-go's event
// broadcaster and the claim status queue run internal loops from their
// construction; Run ends them.
func New(ctx context.Context, cfg Config, client kubernetes.Interface) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	// The node offers offload (its attribute, prepare's check) while the
	// loop runs.
	cfg.Policy.Offload = cfg.OffloadInterval > 0
	facts, err := discovery.Discover(ctx, cfg.Discovery)
	if err != nil {
		return nil, fmt.Errorf("discover swap: %w", err)
	}
	p := &Plugin{cfg: cfg, client: client, facts: facts, metrics: NewMetrics(), prefetch: &claimPrefetch{client: client},
		failed: make(chan error, 1)}
	p.metrics.setKubeletConfigReadable(facts.SwapBehaviorProblem == "")
	if cfg.InstallHookFrom != "" {
		p.metrics.enableHookRuns()
		p.hook = &hookinstall.Check{Path: filepath.Join(cfg.Discovery.Root, cfg.HookPath), HostPath: cfg.HookPath, Runs: p.metrics.setHookRuns}
	}
	// What can fail comes first, so that a failing New leaves nothing
	// running.
	if p.node, err = newNodeWatch(client, cfg.NodeName); err != nil {
		return nil, err
	}
	if p.pods, err = newPodSource(client, cfg.NodeName); err != nil {
		return nil, err
	}
	writer, err := cdi.NewWriter(cfg.CDIDir, cfg.HookPath, cfg.HookStateDir)
	if err != nil {
		return nil, err
	}
	var monitor *pressure.Monitor
	if cfg.PressureInterval > 0 {
		if monitor, err = pressure.NewMonitor(cfg.Pressure); err != nil {
			return nil, fmt.Errorf("pressure taints: %w", err)
		}
	}
	background := cfg.BackgroundClient
	if background == nil {
		background = client
	}
	p.ledger = newNodeEventLedger()
	p.broadcaster = events.NewBroadcaster(ledgerSink{EventSink: &events.EventSinkImpl{Interface: background.EventsV1()}, ledger: p.ledger})
	recorder := p.broadcaster.NewRecorder(scheme.Scheme, cfg.DriverName)
	p.statuses = claimstatus.New(background, cfg.DriverName, cfg.NodeName, p.metrics.statusFailed)
	p.buildPrepare(writer, recorder)
	p.buildLimits(recorder)
	p.buildPublisher(ctx, recorder, monitor)
	p.specs = &specReconciler{manager: p.manager, cluster: apiCluster{pods: p.pods, client: client}, events: p.publisher.Reporter, metrics: p.metrics}
	p.driver = &driver{poolName: cfg.NodeName, manager: p.manager, publisher: p.publisher, metrics: p.metrics, fatal: p.fail,
		unprepared: p.statuses.Unprepared}
	return p, nil
}

// buildPrepare builds what answers the kubelet's calls.
func (p *Plugin) buildPrepare(writer *cdi.Writer, recorder events.EventRecorder) {
	p.store = checkpoint.NewStore(filepath.Join(p.cfg.PluginDataDir, "checkpoint.json"), p.facts.BootID)
	p.manager = prepare.NewManager(prepare.Options{
		DriverName:        p.cfg.DriverName,
		PoolName:          p.cfg.NodeName,
		Node:              preparedNode{p},
		AllowCriticalPods: p.cfg.AllowCriticalPods,
		Events:            podEventSink{recorder},
		Observer:          prepareObserver{metrics: p.metrics, statuses: p.statuses},
	}, writer, p.store, p.pods)
}

// buildLimits builds what keeps the limits true: the verifier, the NRI
// plugin, the hook's outcomes and the per-claim usage.
func (p *Plugin) buildLimits(recorder events.EventRecorder) {
	cfg := p.cfg
	p.verifier = &limitcheck.Verifier{
		StateDir:   cfg.HookStateDir,
		CgroupRoot: filepath.Join(rootOf(cfg.Discovery), "sys", "fs", "cgroup"),
		Reporter: &limitReporter{node: cfg.NodeName, metrics: p.metrics, recorder: recorder, statuses: p.statuses,
			initContainer: p.pods.initContainer},
	}
	if cfg.NRISocket != "" {
		p.nri = &nri.Plugin{SocketPath: cfg.NRISocket, HookPath: cfg.HookPath, StateDir: cfg.HookStateDir,
			CgroupVersion: p.facts.CgroupVersion, Verifier: p.verifier, Observer: p.metrics,
			LockPath: filepath.Join(cfg.PluginDataDir, "nri.lock")}
	}
	p.emitter = &podevents.Emitter{StateDir: cfg.HookStateDir, Node: cfg.NodeName, Recorder: recorder, Reported: p.statuses.Reported,
		InitContainer: p.pods.initContainer}
	if cfg.ClaimUsageMetrics {
		p.metrics.enableClaimUsage()
		p.usage = &usageReporter{stateDir: cfg.HookStateDir, cgroupRoot: p.verifier.CgroupRoot, store: p.store, metrics: p.metrics}
	}
	if cfg.OffloadInterval > 0 {
		p.metrics.enableOffload()
		p.offload = &offload.Loop{StateDir: cfg.HookStateDir, CgroupRoot: p.verifier.CgroupRoot, Claims: checkpointClaims{p.store},
			Params: cfg.Offload, Interval: cfg.OffloadInterval, MaxPassBytes: cfg.OffloadMaxPassBytes,
			Reporter: &offloadReporter{node: cfg.NodeName, interval: cfg.OffloadInterval, metrics: p.metrics.offload, statuses: p.statuses,
				recorder: recorder, initContainer: p.pods.initContainer}}
	}
}

// buildPublisher builds the ResourceSlice's publisher and, with monitor,
// the pressure taints' watcher.
func (p *Plugin) buildPublisher(ctx context.Context, recorder events.EventRecorder, monitor *pressure.Monitor) {
	cfg := p.cfg
	reporter := &nodeReporter{recorder: recorder, watch: p.node, metrics: p.metrics, ledger: p.ledger}
	p.publisher = &publish.Publisher{NodeName: cfg.NodeName, Policy: cfg.Policy, Reporter: reporter, Clock: clock.RealClock{},
		LockPath: filepath.Join(cfg.PluginDataDir, "publish.lock"),
		Node: &hostNode{discovery: cfg.Discovery, policy: cfg.Policy, metrics: p.metrics, watch: p.node, claims: p.manager,
			client: p.client, driverName: cfg.DriverName, hook: p.hook}}
	if monitor == nil {
		return
	}
	root := rootOf(cfg.Discovery)
	source := pressure.Source{Root: root, NodePressureFile: cfg.NodePressureFile, CgroupV2KubepodsPath: kubepodsCgroup(root, p.facts.CgroupVersion)}
	p.pressure = newPressureWatcher(source, monitor, p.metrics, reporter, clock.RealClock{})
	p.publisher.Taints = p.pressure
	klog.FromContext(ctx).Info("Watching memory pressure and swap use for the device's taints", "interval", cfg.PressureInterval,
		"nodePressureFile", source.NodePressureFile, "kubepodsCgroup", source.CgroupV2KubepodsPath, "config", cfg.Pressure)
}

// preparedNode is what prepare reads of the node (prepare.Node): the
// publisher's offer, and what the node supports from the publisher's
// facts. The kubelet may call before the first Sync: the facts fall back
// to New's discovery until the publisher has facts of its own.
type preparedNode struct{ p *Plugin }

func (n preparedNode) Offer() int64 { return n.p.publisher.Offer() }

func (n preparedNode) Support() v1alpha1.NodeSupport {
	facts := n.p.publisher.Facts()
	if facts.CgroupVersion == 0 {
		facts = n.p.facts
	}
	return swapdevice.Support(facts, n.p.cfg.Policy)
}

// prepareObserver passes what prepare did on to the metrics and the
// claims' status (prepare.Observer).
type prepareObserver struct {
	metrics  *Metrics
	statuses *claimstatus.Writer
}

func (o prepareObserver) Recorded(claims int, limitBytes int64) {
	o.metrics.setPrepared(claims, limitBytes)
}

func (o prepareObserver) Prepared(r prepare.ClaimReport) { o.statuses.Prepared(r) }

// fail stops Run with err (the first fatal error wins).
func (p *Plugin) fail(err error) {
	select {
	case p.failed <- err:
	default:
	}
}

// Run starts the plugin and runs it until ctx is canceled or a fatal error
// occurs. Call it once.
func (p *Plugin) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The probes answer from the start: a slow start-up is no reason to
	// be killed.
	probes := health.New(ctx)
	if p.nri != nil {
		probes.NRI = p.nri.Status
	}
	if p.cfg.MetricsAddress != "" {
		stop, err := health.Serve(ctx, p.cfg.MetricsAddress, p.metrics.Handler(), probes)
		if err != nil {
			return err
		}
		defer stop()
	}
	// One writer per slice: the instance holding the publish lock (see
	// Publisher.TakeOver). Given up after the helper stopped (defers run
	// last to first), whose ResourceSlice controller writes until then.
	defer p.publisher.Close()
	defer p.broadcaster.Shutdown()
	defer p.statuses.Stop()
	if err := p.startUp(ctx); err != nil {
		return err
	}
	helper, err := draplugin.Start(ctx, p.driver, p.helperOptions()...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	probes.Started(helper)
	// The first sync learns the offer for prepare; the publisher's loop
	// publishes once this instance holds the publish lock and has read
	// the published taints.
	if _, err := p.publisher.Sync(ctx); err != nil {
		p.exiting(ctx, err)
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	p.startLoops(ctx, &wg, helper)
	klog.FromContext(ctx).Info("Kubelet plugin running", "driver", p.cfg.DriverName, "node", p.cfg.NodeName, "cdiDir", p.cfg.CDIDir,
		"hook", p.cfg.HookPath, "nriSocket", p.cfg.NRISocket, "verifyInterval", p.cfg.VerifyInterval)
	select {
	case <-ctx.Done():
	case err := <-p.failed:
		p.exiting(ctx, err)
		cancel(err)
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// exiting runs before Run returns err. When the plugin exits on purpose,
// for its container to restart with the kubelet's configuration file that
// was replaced on the host, it first waits (at most nodeEventFlushTimeout
// in all) until the events that tell the Node so are written and the
// device it published last (the behavior Unknown, no swap) is in the API
// server: client-go writes both in the background, with the context Run
// cancels.
func (p *Plugin) exiting(ctx context.Context, err error) {
	if !errors.Is(err, discovery.ErrKubeletConfigReplaced) {
		return
	}
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, nodeEventFlushTimeout)
	defer cancel()
	if !p.ledger.wait(ctx, nodeEventFlushTimeout) {
		logger.Info("Not every Node event was written before exiting", "timeout", nodeEventFlushTimeout)
	}
	if want, _ := p.publisher.Device(); want != nil && p.publisher.IsWriter() {
		published := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := p.publisher.Node.Published(ctx)
			return err == nil && got != nil && sameOffer(got, want), nil
		})
		if published != nil {
			logger.Info("The device published last is not in the API server yet; exiting all the same", "timeout", nodeEventFlushTimeout)
		}
	}
	logger.Info("Exiting: the kubelet's configuration file was replaced on the host, and only a restarted container reads the new one", "err", err)
}

// sameOffer reports whether two swap devices offer the same capacity
// under the same kubelet swap behavior.
func sameOffer(a, b *resourceapi.Device) bool {
	ca, cb := a.Capacity[v1alpha1.CapacitySwap], b.Capacity[v1alpha1.CapacitySwap]
	return ca.Value.Cmp(cb.Value) == 0 &&
		ptr.Deref(a.Attributes[v1alpha1.AttrSwapBehavior].StringValue, "") == ptr.Deref(b.Attributes[v1alpha1.AttrSwapBehavior].StringValue, "")
}

// startUp does what must precede the kubelet's first call: the hook is
// installed before any CDI spec names it, the directories exist, the
// checkpoint is usable, the informers and the event recording run, and
// the start-up sweep removed what no plugin cleaned up.
func (p *Plugin) startUp(ctx context.Context) error {
	if err := p.installHook(ctx); err != nil {
		return err
	}
	if err := privateDir(ctx, p.cfg.HookStateDir); err != nil {
		return err
	}
	for _, dir := range []string{p.cfg.PluginDataDir, p.cfg.CDIDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	opened, err := openCheckpoint(ctx, p.store)
	if err != nil {
		return err
	}
	if err := p.node.start(ctx); err != nil {
		return err
	}
	if err := p.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("start event recording: %w", err)
	}
	if err := p.pods.start(ctx); err != nil {
		return err
	}
	p.sweep(ctx, opened)
	return nil
}

// installHook copies InstallHookFrom to HookPath under the host root and
// checks that it runs there.
func (p *Plugin) installHook(ctx context.Context) error {
	if p.cfg.InstallHookFrom == "" {
		return nil
	}
	logger := klog.FromContext(ctx)
	dst := filepath.Join(p.cfg.Discovery.Root, p.cfg.HookPath)
	installed, err := hookinstall.Install(p.cfg.InstallHookFrom, dst)
	if err != nil {
		return fmt.Errorf("install hook %s as %s: %w", p.cfg.InstallHookFrom, dst, err)
	}
	if installed {
		logger.Info("Hook installed", "from", p.cfg.InstallHookFrom, "to", dst)
	} else {
		logger.Info("Hook already installed, identical", "from", p.cfg.InstallHookFrom, "to", dst)
	}
	// A hook that does not run there is no reason to stop: the plugin
	// runs on, offering no swap and saying why (the publisher asks again).
	p.hook.Problem(ctx)
	return nil
}

// privateDir makes dir, the hook state directory, a directory that only
// its owner, this process's user (root on a node), may enter: created 0700
// when missing, and set to 0700 when it has another mode (the kubelet
// creates a hostPath directory 0755). Whoever could write there could
// forge the records that the hook, the verifier and the NRI plugin trust.
// A symlink, a non-directory or another owner is an error.
func privateDir(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create hook state directory %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("hook state directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("hook state directory %s is not a directory (%s)", dir, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("hook state directory %s belongs to uid %d, not to this process's uid %d", dir, st.Uid, os.Geteuid())
	}
	if mode := fi.Mode().Perm() | fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky); mode != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("make hook state directory %s private: %w", dir, err)
		}
		klog.FromContext(ctx).Info("Hook state directory made private", "path", dir, "mode", fmt.Sprintf("%#o", mode), "newMode", "0700")
	}
	return nil
}

// sweep runs at start-up: specs no confirmed checkpoint entry owns
// (reconciled: rebuilt, removed or kept, see specReconciler), the prepared
// claims' metrics, hook records of containers that are gone, limits that
// drifted while no plugin ran.
func (p *Plugin) sweep(ctx context.Context, opened checkpoint.Opened) {
	logger := klog.FromContext(ctx)
	p.specs.startUp(ctx, opened, p.store.Path())
	if claims, swapBytes, err := p.manager.Prepared(); err != nil {
		logger.Error(err, "Cannot read the prepared claims for the metrics")
	} else {
		p.metrics.setPrepared(claims, swapBytes)
	}
	if sum, err := p.verifier.CheckAll(ctx, "start-up", time.Minute); err != nil {
		logger.Error(err, "Verifying swap limits at start-up", "held", sum.Held, "restored", sum.Restored, "failed", sum.Failed)
	} else {
		logger.Info("Verified swap limits at start-up", "held", sum.Held, "restored", sum.Restored, "removedRecords", sum.Removed)
	}
}

// helperOptions configure the kubelet plugin helper.
func (p *Plugin) helperOptions() []draplugin.Option {
	opts := []draplugin.Option{
		draplugin.KubeClient(prefetchingClient{Interface: p.client}),
		draplugin.GRPCInterceptor(p.prefetch.interceptor),
		draplugin.NodeName(p.cfg.NodeName),
		draplugin.DriverName(p.cfg.DriverName),
		draplugin.RegistrarDirectoryPath(p.cfg.RegistrarDir),
		draplugin.PluginDataDirectoryPath(p.cfg.PluginDataDir),
		// The Manager handles concurrent calls (and the other instance's)
		// under the checkpoint's lock: independent pods' claims are looked
		// up and planned in parallel instead of one call at a time.
		draplugin.Serialize(false),
	}
	if p.cfg.PodUID != "" {
		opts = append(opts, draplugin.RollingUpdate(types.UID(p.cfg.PodUID)))
	}
	return opts
}

// startLoops starts the plugin's loops in wg; they end with ctx.
func (p *Plugin) startLoops(ctx context.Context, wg *sync.WaitGroup, helper *draplugin.Helper) {
	wg.Go(func() {
		if err := p.publisher.Run(ctx, helper, p.cfg.RescanInterval); err != nil {
			p.fail(err)
		}
	})
	// The hook's outcomes become events on the pods; the verifier and the
	// NRI plugin keep the limits true from here on.
	wg.Go(func() { p.statuses.Run(ctx) })
	wg.Go(func() { p.emitter.Run(ctx, time.Second) })
	wg.Go(func() { p.verifier.Run(ctx, p.cfg.VerifyInterval) })
	wg.Go(func() { p.specs.run(ctx, reconcileInterval) })
	if p.pressure != nil {
		// Sampling starts with publishing: the writer's monitor, seeded
		// with the published taints, is the one that decides them.
		wg.Go(func() {
			select {
			case <-ctx.Done():
			case <-p.publisher.Writing():
				p.pressure.run(ctx, p.cfg.PressureInterval)
			}
		})
	}
	if p.usage != nil {
		wg.Go(func() { p.usage.run(ctx, p.cfg.VerifyInterval) })
	}
	if p.offload != nil {
		// One loop per node: the instance that publishes (holds the
		// publish lock) offloads; during a rolling update the old one
		// stops before it gives the lock up (Run's defers).
		wg.Go(func() {
			select {
			case <-ctx.Done():
			case <-p.publisher.Writing():
				p.offload.Run(ctx)
			}
		})
	}
	if p.nri != nil {
		wg.Go(func() { p.nri.Run(ctx) })
	}
}

// rootOf is the host root the plugin reads under.
func rootOf(o discovery.Options) string {
	if o.Root == "" {
		return "/"
	}
	return o.Root
}

// openCheckpoint checks the checkpoint at start-up, under its lock. One a
// newer release wrote is an error: the plugin does not start. Any other
// unusable one is set aside and the plugin starts empty; the start-up
// sweep then rebuilds the entries of the claims whose CDI specs remain
// from the specs and the API server, and keeps the specs it cannot
// confirm (specReconciler), so that no running container loses its spec.
// The Manager reads the file on every call after that, so another plugin
// instance on the node can share it.
func openCheckpoint(ctx context.Context, store *checkpoint.Store) (checkpoint.Opened, error) {
	logger := klog.FromContext(ctx)
	opened, err := store.Open()
	switch {
	case err != nil:
		return opened, fmt.Errorf("open checkpoint: %w", err)
	case opened.Unusable != nil:
		logger.Error(opened.Unusable, "Checkpoint unusable; starting with no prepared claims, the CDI specs' claims are rebuilt or kept", "setAsideAs", opened.SetAside)
	case opened.Stale:
		logger.Info("Checkpoint is from an earlier boot; starting with no prepared claims", "path", store.Path())
	default:
		logger.Info("Checkpoint opened", "path", store.Path(), "preparedClaims", opened.Claims)
	}
	return opened, nil
}

// podEventSink records prepare's events on pods.
type podEventSink struct{ recorder events.EventRecorder }

func (s podEventSink) PodEvent(pod *corev1.Pod, eventType, reason, message string) {
	s.recorder.Eventf(pod, nil, eventType, reason, "PrepareSwapClaim", "%s", eventmsg.Truncate(message, eventmsg.NoteLimit))
}
