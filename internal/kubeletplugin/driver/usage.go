package driver

import (
	"context"
	"path/filepath"
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
// container with several claims counts for each.
func claimUsage(stateDir, cgroupRoot string, cp *checkpoint.Checkpoint) (map[types.NamespacedName]int64, error) {
	out := map[types.NamespacedName]int64{}
	for _, c := range cp.Claims {
		out[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = 0
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
		claims, err := hookstate.Claims(dir)
		if err != nil || len(claims) == 0 {
			continue
		}
		used, err := cgroupswap.ReadUsage(c.CgroupVersion, cgroupRoot, c.CgroupGroup)
		if err != nil || used < 0 {
			continue // the container is gone
		}
		for _, uid := range claims {
			if info, ok := cp.Claims[types.UID(uid)]; ok {
				out[types.NamespacedName{Namespace: info.Namespace, Name: info.Name}] += used
			}
		}
	}
	return out, nil
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
