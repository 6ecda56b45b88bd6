// Package claimstatus writes what the kubelet plugin granted and applied
// into the prepared claims' status.devices (Writer): the device status
// data and the SwapApplied condition, from prepare's reports, the hook's
// records, the verifier's limits that are not held and the offload loop's
// figures.
package claimstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/eventmsg"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookrecord"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/limitcheck"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/prepare"
)

// ConditionSwapApplied is the condition on each device status of a
// Prepared dra.swap claim: Unknown until the containers started, True when
// the hook applied the limit to every container that started, False with
// the reason otherwise (and for admin access, which grants nothing).
const ConditionSwapApplied = "SwapApplied"

// Condition reasons.
const (
	ReasonPrepared    = "Prepared"
	ReasonApplied     = "Applied"
	ReasonNotApplied  = "NotApplied"
	ReasonAdminAccess = "AdminAccess"
	// ReasonLimitNotHeld: a container's limit (or its pod's budget)
	// differs from its claims and could not be restored
	// (internal/kubeletplugin/limitcheck), until it holds again.
	ReasonLimitNotHeld = "LimitNotHeld"
)

// StatusFieldManager owns the driver's entries in claims' status.devices.
const StatusFieldManager = "dra.swap-kubeletplugin"

// DeviceStatusData is the data of a device's status: what the claim's
// allocation result grants, to whom, with which configuration.
type DeviceStatusData struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// LimitBytes is what the result grants (its consumed capacity).
	LimitBytes int64 `json:"swapBytes"`
	// AdminAccess: the result was allocated with admin access and grants
	// nothing.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// Pod is the pod the claim is granted to (namespace/name).
	Pod string `json:"pod,omitempty"`
	// Containers maps each container of the pod that gets the result to
	// its swap limit in bytes (the sum of all its claims).
	Containers map[string]int64 `json:"containers,omitempty"`
	// PodLimitBytes is the pod's budget, when its containers share a
	// claim.
	PodLimitBytes *int64 `json:"podSwapLimitBytes,omitempty"`
	// Config is the SwapConfig that took effect.
	Config *appliedConfig `json:"config,omitempty"`
	// Offload is what the offload loop does with the claim's containers
	// (config offload; written at most every offloadStatusPeriod).
	Offload *OffloadStatus `json:"offload,omitempty"`
}

// appliedConfig is the SwapConfig's knobs without its type meta.
type appliedConfig struct {
	SwapHighPercent *int32             `json:"swapHighPercent,omitempty"`
	Zswap           v1alpha1.ZswapMode `json:"zswap,omitempty"`
	Swappiness      *int64             `json:"swappiness,omitempty"`
	Offload         *v1alpha1.Offload  `json:"offload,omitempty"`
}

// outcome is the hook's result for one container.
type outcome struct {
	ok         bool
	limitBytes int64
	err        string
}

type claimState struct {
	namespace, name string
	uid             types.UID
	report          prepare.ClaimReport
	// written is what was last applied (JSON), to skip a write that would
	// change nothing.
	written []byte
	// outcomes by container name.
	outcomes map[string]outcome
	// notHeld says, by container name ("" for the pod's budget), why its
	// limit is not what the claims say (the verifier could not restore
	// it).
	notHeld map[string]string
	// offload is the offload loop's last figures of the claim, and
	// offloadQueued when they were last queued for a write.
	offload       *OffloadStatus
	offloadQueued time.Time
	// since keeps each device's condition transition time.
	since map[string]metav1.Time
	last  map[string]metav1.ConditionStatus
}

