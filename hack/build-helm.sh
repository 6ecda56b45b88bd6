#!/usr/bin/env bash
# Builds the helm v4 CLI from its tools module (test/tools/helm) for the
# local clusters and the chart's tests. Rebuilt only when missing or older
# than the module's go.mod/go.sum, like make.
#   OUT_DIR  where the binary goes (default: <repo>/_output/bin)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${repo_root}/test/tools/helm"
OUT_DIR="${OUT_DIR:-${repo_root}/_output/bin}"
mkdir -p "${OUT_DIR}"
out="${OUT_DIR}/helm"
if [[ -x "${out}" && "${out}" -nt "${src}/go.sum" && "${out}" -nt "${src}/go.mod" ]]; then
	echo "build-helm: ${out} is up to date"
	exit 0
fi
echo "build-helm: building helm -> ${out}"
start=${SECONDS}
(cd "${src}" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "${out}.tmp" helm.sh/helm/v4/cmd/helm) || {
	rm -f "${out}.tmp"
	echo "build-helm: go build of helm failed" >&2
	exit 1
}
mv -f "${out}.tmp" "${out}"
echo "build-helm: built ${out} in $((SECONDS - start))s"
