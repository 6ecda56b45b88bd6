//go:build tools

// Package tools pins the helm CLI that the cluster scripts and tests use to
// install the driver's chart.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