// Writer writes what the driver granted and applied into the
// Prepared claims' status.devices, with server-side apply of the driver's
// own entries, asynchronously: prepare never waits for it, and a failed
// write is retried with backoff and counted.
//
// A prepared claim is written preparedStatusDelay after prepare, not at
// once: by then its containers have usually started and the hook's outcome
// goes into the same write (one write per claim instead of two), and the
// writes of pods that start together stay out of the way of their
// prepares (the kubelet's claim reads and the node's CPU). An outcome is
// written at once; a write that would apply what was last applied is
// skipped.
type Writer struct {
	client kubernetes.Interface
	driver string
	node   string
	// failed is told of each write given up after its retries.
	failed func()
	clock  clock.PassiveClock
	// delay is how long a prepared claim waits for its first write
	// (preparedStatusDelay).
	delay time.Duration

	mu     sync.Mutex
	claims map[types.UID]*claimState
	queue  workqueue.TypedRateLimitingInterface[types.UID]
}

// preparedStatusDelay is how long a prepared claim's status waits for the
// hook's outcome (a pod's containers start within a second or two of
// prepare, also in a burst of pods).
const preparedStatusDelay = 2 * time.Second

// New returns a Writer of node's claims of driver; failed, if set, is told
// of each write given up after its retries.
func New(client kubernetes.Interface, driver, node string, failed func()) *Writer {
	return &Writer{
		client: client, driver: driver, node: node, failed: failed, clock: clock.RealClock{}, delay: preparedStatusDelay,
		claims: map[types.UID]*claimState{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.UID](),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "claim-status"}),
	}
}

// Prepared records what prepare granted (prepare.Options.Prepared).
func (s *Writer) Prepared(r prepare.ClaimReport) {
	s.mu.Lock()
	st, ok := s.claims[r.Claim.UID]
	if !ok {
		st = &claimState{namespace: r.Claim.Namespace, name: r.Claim.Name, uid: r.Claim.UID,
			outcomes: map[string]outcome{}, notHeld: map[string]string{}, since: map[string]metav1.Time{}, last: map[string]metav1.ConditionStatus{}}
		s.claims[r.Claim.UID] = st
	}
	st.report = r
	s.mu.Unlock()
	s.queue.AddAfter(r.Claim.UID, s.delay)
}

// Reported records the hook's outcome for a container (a hookrecord.Record
// the podevents emitter reported).
func (s *Writer) Reported(r hookrecord.Record) {
	s.mu.Lock()
	var changed []types.UID
	for _, uid := range r.Claims {
		st, ok := s.claims[types.UID(uid)]
		if !ok || st.report.Pod.Name != r.Pod || st.report.Pod.Namespace != r.Namespace {
			continue
		}
		st.outcomes[r.Container] = outcome{ok: r.Error == "", limitBytes: r.LimitBytes, err: r.Error}
		changed = append(changed, st.uid)
	}
	s.mu.Unlock()
	for _, uid := range changed {
		s.queue.Add(uid)
	}
}

// LimitNotHeld records that a container's limit (or its pod's budget,
// d.Pod) is not what its claims say and could not be restored, in the
// claims of the container's pod that reach it; text says so.
func (s *Writer) LimitNotHeld(d limitcheck.Drift, text string) { s.setNotHeld(d, text) }

// LimitHeld records that it holds again (or is gone).
func (s *Writer) LimitHeld(d limitcheck.Drift) { s.setNotHeld(d, "") }

func (s *Writer) setNotHeld(d limitcheck.Drift, text string) {
	name := d.Container.Name
	if d.Pod {
		name = ""
	}
	s.mu.Lock()
	var changed []types.UID
	for _, st := range s.claims {
		if st.report.Pod.Namespace != d.Container.Namespace || st.report.Pod.Name != d.Container.Pod || !reaches(st.report, name) {
			continue
		}
		if old, ok := st.notHeld[name]; text == old && (ok || text == "") {
			continue
		}
		if text == "" {
			delete(st.notHeld, name)
		} else {
			st.notHeld[name] = text
		}
		changed = append(changed, st.uid)
	}
	s.mu.Unlock()
	for _, uid := range changed {
		s.queue.Add(uid)
	}
}

