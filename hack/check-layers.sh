#!/usr/bin/env bash
# Checks the import layering that the package layout promises (part of make
# verify; docs/design.md, "Layout"):
# - the controller (internal/controller/..., cmd/dra-swap-controller) and
#   internal/podlabels depend on nothing node-side (internal/kubeletplugin/...):
#   the names they share with the kubelet plugin are in api/swap/v1alpha1;
# - the contract (api/...) depends on nothing under internal/;
# - api/swap/v1alpha1/limits, which the OCI hook links, depends on the
#   standard library only.
# Tests' own imports are not counted.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
failed=0

# forbid DESCRIPTION PREFIX PACKAGES...: fails when any of the packages
# depends on a package whose path starts with PREFIX.
forbid() {
	local what=$1 prefix=$2
	shift 2
	local bad
	bad=$(CGO_ENABLED=0 go list -deps "$@" | grep -E "^${prefix}(/|$)" || true)
	if [ -n "$bad" ]; then
		echo "check-layers: $what, but depends on:" >&2
		echo "$bad" | sed 's/^/  /' >&2
		failed=1
	fi
}

forbid "the controller imports nothing node-side" "$mod/internal/kubeletplugin" \
	./internal/controller/... ./cmd/dra-swap-controller ./internal/podlabels
forbid "the contract imports nothing internal" "$mod/internal" ./api/...

nonstd=$(CGO_ENABLED=0 go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./api/swap/v1alpha1/limits |
	grep -vx "$mod/api/swap/v1alpha1/limits" || true)
if [ -n "$nonstd" ]; then
	echo "check-layers: api/swap/v1alpha1/limits (linked by the hook) uses the standard library only, but depends on:" >&2
	echo "$nonstd" | sed 's/^/  /' >&2
	failed=1
fi
exit "$failed"
