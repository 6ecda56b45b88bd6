package kubeletplugin

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/checkpoint"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/claimusage"
)

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
	usage, err := claimusage.ByClaim(u.stateDir, u.cgroupRoot, cp)
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
