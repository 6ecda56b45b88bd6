// Package noopdriver is a DRA driver whose prepare does nothing: one
// shareable device per node with consumable capacity, the shape of the
// dra.swap device, and NodePrepareResources answering with the allocated
// devices and no CDI device. The e2e benchmark runs it next to dra.swap to
// tell what Kubernetes' DRA machinery (scheduler, kubelet, the kubeletplugin
// helper) costs any driver from what dra.swap's own prepare adds.
package noopdriver

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

const (
	// DriverName is the no-op driver's name, and its DeviceClass's.
	DriverName = "noop.dra.example.com"
	// DeviceName and CapacityName mirror dra.swap's device.
	DeviceName   = "dev"
	CapacityName = "size"
)

// Config says where the driver registers with the kubelet.
type Config struct {
	NodeName string
	// RegistrarDir is the kubelet's plugins_registry, PluginDataDir the
	// driver's socket directory under the kubelet's plugins directory.
	RegistrarDir, PluginDataDir string
}

type driver struct{ pool string }

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		var r kubeletplugin.PrepareResult
		if c.Status.Allocation != nil {
			for _, res := range c.Status.Allocation.Devices.Results {
				if res.Driver == DriverName {
					r.Devices = append(r.Devices, kubeletplugin.Device{Requests: []string{res.Request}, PoolName: res.Pool, DeviceName: res.Device, ShareID: res.ShareID})
				}
			}
		}
		out[c.UID] = r
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (d *driver) HandleError(context.Context, error, string) {}

// WatchHealthStatus reports nothing (the kubelet then leaves health unknown).
func (d *driver) WatchHealthStatus(ctx context.Context, _ chan<- kubeletplugin.DeviceHealthReport) error {
	<-ctx.Done()
	return nil
}

// Start registers the driver with the kubelet and publishes its device.
func Start(ctx context.Context, client kubernetes.Interface, cfg Config) (*kubeletplugin.Helper, error) {
	helper, err := kubeletplugin.Start(ctx, &driver{pool: cfg.NodeName},
		kubeletplugin.KubeClient(client), kubeletplugin.NodeName(cfg.NodeName), kubeletplugin.DriverName(DriverName),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistrarDir), kubeletplugin.PluginDataDirectoryPath(cfg.PluginDataDir),
		kubeletplugin.Serialize(false))
	if err != nil {
		return nil, fmt.Errorf("start the no-op driver: %w", err)
	}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		cfg.NodeName: {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{Device(resource.MustParse("1Ti"))}}}},
	}}); err != nil {
		helper.Stop()
		return nil, fmt.Errorf("publish the no-op driver's device: %w", err)
	}
	return helper, nil
}

// Device is the no-op driver's device: shareable, with consumable capacity
// CapacityName of size (default 1Gi, steps of 1Mi), as dra.swap's device.
func Device(size resource.Quantity) resourceapi.Device {
	return resourceapi.Device{
		Name:                     DeviceName,
		AllowMultipleAllocations: ptr.To(true),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapacityName: {
			Value: size,
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    ptr.To(resource.MustParse("1Gi")),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1Mi")), Max: &size, Step: ptr.To(resource.MustParse("1Mi"))},
			},
		}},
	}
}
