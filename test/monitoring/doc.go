// Package monitoring tests the Grafana dashboard and the alert rules the
// chart ships (deployments/helm/dra-driver-swap/files) and their runbook
// (docs/runbook.md).
package monitoring
