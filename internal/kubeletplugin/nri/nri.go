// Package nri guards containers' swap limits from inside the
// container runtime through NRI (containerd 2.x and CRI-O serve it; on by
// default in containerd 2). It runs in the kubelet plugin's process:
//
//   - CreateContainer: the CDI spec of each of the container's dra.swap
//     claims has put the hook into the container's createRuntime hooks
//     with the claim's bytes; their sum goes into the OCI spec itself
//     (cgroup v2: linux.resources.unified["memory.swap.max"]; v1:
//     linux.resources.memory.swap = memory limit + sum). runc, and systemd
//     with the systemd cgroup driver, hold the right value from the start,
//     so a `systemctl daemon-reload` re-applies ours and not the kubelet's.
//     The hook still runs and writes the same value.
//   - UpdateContainer (the kubelet's UpdateContainerResources: in-place
//     resize, CPU manager): the update is corrected before the runtime
//     applies it (v2: memory.swap.max; containerd drops a v1 memory.swap in
//     an update, so on v1 the value is also set but does not hold).
//   - PostUpdateContainer: the container's verification (package limitcheck)
//     is queued, and a drifted limit restored, which is what keeps v1 right
//     after a resize.
//   - PostUpdateContainer, UpdatePodSandbox, PostUpdatePodSandbox: the pod is
//     watched for a while (podWatch), because the kubelet's update of the
//     pod's own cgroup, which resets its budget under systemd, follows.
//   - Synchronize (on every connection): every container is verified.
//
// The runtime holds its NRI lock, which every container create, update and
// stop on the node waits for, while it calls a plugin, and drops a plugin
// whose call outlives its request timeout (2 s). So no callback waits for
// anything: the verifications are queued and a worker runs them (see
// checkQueue), CreateContainer only parses the container's hooks, and
// UpdateContainer reads the container's records for at most CallbackBudget.
//
// The hook's records say which containers need which limit; the plugin
// keeps no state of its own. It decides nothing either: the numbers come
// from the CDI hook arguments the prepare path wrote, parsed by the hook's
// own parser.
package nri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1/limits"
	"github.com/dra-driver-swap/dra-driver-swap/internal/filelock"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookargs"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
)

// Name and Index register the plugin with the runtime.
const (
	Name  = "dra-swap"
	Index = "50"
)

// Verifier checks a container, or all, against the hook's records.
type Verifier interface {
	Check(ctx context.Context, containerID, trigger string) (limitcheck.Outcome, error)
	CheckAll(ctx context.Context, trigger string, minAge time.Duration) (limitcheck.Summary, error)
	CheckPods(ctx context.Context, podUIDs []string, trigger string) (limitcheck.Summary, error)
}

// Observer is told when the runtime registers the plugin or drops it
// (the plugin's metrics).
type Observer interface {
	NRIConnected(connected bool)
}

// Plugin is the NRI plugin.
type Plugin struct {
	// SocketPath is the runtime's NRI socket (api.DefaultSocketPath).
	SocketPath string
	// HookPath is the hook's path in the CDI specs: its createRuntime
	// hooks carry the claims' bytes.
	HookPath string
	// StateDir is the hook state directory as this process sees it.
	StateDir string
	// CgroupVersion is the node's (1 or 2).
	CgroupVersion int
	Verifier      Verifier
	// Retry is how long Run waits before connecting again (5s).
	Retry time.Duration
	// Observer, if set, is told when the registration comes or goes.
	Observer Observer
	// LockPath, if set, is a file that every plugin instance on the node
	// locks (flock) before it registers: during a rolling update the old
	// and the new instance run together, and two NRI plugins setting the
	// same field of a container make the runtime fail its creation. The
	// new instance registers once the old one is gone.
	LockPath string
	// PodWatchInterval and PodWatchWindow: after a pod's update the pod is
	// checked every interval for window (podWatch; zero: the defaults).
	PodWatchInterval, PodWatchWindow time.Duration

	connected atomic.Bool
	status    atomic.Pointer[string]
	// checks are the verifications the callbacks asked for (set by Run).
	checks *checkQueue
}

// CallbackBudget bounds how long UpdateContainer reads the container's
// records (a few small files on the hook state's tmpfs, whose pages a
// thrashing node may have swapped out) before it answers without a
// correction: a tenth of NRI's default request timeout (2 s). The queued
// verification restores the limit after the update then.
const CallbackBudget = 200 * time.Millisecond

