package offload

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
)

// Claims says which claims are prepared on the node.
type Claims interface {
	// Prepared returns the prepared claims by UID (the checkpoint). The
	// loop reclaims only containers whose offload claim is among them.
	Prepared() (map[types.UID]types.NamespacedName, error)
}

// Reporter is told what the loop does.
type Reporter interface {
	// Pass is told each pass's figures.
	Pass(ctx context.Context, r PassReport)
	// BackedOff is told when a container's stall rose above its claims'
	// budget: once per episode (see Params.QuietIntervals).
	BackedOff(ctx context.Context, c hookstate.Container, claims []types.NamespacedName, stallPPM, budgetPPM int64)
}

// PassReport is what one pass did.
type PassReport struct {
	// Claims are the figures of each prepared offload claim with a
	// container the loop drives, by claim UID order.
	Claims []ClaimFigures
	// Containers is how many containers the loop drove.
	Containers int
	// ReclaimedBytes were reclaimed in this pass (each write the kernel
	// satisfied counts its step).
	ReclaimedBytes int64
	// Deferred containers had a step to take that waited for the next
	// pass: the pass had reclaimed MaxPassBytes.
	Deferred int
	// Exhausted writes: the kernel could not reclaim the whole step.
	Exhausted int
	// Argument is memory.reclaim's argument in use (see reclaimer):
	// "swappiness=max", "swappiness=200", "none"; "" before the first
	// reclaim.
	Argument string
	// Duration is how long the pass took, reclaim included.
	Duration time.Duration
}

// ClaimFigures are one claim's figures after a pass. A container with
// several offload claims counts for each.
type ClaimFigures struct {
	UID   types.UID
	Claim types.NamespacedName
	// Containers is how many of its containers the loop drives.
	Containers int
	// ReclaimedBytes is what the loop reclaimed from its containers since
	// this plugin instance started.
	ReclaimedBytes int64
	// SwapBytes is their memory.swap.current, summed; SwapPeakBytes their
	// memory.swap.peak summed, -1 where the kernel has none.
	SwapBytes, SwapPeakBytes int64
	// StallPPM is the highest stall of its containers over the last
	// interval (parts per million of wall time), -1 before the first
	// interval; BudgetPPM the lowest budget of them.
	StallPPM, BudgetPPM int64
	// Reason is the state that matters most among its containers:
	// OverBudget, then AtSwapLimit, then Offloading, then the others.
	Reason Reason
}

// Loop is the node's offload loop. Run runs it; it keeps each container's
// state between passes in memory (a restarted plugin samples each
// container once before it reclaims again).
type Loop struct {
	// StateDir holds the hook's records (internal/hookstate).
	StateDir string
	// CgroupRoot is the cgroup v2 mount as the plugin sees it.
	CgroupRoot string
	Claims     Claims
	Reporter   Reporter
	Params     Params
	// Interval is the time between passes, over which stalls are measured.
	Interval time.Duration
	// MaxPassBytes bounds what one pass reclaims on the node, and so the
	// kernel's work on the loop's behalf per interval; containers past it
	// wait for the next pass, which starts with them.
	MaxPassBytes int64
	// Now reads the clock (tests); time.Now by default.
	Now func() time.Time

	containers map[string]*tracked
	reclaimed  map[types.UID]int64
	reclaimer  reclaimer
	buf        []byte
	// next is the container ID the next pass starts with, after a pass
	// that deferred steps.
	next string
}

// tracked is a container the loop knows.
type tracked struct {
	rec hookstate.Container
	// modTime is the records directory's when they were read: a change
	// makes the loop read them again.
	modTime time.Time
	// claims are the container's offload claims' UIDs; limits what they
	// allow.
	claims []types.UID
	limits Limits
	state  State
}

