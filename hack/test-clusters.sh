#!/usr/bin/env bash
# The part of `make test` after the static checks: the unit, integration and
# end-to-end tests, arranged for a 2-core machine. The cgroup v2 leg is an
# emulated guest that runs for 20-odd minutes and is the longest part; it
# starts as soon as its inputs are built, and the host runs the integration
# tests, the cgroup v1 leg and the unit tests while it runs. Nothing is shared
# at run time: the guest has no network and its own cluster; the host leg's
# cluster lives in /var/lib/dra-swap-e2e.
#   E2E=skip   no builds: the unit and integration tests (both legs skip, as
#              on their own)
# Logs: _output/integration.log, _output/e2e.log, _output/e2e-v2.log, and the
# v2 leg's console output in _output/e2e-v2.out (printed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p _output
start=$SECONDS
phase() { echo "test: $* (at $((SECONDS - start)) s)"; }

if [ "${E2E:-}" = skip ]; then
	make --no-print-directory unit
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

# The v2 leg in the background. Its timeouts are already scaled for emulation.
E2E_SKIP_BUILD=1 hack/e2e-v2.sh > _output/e2e-v2.out 2>&1 &
v2=$!
stop_v2() { kill -0 "$v2" 2>/dev/null && kill -TERM "$v2" 2>/dev/null; wait "$v2" 2>/dev/null || true; }
trap stop_v2 EXIT

rc=0
phase "integration tests"
make --no-print-directory integration || rc=1
phase "e2e on this host (cgroup v$( [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && echo 2 || echo 1)), while the v2 guest runs"
# The guest takes CPU from the host leg: its timeouts get twice the room.
E2E_SKIP_BUILD=1 E2E_TIMEOUT_SCALE=${E2E_TIMEOUT_SCALE:-2} TIMEOUT_SCALE=${TIMEOUT_SCALE:-2} hack/e2e.sh || rc=1
# The unit tests last: their -race build is the host's largest remaining
# work, and the guest still runs for minutes after the host leg.
phase "unit tests (-race), while the v2 guest runs"
make --no-print-directory unit || rc=1
phase "waiting for the v2 leg"
v2rc=0
wait "$v2" || v2rc=$?
trap - EXIT
echo "----- e2e-v2 (cgroup v2 guest) -----"
cat _output/e2e-v2.out
[ "$v2rc" = 0 ] || rc=1
phase "done: unit, integration and e2e $([ "$rc" = 0 ] && echo passed || echo FAILED)"
exit "$rc"
