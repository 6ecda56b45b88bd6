// Package v1alpha1 is the dra.swap/v1alpha1 API: SwapConfig, the opaque
// configuration that a DeviceClass or a ResourceClaim may pass to the
// dra.swap driver. Decoding is strict (unknown or duplicate fields are an
// error), and every value is validated before the driver acts on it.
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
