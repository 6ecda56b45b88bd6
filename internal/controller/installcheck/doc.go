// Package installcheck is `helm test` for the driver (cmd/dra-swap-check):
// on each node with the driver it runs two probe pods of the driver's own
// image, one with a small swap claim and one without, which read their
// own cgroup swap limit and DRA_SWAP_LIMIT_BYTES (ReadSelf) and report
// them in their termination message; the runner (Run) reads those
// reports, the node's ResourceSlice and the probes' status and events,
// and Diagnose names what is wrong per node: no slice, no usable swap,
// the kubelet's swapBehavior, a runtime that did not apply the CDI device
// or did not run the hook, a failed prepare. The probes' shape (ProbePod)
// is what the chart's admission policy lets the test's account create.
package installcheck