// Run runs passes every Interval until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("Offload loop running", "interval", l.Interval, "params", l.Params, "maxPassBytes", l.MaxPassBytes)
	ticker := time.NewTicker(l.Interval)
	defer ticker.Stop()
	for {
		l.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (l *Loop) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// Pass runs one pass: the containers of prepared offload claims are read,
// decided on and reclaimed from, and the Reporter is told.
func (l *Loop) Pass(ctx context.Context) {
	logger := klog.FromContext(ctx)
	start := l.now()
	if l.containers == nil {
		l.containers, l.reclaimed, l.buf = map[string]*tracked{}, map[types.UID]int64{}, make([]byte, maxFileBytes+1)
	}
	prepared, err := l.Claims.Prepared()
	if err != nil {
		// Without the checkpoint the loop cannot tell a prepared claim
		// from an unprepared one: it reclaims nothing.
		logger.Error(err, "Offload: cannot read the prepared claims; skipping this pass")
		return
	}
	ids, err := hookstate.List(l.StateDir)
	if err != nil {
		logger.Error(err, "Offload: cannot list the hook's records; skipping this pass")
		return
	}
	var driven []string
	seen := map[string]bool{}
	for _, id := range ids {
		t := l.refresh(ctx, id)
		if t == nil {
			continue
		}
		seen[id] = true
		if len(t.claims) > 0 && slices.ContainsFunc(t.claims, func(uid types.UID) bool { _, ok := prepared[uid]; return ok }) {
			driven = append(driven, id)
		}
	}
	for id := range l.containers {
		if !seen[id] {
			delete(l.containers, id)
		}
	}
	// Start with the container a deferring pass stopped at.
	slices.Sort(driven)
	if i, found := slices.BinarySearch(driven, l.next); found {
		driven = append(driven[i:], driven[:i]...)
	}
	l.next = ""

	report := PassReport{Containers: len(driven)}
	byClaim := map[types.UID]*ClaimFigures{}
	for _, id := range driven {
		if ctx.Err() != nil {
			return
		}
		t := l.containers[id]
		d, r, peak, ok := l.step(ctx, t, &report)
		if !ok {
			delete(l.containers, id)
			continue
		}
		var names []types.NamespacedName
		for _, uid := range t.claims {
			name, ok := prepared[uid]
			if !ok {
				continue
			}
			names = append(names, name)
			f := byClaim[uid]
			if f == nil {
				f = &ClaimFigures{UID: uid, Claim: name, StallPPM: -1, BudgetPPM: t.limits.BudgetPPM, Reason: ReasonSampling}
				byClaim[uid] = f
			}
			f.Containers++
			f.ReclaimedBytes = l.reclaimed[uid]
			f.SwapBytes += r.SwapCurrent
			if peak >= 0 && f.SwapPeakBytes >= 0 {
				f.SwapPeakBytes += peak
			} else {
				f.SwapPeakBytes = -1
			}
			f.StallPPM = max(f.StallPPM, d.StallPPM)
			f.BudgetPPM = min(f.BudgetPPM, t.limits.BudgetPPM)
			if rank(d.Reason) > rank(f.Reason) {
				f.Reason = d.Reason
			}
		}
		if d.NewEpisode {
			l.Reporter.BackedOff(ctx, t.rec, names, d.StallPPM, t.limits.BudgetPPM)
		}
	}
	for uid := range l.reclaimed {
		if _, ok := prepared[uid]; !ok {
			delete(l.reclaimed, uid)
		}
	}
	for _, f := range byClaim {
		report.Claims = append(report.Claims, *f)
	}
	slices.SortFunc(report.Claims, func(a, b ClaimFigures) int { return cmp.Compare(a.UID, b.UID) })
	if l.reclaimer.probed {
		report.Argument = cmp.Or(strings.TrimSpace(l.reclaimer.Argument()), "none")
	}
	report.Duration = l.now().Sub(start)
	l.Reporter.Pass(ctx, report)
}

// rank orders reasons by how much they matter in a claim's figures.
func rank(r Reason) int {
	switch r {
	case ReasonOverBudget:
		return 5
	case ReasonSwapLimit:
		return 4
	case ReasonOffloading:
		return 3
	case ReasonExhausted, ReasonRefaulting:
		return 2
	case ReasonIdle:
		return 1
	}
	return 0
}

// step reads one container, decides and reclaims; ok is false when its
// cgroup is gone.
func (l *Loop) step(ctx context.Context, t *tracked, report *PassReport) (d Decision, r Reading, peak int64, ok bool) {
	logger := klog.FromContext(ctx)
	dir := filepath.Join(l.CgroupRoot, t.rec.CgroupGroup)
	r, peak, err := read(dir, l.now(), l.buf)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
			return d, r, peak, false
		}
		logger.V(2).Info("Offload: cannot read the container's cgroup", "container", t.rec.String(), "err", err)
		return Decision{Reason: ReasonSampling, StallPPM: -1}, r, -1, true
	}
	d = Decide(&t.state, r, t.limits, l.Interval, l.Params)
	if d.ReclaimBytes == 0 {
		return d, r, peak, true
	}
	if l.MaxPassBytes > 0 && report.ReclaimedBytes+d.ReclaimBytes > l.MaxPassBytes {
		if l.next == "" {
			l.next = t.rec.ID
		}
		report.Deferred++
		return d, r, peak, true
	}
	err = l.reclaimer.reclaim(dir, d.ReclaimBytes)
	switch {
	case err == nil:
		t.state.Reclaimed(d.ReclaimBytes)
		report.ReclaimedBytes += d.ReclaimBytes
		for _, uid := range t.claims {
			l.reclaimed[uid] += d.ReclaimBytes
		}
	case errors.Is(err, syscall.EAGAIN):
		// The kernel reclaimed less than the step: nothing cold enough
		// is left (or the swap is full). What it did reclaim is not
		// known, and not counted.
		report.Exhausted++
		t.state.Exhausted(l.Params)
		d.Reason = ReasonExhausted
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV):
		return d, r, peak, false
	default:
		logger.Error(err, "Offload: reclaim failed", "container", t.rec.String(), "bytes", d.ReclaimBytes)
	}
	return d, r, peak, true
}