// Offloaded records the offload loop's figures of the claims it drives:
// queued for a write the first time, and then at most every
// offloadStatusPeriod (each write carries the latest).
func (s *Writer) Offloaded(figures []offload.ClaimFigures, interval time.Duration) {
	now := s.clock.Now()
	var due []types.UID
	s.mu.Lock()
	for _, f := range figures {
		st, ok := s.claims[f.UID]
		if !ok {
			continue
		}
		st.offload = offloadStatus(f)
		if st.offloadQueued.IsZero() || now.Sub(st.offloadQueued) >= max(offloadStatusPeriod, interval) {
			st.offloadQueued = now
			due = append(due, f.UID)
		}
	}
	s.mu.Unlock()
	for _, uid := range due {
		s.queue.Add(uid)
	}
}

// Stop makes Run return, also before it started; what is queued is not
// written.
func (s *Writer) Stop() { s.queue.ShutDown() }

// reaches says whether the claim's results reach the container (any, for
// the pod's budget: "").
func reaches(r prepare.ClaimReport, container string) bool {
	for _, res := range r.Results {
		if _, ok := res.Containers[container]; ok || container == "" && len(res.Containers) > 0 {
			return true
		}
	}
	return false
}

// Unprepared forgets claims (the API server drops the status of a
// deallocated claim).
func (s *Writer) Unprepared(uids []types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, uid := range uids {
		delete(s.claims, uid)
	}
}

// Run writes queued claims until ctx ends or Stop.
func (s *Writer) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	for {
		uid, quit := s.queue.Get()
		if quit {
			return
		}
		err := s.write(ctx, uid)
		switch {
		case err == nil:
			s.queue.Forget(uid)
		case s.queue.NumRequeues(uid) < 8:
			klog.FromContext(ctx).V(2).Info("Writing a claim's status failed; retrying", "claimUID", uid, "err", err)
			s.queue.AddRateLimited(uid)
		default:
			klog.FromContext(ctx).Error(err, "Cannot write the claim's device status", "claimUID", uid)
			if s.failed != nil {
				s.failed()
			}
			s.queue.Forget(uid)
		}
		s.queue.Done(uid)
	}
}

func (s *Writer) write(ctx context.Context, uid types.UID) error {
	s.mu.Lock()
	st, ok := s.claims[uid]
	var ac *resourceapply.ResourceClaimApplyConfiguration
	var applied []byte
	same := false
	if ok {
		var err error
		if ac, err = s.applyConfiguration(st); err == nil {
			applied, err = json.Marshal(ac)
		}
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("the status of claim %s/%s: %w", st.namespace, st.name, err)
		}
		same = bytes.Equal(applied, st.written)
	}
	s.mu.Unlock()
	if !ok || same {
		return nil // unprepared meanwhile, or written as it is
	}
	_, err := s.client.ResourceV1().ResourceClaims(st.namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: StatusFieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("apply the status of claim %s/%s: %w", st.namespace, st.name, err)
	}
	s.mu.Lock()
	st.written = applied
	s.mu.Unlock()
	return nil
}