// Connected reports whether the runtime has the plugin registered.
func (p *Plugin) Connected() bool { return p.connected.Load() }

// Status says in words whether NRI guards the limits, and if not why.
func (p *Plugin) Status() string {
	if s := p.status.Load(); s != nil {
		return *s
	}
	return "not started"
}

func (p *Plugin) setStatus(connected bool, format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	p.status.Store(&s)
	if p.connected.Swap(connected) != connected && p.Observer != nil {
		p.Observer.NRIConnected(connected)
	}
}

// Run connects to the runtime and serves it until ctx ends, connecting
// again after the runtime restarts. Without a socket it waits for one:
// the CDI hook still applies limits at create, the verifier still
// restores them, only the runtime-side guard is missing.
func (p *Plugin) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("nri")
	ctx = klog.NewContext(ctx, logger)
	retry := p.Retry
	if retry <= 0 {
		retry = 5 * time.Second
	}
	p.checks = newCheckQueue()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.checks.run(ctx, p.Verifier) })
	if p.LockPath != "" {
		unlock, err := p.lock(ctx, retry)
		if err != nil {
			return // ctx ended
		}
		defer unlock()
	}
	wasMissing, lastErr := false, ""
	for ctx.Err() == nil {
		if _, err := os.Stat(p.SocketPath); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				p.setStatus(false, "no NRI socket at %s: the runtime does not serve NRI (limits are set by the CDI hook at create and restored by the verifier)", p.SocketPath)
				if !wasMissing {
					logger.Info("No NRI socket; the runtime-side guard is off until it appears", "socket", p.SocketPath)
				}
				wasMissing = true
			} else {
				p.setStatus(false, "NRI socket %s: %v", p.SocketPath, err)
			}
		} else {
			wasMissing = false
			registered, err := p.serve(ctx)
			if registered {
				lastErr = "" // a new failure after a registration is news
			}
			p.setStatus(false, "not registered with the runtime over %s: %v; retrying every %v", p.SocketPath, err, retry)
			// Log a failure once, not on every retry.
			if msg := err.Error(); ctx.Err() == nil && msg != lastErr {
				logger.Info("Not registered with the runtime over NRI; retrying", "socket", p.SocketPath, "err", err, "retry", retry)
				lastErr = msg
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// lock takes LockPath's exclusive lock, trying every retry until it gets
// it or ctx ends. The lock lasts as long as the process or until unlock.
func (p *Plugin) lock(ctx context.Context, retry time.Duration) (unlock func(), err error) {
	logger := klog.FromContext(ctx)
	f, err := os.OpenFile(p.LockPath, os.O_RDWR|os.O_CREATE, 0o600)
	for err != nil {
		p.setStatus(false, "cannot open the NRI lock %s: %v", p.LockPath, err)
		logger.Error(err, "Cannot open the NRI lock; retrying", "path", p.LockPath)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retry):
		}
		f, err = os.OpenFile(p.LockPath, os.O_RDWR|os.O_CREATE, 0o600)
	}
	logged := false
	err = filelock.Poll(ctx, f, filelock.Exclusive, retry, func(err error) bool {
		if !errors.Is(err, filelock.ErrHeld) {
			p.setStatus(false, "cannot lock %s: %v", p.LockPath, err)
		} else {
			p.setStatus(false, "waiting for another plugin instance on this node to give up its NRI registration (%s)", p.LockPath)
		}
		if !logged {
			logger.Info("Another plugin instance holds the NRI registration; waiting for it to stop", "lock", p.LockPath)
			logged = true
		}
		return true
	})
	if err != nil {
		f.Close()
		return nil, ctx.Err()
	}
	return func() { f.Close() }, nil
}

