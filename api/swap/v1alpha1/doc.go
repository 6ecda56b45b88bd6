// Package v1alpha1 is the dra.swap/v1alpha1 contract: every name that the
// driver's components (the kubelet plugin, the OCI hook, the controller)
// and its users share.
//
//   - SwapConfig, the opaque configuration that a DeviceClass or a
//     ResourceClaim may pass to the driver. Decoding is strict (unknown or
//     duplicate fields are an error), and every value is validated before
//     the driver acts on it.
//   - The names a ResourceSlice, a claim or a selector uses: DriverName,
//     DeviceName, CapacitySwap and its CapacityStep, the device's attribute
//     names (Attr*) and the values of AttrSwapBehavior (SwapBehavior*), its
//     taint keys (Taint*); DriverSelector builds a DeviceClass selector.
//   - The node and pod label and annotation keys the controller sets, and
//     the environment variables a container gets.
//   - Package limits (api/swap/v1alpha1/limits): the largest swap value and
//     result index, and the UID and container ID validators. They are apart
//     so that the hook links only the standard library with them.
//
// Stability: v1alpha1. Names and values may change between releases, with
// a note in the release; within a release every component uses the same,
// and CDI specs that earlier releases wrote keep parsing (internal/kubeletplugin/cdi's
// golden specs).
//
// Example, in a ResourceClaimTemplate:
//
//	config:
//	- requests: ["swap"]
//	  opaque:
//	    driver: dra.swap
//	    parameters:
//	      apiVersion: dra.swap/v1alpha1
//	      kind: SwapConfig
//	      swapHighPercent: 80
//	      zswap: Disabled
package v1alpha1