// applyConfiguration is the claim's status.devices entries of the driver.
func (s *Writer) applyConfiguration(st *claimState) (*resourceapply.ResourceClaimApplyConfiguration, error) {
	status := resourceapply.ResourceClaimStatus()
	for _, r := range st.report.Results {
		data := DeviceStatusData{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "SwapDeviceStatus",
			LimitBytes: r.LimitBytes, AdminAccess: r.AdminAccess, Containers: r.Containers, PodLimitBytes: st.report.PodLimitBytes}
		if st.report.Pod.Name != "" {
			data.Pod = st.report.Pod.String()
		}
		if r.Config != nil && !r.AdminAccess {
			data.Config = &appliedConfig{SwapHighPercent: r.Config.SwapHighPercent, Zswap: r.Config.Zswap, Swappiness: r.Config.Swappiness, Offload: r.Config.Offload}
			if r.Config.Offload != nil {
				data.Offload = st.offload
			}
		}
		raw, err := json.Marshal(data)
		if err != nil {
			return nil, err
		}
		key := r.Result.Pool + "/" + r.Result.Device + "/" + string(shareOf(r))
		cond := s.condition(st, r)
		if since, ok := st.since[key]; !ok || since.IsZero() || st.last[key] != cond.status {
			st.since[key] = metav1.NewTime(s.clock.Now().Truncate(time.Second))
			st.last[key] = cond.status
		}
		d := resourceapply.AllocatedDeviceStatus().WithDriver(s.driver).WithPool(r.Result.Pool).WithDevice(r.Result.Device).
			WithData(runtime.RawExtension{Raw: raw}).
			WithConditions(metav1apply.Condition().WithType(ConditionSwapApplied).WithStatus(cond.status).WithReason(cond.reason).
				WithMessage(eventmsg.Condition(cond.message)).WithLastTransitionTime(st.since[key]))
		if r.Result.ShareID != nil {
			d = d.WithShareID(string(*r.Result.ShareID))
		}
		status = status.WithDevices(d)
	}
	return resourceapply.ResourceClaim(st.name, st.namespace).WithUID(st.uid).WithStatus(status), nil
}

func shareOf(r prepare.ResultReport) types.UID {
	if r.Result.ShareID == nil {
		return ""
	}
	return *r.Result.ShareID
}

type conditionValue struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// condition says whether the result's limit holds in its containers.
func (s *Writer) condition(st *claimState, r prepare.ResultReport) conditionValue {
	if r.AdminAccess {
		return conditionValue{metav1.ConditionFalse, ReasonAdminAccess,
			"allocated with admin access, which the scheduler does not charge: no swap is granted"}
	}
	names := slices.Sorted(maps.Keys(r.Containers))
	var applied, failed, waiting, notHeld []string
	for _, name := range names {
		if text, ok := st.notHeld[name]; ok {
			notHeld = append(notHeld, text)
		}
		o, ok := st.outcomes[name]
		switch {
		case !ok:
			waiting = append(waiting, name)
		case o.ok:
			applied = append(applied, fmt.Sprintf("%s (%s)", name, quantity(o.limitBytes)))
		default:
			// Each error is cut to an event's size, so that several
			// containers' fit in the condition.
			failed = append(failed, "container "+name+": "+eventmsg.Truncate(o.err, eventmsg.NoteLimit))
		}
	}
	// The message must fit in eventmsg.ConditionLimit bytes: the lists
	// name what fits and count the rest.
	list := func(head string, items []string, sep, tail string) string {
		return head + eventmsg.List(items, sep, 0, eventmsg.ConditionLimit-len(head)-len(tail)) + tail
	}
	if text, ok := st.notHeld[""]; ok && len(names) > 0 {
		notHeld = append(notHeld, text)
	}
	switch {
	case len(failed) > 0:
		return conditionValue{metav1.ConditionFalse, ReasonNotApplied, list("not applied to ", failed, "; ", "")}
	case len(notHeld) > 0:
		return conditionValue{metav1.ConditionFalse, ReasonLimitNotHeld, list(fmt.Sprintf("not held on node %s, and could not be restored: ", s.node), notHeld, "; ", "")}
	case len(names) == 0:
		return conditionValue{metav1.ConditionUnknown, ReasonPrepared, fmt.Sprintf("prepared on node %s; no container of the pod uses it", s.node)}
	case len(waiting) > 0:
		return conditionValue{metav1.ConditionUnknown, ReasonPrepared, list(fmt.Sprintf("prepared on node %s; waiting for container ", s.node), waiting, ", ", " to start")}
	}
	return conditionValue{metav1.ConditionTrue, ReasonApplied, list(fmt.Sprintf("swap limit applied on node %s to container ", s.node), applied, ", ", "")}
}

// quantity is b bytes as a binary quantity ("300Mi").
func quantity(b int64) string { return resource.NewQuantity(b, resource.BinarySI).String() }