// serve registers with the runtime and serves it until the connection or
// ctx ends; registered says whether the registration succeeded.
func (p *Plugin) serve(ctx context.Context) (registered bool, err error) {
	closed := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pods := newPodWatch(p.Verifier, p.PodWatchInterval, p.PodWatchWindow)
	go pods.run(ctx)
	s, err := stub.New(&handler{p: p, pods: pods}, stub.WithPluginName(Name), stub.WithPluginIdx(Index),
		stub.WithSocketPath(p.SocketPath), stub.WithOnClose(func() { close(closed) }),
		stub.WithLogger(logger{klog.FromContext(ctx)}))
	if err != nil {
		return false, fmt.Errorf("create NRI plugin: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		return false, fmt.Errorf("register with the runtime over %s: %w", p.SocketPath, err)
	}
	p.setStatus(true, "registered with the runtime over %s", p.SocketPath)
	klog.FromContext(ctx).Info("NRI plugin registered", "socket", p.SocketPath, "runtimeNRIVersion", s.RuntimeNRIVersion())
	select {
	case <-ctx.Done():
		s.Stop()
		return true, ctx.Err()
	case <-closed:
		s.Stop()
		return true, errors.New("the runtime closed the connection")
	}
}

// handler implements the stub's event interfaces.
type handler struct {
	p    *Plugin
	pods *podWatch
}

// Synchronize queues a verification of every container.
func (h *handler) Synchronize(_ context.Context, _ []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	h.p.checks.addAll("nri-synchronize")
	return nil, nil
}

func (h *handler) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust, total, err := CreateAdjustment(h.p.CgroupVersion, h.p.HookPath, pod.GetUid(), ctr)
	logger := klog.FromContext(ctx)
	if err != nil {
		// Not a reason to fail the container: the hook runs the same
		// arguments through the same parser and reports on the pod.
		logger.Error(err, "Cannot read the swap limit from the container's hooks", "pod", klog.KRef(pod.GetNamespace(), pod.GetName()), "container", ctr.GetName())
		return nil, nil, nil
	}
	if adjust != nil {
		logger.V(2).Info("Swap limit set in the container's spec", "pod", klog.KRef(pod.GetNamespace(), pod.GetName()), "container", ctr.GetName(), "swapBytes", total)
	}
	return adjust, nil, nil
}

func (h *handler) UpdateContainer(ctx context.Context, _ *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	limit, ok, timedOut := swapLimitWithin(h.p.StateDir, ctr.GetId(), CallbackBudget)
	if timedOut {
		klog.FromContext(ctx).Info("The container's hook records did not read in time; the update goes uncorrected and the limit is checked after it",
			"containerID", ctr.GetId(), "budget", CallbackBudget)
		h.p.checks.add(ctr.GetId())
	}
	if !ok {
		return nil, nil
	}
	return []*api.ContainerUpdate{UpdateFor(h.p.CgroupVersion, ctr.GetId(), limit, res)}, nil
}

// swapLimitWithin is swapLimit, given up after budget (timedOut): a read
// that is still blocked then finishes in the background.
func swapLimitWithin(stateDir, id string, budget time.Duration) (limit int64, ok, timedOut bool) {
	type result struct {
		limit int64
		ok    bool
	}
	done := make(chan result, 1)
	go func() {
		limit, ok := swapLimit(stateDir, id)
		done <- result{limit, ok}
	}()
	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.limit, r.ok, false
	case <-timer.C:
		return 0, false, true
	}
}

// swapLimit is the swap limit that the hook's records give the container
// id, and false when it has none: not a swap container, its hook has not
// run, or its records do not read (the update then leaves swap alone).
// It reads without the records' lock: each file is replaced atomically.
func swapLimit(stateDir, id string) (int64, bool) {
	dir, err := hookstate.Dir(stateDir, id)
	if err != nil {
		return 0, false
	}
	if _, err := hookstate.ReadContainer(dir); err != nil {
		return 0, false
	}
	totals, err := hookstate.Sum(dir)
	if err != nil || totals.Shares == 0 {
		return 0, false
	}
	return totals.Container.LimitBytes, true
}

// PostUpdateContainer queues a verification of the container.
func (h *handler) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	h.p.checks.add(ctr.GetId())
	// For a memory decrease the kubelet updates the pod's cgroup after
	// its containers.
	h.pods.touch(ctx, pod.GetUid())
	return nil
}

// UpdatePodSandbox comes right before the kubelet updates the pod's own
// cgroup (CRI-O sends it; containerd 2.2 does not).
func (h *handler) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, _, _ *api.LinuxResources) error {
	h.pods.touch(ctx, pod.GetUid())
	return nil
}

// PostUpdatePodSandbox, where a runtime sends it, comes after.
func (h *handler) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	h.pods.touch(ctx, pod.GetUid())
	return nil
}

