#!/usr/bin/env bash
# The part of `make test` after the static checks and the unit tests: the
# integration and end-to-end tests. The tests run one after another; only the builds overlap:
# the guest image (mostly downloads and disk) builds while the cluster's
# binaries compile, and the e2e suite is compiled once for both legs.
# Running the emulated cgroup v2 leg beside the host's tests was tried and
# measured: on 2 cores the starved guest's API server timed out TLS
# handshakes and its node went NotReady (see docs/design.md).
#   E2E=skip   no builds: the integration tests (both legs skip, as on their
#              own)
# Logs: _output/integration.log, _output/e2e.log, _output/e2e-v2.log.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p _output
start=$SECONDS
phase() { echo "test: $* (at $((SECONDS - start)) s)"; }

if [ "${E2E:-}" = skip ]; then
	make --no-print-directory integration
	hack/e2e.sh
	hack/e2e-v2.sh
	exit 0
fi

# Builds: the cluster's (which include the integration tests' kube-apiserver
# and helm) and the guest image at once; the guest image's build is mostly
# downloads and disk, the cluster's is compiling. hack/install-deps.sh and the
# guest build take one apt lock, so their package installs do not collide.
phase "building the clusters' binaries, images and the guest image"
hack/guest/build.sh > _output/guest-build.log 2>&1 &
guest_build=$!
hack/e2e-build.sh
if ! wait "$guest_build"; then
	cat _output/guest-build.log
	echo "test: hack/guest/build.sh failed" >&2
	exit 1
fi
tail -n 1 _output/guest-build.log
phase "builds done"

rc=0
phase "integration tests"
make --no-print-directory integration || rc=1
phase "e2e on this host (cgroup v$( [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && echo 2 || echo 1))"
E2E_SKIP_BUILD=1 hack/e2e.sh || rc=1
phase "e2e on cgroup v2 (emulated guest)"
E2E_SKIP_BUILD=1 hack/e2e-v2.sh || rc=1
phase "done: integration and e2e $([ "$rc" = 0 ] && echo passed || echo FAILED)"
exit "$rc"
