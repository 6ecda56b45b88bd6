// Package kubeletplugin is the dra.swap kubelet plugin, its Plugin: it
// answers the kubelet's DRA calls through
// k8s.io/dynamic-resource-allocation/kubeletplugin (imported as draplugin),
// publishes the node's swap as a ResourceSlice (internal/kubeletplugin/publish)
// and reports the device's health. The decisions live in
// internal/kubeletplugin/discovery, internal/kubeletplugin/swapdevice and
// internal/kubeletplugin/prepare; this package wires them to the kubelet and
// the API server.
package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/prepare"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/publish"
)

// healthInterval is how often the device's health is re-sent; the kubelet
// marks health unknown after 30 s without a report.
const healthInterval = 10 * time.Second

// driver implements draplugin.DRAPlugin.
type driver struct {
	poolName  string
	manager   *prepare.Manager
	publisher *publish.Publisher
	metrics   *Metrics
	// fatal cancels the plugin's main context on unrecoverable errors.
	fatal func(error)
	// unprepared, if set, is told which claims were unprepared.
	unprepared func([]types.UID)
}

var _ draplugin.DRAPlugin = &driver{}

// PrepareResourceClaims implements draplugin.DRAPlugin.
func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]draplugin.PrepareResult, error) {
	start := time.Now()
	results := d.manager.Prepare(ctx, claims)
	for _, r := range results {
		d.metrics.observe(opPrepare, r.Err, time.Since(start))
	}
	return results, nil
}

// UnprepareResourceClaims implements draplugin.DRAPlugin.
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []draplugin.NamespacedObject) (map[types.UID]error, error) {
	start := time.Now()
	results := d.manager.Unprepare(ctx, claims)
	var done []types.UID
	for uid, err := range results {
		d.metrics.observe(opUnprepare, err, time.Since(start))
		if err == nil {
			done = append(done, uid)
		}
	}
	if d.unprepared != nil {
		d.unprepared(done)
	}
	return results, nil
}

// HandleError implements draplugin.DRAPlugin: background errors are
// logged; unrecoverable ones stop the plugin so that it gets restarted.
func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, draplugin.ErrRecoverable) && d.fatal != nil {
		d.fatal(fmt.Errorf("fatal background error: %s: %w", msg, err))
	}
}

// WatchHealthStatus implements draplugin.DRAPlugin: the swap device is
// healthy while the node offers swap and its prepared claims fit in the
// offer; when swap goes away (swapoff, or the cgroup swap control file
// vanished) or shrinks below what the claims hold (TaintOvercommitted),
// the device is reported unhealthy with the reason, which the kubelet
// shows in the status of the pods using it
// (status.containerStatuses[].allocatedResourcesStatus).
func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- draplugin.DeviceHealthReport) error {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(healthInterval)
	defer ticker.Stop()
	for {
		report := d.healthReport()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		logger.V(5).Info("Sent device health", "health", report.Devices[0].Health)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func (d *driver) healthReport() draplugin.DeviceHealthReport {
	h := draplugin.DeviceHealth{
		PoolName:           d.poolName,
		DeviceName:         v1alpha1.DeviceName,
		Health:             draplugin.HealthStatusHealthy,
		LastUpdated:        time.Now(),
		HealthCheckTimeout: 3 * healthInterval,
	}
	device, reason := d.publisher.Device()
	value, overcommitted := d.publisher.Overcommit()
	switch {
	case device == nil:
		h.Health, h.Message = draplugin.HealthStatusUnhealthy, "the node's swap is not discovered yet"
	case reason != "":
		h.Health, h.Message = draplugin.HealthStatusUnhealthy, reason
	case overcommitted:
		h.Health, h.Message = draplugin.HealthStatusUnhealthy, overcommitMessage(value)
	}
	return draplugin.DeviceHealthReport{Devices: []draplugin.DeviceHealth{h}}
}

// overcommitMessage is the device's health message while it carries
// TaintOvercommitted with value ("held-768Mi-offered-512Mi").
func overcommitMessage(value string) string {
	return "swap overcommitted (" + value + "): the claims prepared on the node hold more swap than it offers now"
}