// refresh returns the container's tracked state, its records read again
// only when they changed (a container without an offload claim is tracked
// too, with none, so that it costs a stat per pass); nil while its records
// cannot be read.
func (l *Loop) refresh(ctx context.Context, id string) *tracked {
	dir := filepath.Join(l.StateDir, id)
	fi, err := os.Stat(dir)
	if err != nil {
		return nil
	}
	t := l.containers[id]
	if t != nil && fi.ModTime().Equal(t.modTime) {
		return t
	}
	rec, err := hookstate.ReadContainer(dir)
	if err != nil {
		return nil // being written, or gone
	}
	shares, err := hookstate.Shares(dir)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Offload: cannot read the container's records", "container", rec.String(), "err", err)
		return nil
	}
	var claims []types.UID
	limits := Limits{HighBytes: -1}
	var high int64
	anyHigh := false
	for key, s := range shares {
		if s.HighBytes != nil {
			anyHigh = true
			high += *s.HighBytes
		} else {
			high += s.LimitBytes
		}
		if s.OffloadMaxStall == nil {
			continue
		}
		uid := types.UID(hookstate.ClaimOf(key))
		if !slices.Contains(claims, uid) {
			claims = append(claims, uid)
		}
		budget := int64(*s.OffloadMaxStall) * 100 // hundredths of a percent to ppm
		if limits.BudgetPPM == 0 || budget < limits.BudgetPPM {
			limits.BudgetPPM = budget
		}
		limits.SwapBytes += s.LimitBytes
	}
	if rec.CgroupVersion != 2 {
		claims = nil // the loop drives cgroup v2 containers only
	}
	if anyHigh {
		limits.HighBytes = high
	}
	slices.Sort(claims)
	if t == nil {
		t = &tracked{}
		l.containers[id] = t
	}
	t.rec, t.modTime, t.claims, t.limits = rec, fi.ModTime(), claims, limits
	return t
}

// String describes the knobs for the start-up log.
func (p Params) String() string {
	return fmt.Sprintf("step %d%% of memory.current, %d..%d bytes, none at %d%% of the budget; %d%% swap headroom; episode ends after %d quiet intervals; %d intervals of rest after an exhausted reclaim",
		p.MaxStepPercent, p.MinStepBytes, p.MaxStepBytes, p.TargetPercent, p.SwapHeadroomPercent, p.QuietIntervals, p.ExhaustedIntervals)
}
