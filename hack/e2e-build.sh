#!/usr/bin/env bash
# Builds what both end-to-end legs run: the cluster's binaries and images
# (hack/cluster/build.sh), the release the two-node cluster installs
# (hack/release.sh: the chart and the image index, in _output/release-e2e;
# the index holds this machine's architecture only, the nodes': the arm64
# cross-compile is the release test's, tools/images TestRelease, which make
# test runs beside the e2e run) and the e2e suite as one static test binary,
# _output/e2e.test, which the host leg runs and the cgroup v2 guest runs too.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/cluster/build.sh
mkdir -p _output
source hack/cluster/lib.sh
VERSION="$DRIVER_VERSION" ARCHES="$(go env GOARCH)" RELEASE_DIR="$PWD/_output/release-e2e" HELM="$BIN/helm" OUT_DIR="$BIN" \
	hack/release.sh > _output/release-e2e.log 2>&1 || { cat _output/release-e2e.log >&2; exit 1; }
tail -n 3 _output/release-e2e.log
# CGO_ENABLED=0 and -trimpath, as every Go build of this module but the race
# unit tests: one build configuration, compiled once (see the Makefile).
# -s -w: a faster link; panics still print file:line (from the pclntab).
CGO_ENABLED=0 go test -c -trimpath -ldflags="-s -w" -o _output/e2e.test.tmp ./test/e2e
mv -f _output/e2e.test.tmp _output/e2e.test
