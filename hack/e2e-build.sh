#!/usr/bin/env bash
# Builds what both end-to-end legs run: the cluster's binaries and images
# (hack/cluster/build.sh) and the e2e suite as one static test binary,
# _output/e2e.test, which the host leg runs and the cgroup v2 guest runs too.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/cluster/build.sh
mkdir -p _output
# CGO_ENABLED=0 and -trimpath, as every Go build of this module but the race
# unit tests: one build configuration, compiled once (see the Makefile).
# -s -w: a faster link; panics still print file:line (from the pclntab).
CGO_ENABLED=0 go test -c -trimpath -ldflags="-s -w" -o _output/e2e.test.tmp ./test/e2e
mv -f _output/e2e.test.tmp _output/e2e.test
