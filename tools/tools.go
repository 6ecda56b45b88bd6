//go:build tools

// Package tools pins the Kubernetes commands and the helm CLI that tests
// build from source, cyclonedx-gomod, which writes the release's SBOMs, and
// helm-docs and helm-values-schema-json, which generate the chart's README
// and values.schema.json.
package tools

import (
	_ "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"
	_ "github.com/losisin/helm-values-schema-json/v2"
	_ "github.com/norwoodj/helm-docs/cmd/helm-docs"
	_ "helm.sh/helm/v4/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
