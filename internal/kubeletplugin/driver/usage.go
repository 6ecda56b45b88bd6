package driver

import (
	"context"
	"maps"
	"math/bits"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/cgroupswap"
	"github.com/dra-driver-swap/dra-driver-swap/internal/hookstate"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
)

// claimUsage sums the swap in use by the containers of each prepared
// claim: the hook's records say which containers hold a share of which
// claim, the checkpoint names the claims, the cgroups say what they use. A
// container with several claims counts for each with that claim's part of
// its limit (usageShares), so that the claims' usage adds up to the
// containers'. Unconfirmed entries (specs kept without a name) get no
// series.
func claimUsage(stateDir, cgroupRoot string, cp *checkpoint.Checkpoint) (map[types.NamespacedName]int64, error) {
	out := map[types.NamespacedName]int64{}
	for _, c := range cp.Claims {
		if c.Confirmed() {
			out[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = 0
		}
	}
	ids, err := hookstate.List(stateDir)
	if err != nil {
		return out, err
	}
	for _, id := range ids {
		dir := filepath.Join(stateDir, id)
		c, err := hookstate.ReadContainer(dir)
		if err != nil {
			continue // not yet written, or gone
		}
		claims, err := hookstate.ClaimLimits(dir)
		if err != nil || len(claims) == 0 {
			continue
		}
		used, err := cgroupswap.ReadUsage(c.CgroupVersion, cgroupRoot, c.CgroupGroup)
		if err != nil || used < 0 {
			continue // the container is gone
		}
		for uid, part := range usageShares(used, claims) {
			if info, ok := cp.Claims[types.UID(uid)]; ok && info.Confirmed() {
				out[types.NamespacedName{Namespace: info.Namespace, Name: info.Name}] += part
			}
		}
	}
	return out, nil
}

// usageShares divides a container's swap use among its claims in proportion
// to the limit each gives it (limits, by claim UID); the parts add up to
// used exactly: what rounding leaves goes to the claim with the largest
// limit (the first UID of those). Claims that all give nothing share
// equally.
func usageShares(used int64, limits map[string]int64) map[string]int64 {
	uids := slices.Sorted(maps.Keys(limits))
	out := make(map[string]int64, len(uids))
	if len(uids) == 0 || used <= 0 {
		for _, uid := range uids {
			out[uid] = 0
		}
		return out
	}
	var total uint64
	largest := uids[0]
	for _, uid := range uids {
		total += uint64(max(limits[uid], 0))
		if limits[uid] > limits[largest] {
			largest = uid
		}
	}
	var given int64
	for _, uid := range uids {
		var part uint64
		if total == 0 {
			part = uint64(used) / uint64(len(uids))
		} else {
			// used × limit / total without overflow: the product has
			// 128 bits, the quotient at most used's.
			hi, lo := bits.Mul64(uint64(used), uint64(max(limits[uid], 0)))
			part, _ = bits.Div64(hi, lo, total)
		}
		out[uid] = int64(part)
		given += int64(part)
	}
	out[largest] += used - given
	return out
}

// usageReporter keeps the per-claim usage gauges current.
type usageReporter struct {
	stateDir, cgroupRoot string
	store                *checkpoint.Store
	metrics              *Metrics
	last                 map[types.NamespacedName]bool
}

func (u *usageReporter) update(ctx context.Context) {
	cp, err := u.store.Read()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Per-claim swap usage: cannot read the checkpoint")
		return
	}
	usage, err := claimUsage(u.stateDir, u.cgroupRoot, cp)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Per-claim swap usage")
	}
	u.set(usage)
}

// set makes the gauges the claims' usage: one series per claim, those of
// claims no longer prepared deleted.
func (u *usageReporter) set(usage map[types.NamespacedName]int64) {
	seen := map[types.NamespacedName]bool{}
	for key, used := range usage {
		u.metrics.claimUsed.WithLabelValues(key.Namespace, key.Name).Set(float64(used))
		seen[key] = true
	}
	for key := range u.last {
		if !seen[key] {
			u.metrics.claimUsed.DeleteLabelValues(key.Namespace, key.Name)
		}
	}
	u.last = seen
}

func (u *usageReporter) run(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		u.update(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
