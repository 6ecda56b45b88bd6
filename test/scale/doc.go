// Package scale measures dra-driver-swap against the DRA floor on many
// simulated nodes: a real etcd and kube-apiserver (test/integration's
// framework), a real kube-scheduler process and the real dra-swap-controller
// process, whose webhooks the API server calls through the driver's
// ValidatingWebhookConfiguration (URL-based, on loopback). No kubelet runs:
// each simulated node is a Ready Node object with a dra.swap ResourceSlice
// built by internal/kubeletplugin/swapdevice (as the kubelet plugin builds
// it) and a no-op driver's slice of the same shape (test/noopdriver). The
// harness creates pods and, as the controller-manager's resourceclaim
// controller would, their claims from a ResourceClaimTemplate; the scheduler
// binds them; the harness marks bound pods Running as their kubelet would and
// deletes them afterwards.
//
// TestScale is the small version (100 nodes, 500 pods per mode) that checks
// the invariants; BenchmarkScale (make bench-scale) measures at
// SCALE_RUNS ("NODES:PODS,...") and prints a markdown table.
//
// Binaries: KUBE_APISERVER, KUBE_SCHEDULER (default _output/bin/...), etcd on
// PATH (or ETCD), and DRA_SWAP_CONTROLLER (default: built from this tree).
package scale