// SwapFromHooks sums the swap limits of the container's createRuntime
// hooks that run hookPath (one per dra.swap claim allocation result; a
// share named twice counts once, as in the hook's records). n is how many
// there are. A hook that grants its claim to another pod than podUID
// makes the sum meaningless: errOtherPod (the hook refuses the container
// with the reason).
func SwapFromHooks(hookPath, podUID string, hooks *api.Hooks) (total int64, n int, err error) {
	seen := map[string]bool{}
	for _, h := range hooks.GetCreateRuntime() {
		if h.GetPath() != hookPath {
			continue
		}
		args := h.GetArgs()
		if len(args) > 0 {
			args = args[1:] // the program name
		}
		_, req, err := hookargs.ParseArgs(args)
		if err != nil {
			return 0, 0, fmt.Errorf("hook %s: %w", hookPath, err)
		}
		if req.Cleanup || seen[req.ShareKey()] {
			continue
		}
		seen[req.ShareKey()] = true
		if req.PodUID != "" && req.PodUID != podUID {
			return 0, 0, errOtherPod
		}
		if total > limits.MaxSwapBytes-req.Share.LimitBytes {
			return 0, 0, fmt.Errorf("hook %s: swap limits overflow", hookPath)
		}
		total += req.Share.LimitBytes
		n++
	}
	return total, n, nil
}

// errOtherPod: one of the container's claims is granted to another pod.
var errOtherPod = errors.New("a claim of the container is granted to another pod")

// CreateAdjustment is what the plugin changes in a new container's spec:
// nothing for a container without dra.swap claims, else its swap limit.
// On cgroup v1 the limit is memory+swap, so a container without a memory
// limit gets nothing here (the hook refuses it with the reason), and
// neither does a container of a pod that a claim is not granted to.
func CreateAdjustment(cgroupVersion int, hookPath, podUID string, ctr *api.Container) (*api.ContainerAdjustment, int64, error) {
	total, n, err := SwapFromHooks(hookPath, podUID, ctr.GetHooks())
	if errors.Is(err, errOtherPod) {
		return nil, 0, nil
	}
	if err != nil || n == 0 {
		return nil, 0, err
	}
	adjust := &api.ContainerAdjustment{}
	switch cgroupVersion {
	case 2:
		adjust.AddLinuxUnified("memory.swap.max", strconv.FormatInt(total, 10))
	case 1:
		limit := memoryLimit(ctr.GetLinux().GetResources())
		if limit <= 0 {
			return nil, total, nil
		}
		adjust.SetLinuxMemorySwap(limit + total)
	default:
		return nil, total, fmt.Errorf("unknown cgroup version %d", cgroupVersion)
	}
	return adjust, total, nil
}

// UpdateFor corrects an update of a container whose swap limit is want.
func UpdateFor(cgroupVersion int, containerID string, want int64, res *api.LinuxResources) *api.ContainerUpdate {
	u := &api.ContainerUpdate{ContainerId: containerID}
	// A failure here must not fail the kubelet's update (a resize): the
	// verifier restores the limit after it.
	u.SetIgnoreFailure()
	switch cgroupVersion {
	case 2:
		u.AddLinuxUnified("memory.swap.max", strconv.FormatInt(want, 10))
	case 1:
		if limit := memoryLimit(res); limit > 0 {
			u.SetLinuxMemorySwap(limit + want)
		}
	}
	return u
}

func memoryLimit(res *api.LinuxResources) int64 {
	if l := res.GetMemory().GetLimit(); l != nil {
		return l.GetValue()
	}
	return 0
}

// logger routes the NRI stub's messages to the plugin's logger.
type logger struct{ klog.Logger }

func (l logger) Debugf(_ context.Context, format string, args ...any) {
	l.V(4).Info(fmt.Sprintf(format, args...))
}
func (l logger) Infof(_ context.Context, format string, args ...any) {
	l.V(2).Info(fmt.Sprintf(format, args...))
}
func (l logger) Warnf(_ context.Context, format string, args ...any) {
	l.Info(fmt.Sprintf(format, args...), "severity", "warning")
}
func (l logger) Errorf(_ context.Context, format string, args ...any) {
	l.Error(nil, fmt.Sprintf(format, args...))
}
