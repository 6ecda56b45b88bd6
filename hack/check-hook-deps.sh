#!/usr/bin/env bash
# Checks that dra-swap-hook, which the container runtime starts at every
# container start on every node, links no Kubernetes module (k8s.io/...:
# API types, apimachinery, the client, klog): what it writes for the kubelet plugin is
# internal/hookrecord, and the event emitter that needs the client stays in
# the plugin (internal/podevents). Part of make verify.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='^k8s\.io/'
deps=$(CGO_ENABLED=0 GOOS=linux go list -deps -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' ./cmd/dra-swap-hook)
bad=$(cut -d' ' -f1 <<<"$deps" | grep -E "$forbidden" || true)
if [ -n "$bad" ]; then
	echo "check-hook-deps: cmd/dra-swap-hook depends on $(wc -l <<<"$bad") Kubernetes packages (k8s.io/...), through:"
	# The importers outside the forbidden set: where the hook's graph enters it.
	while read -r pkg imports; do
		grep -qE "$forbidden" <<<"$pkg" && continue
		for imp in $imports; do
			grep -qE "$forbidden" <<<"$imp" && echo "  $pkg imports $imp"
		done
	done <<<"$deps"
	echo "Keep what the hook needs apart from the plugin's Kubernetes code (see internal/hookrecord)."
	exit 1
fi >&2
echo "check-hook-deps: cmd/dra-swap-hook depends on $(wc -l <<<"$deps") packages, none of k8s.io/..."
