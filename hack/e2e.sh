#!/usr/bin/env bash
# Runs the end-to-end tests on a real local cluster (hack/cluster) and
# tears it down again, also when the tests fail.
#   E2E=skip   skip, explicitly (for machines that are not root or cannot swapon)
#   E2E_KEEP=1 keep the cluster running afterwards (tear down with make demo-down)
#   E2E_RUN=regexp run only the matching tests (go test -run)
#   E2E_SKIP_BUILD=1  use what hack/e2e-build.sh built (make test builds once
#                     for both legs)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${E2E:-}" = skip ]; then
	echo "e2e: SKIPPED because E2E=skip was set"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "e2e: the end-to-end tests run a kubelet, containerd and swapon and need root." >&2
	echo "e2e: run as root, or set E2E=skip to skip them explicitly." >&2
	exit 1
fi
if [ ! -r /proc/swaps ] || ! command -v swapon >/dev/null; then
	echo "e2e: this machine cannot enable swap (no /proc/swaps or swapon); set E2E=skip to skip explicitly." >&2
	exit 1
fi

start=$SECONDS
if [ "${E2E_SKIP_BUILD:-}" != 1 ]; then
	hack/e2e-build.sh
	echo "e2e: build took $((SECONDS - start)) s"
fi
if [ "${E2E_KEEP:-}" != 1 ]; then
	trap 'hack/cluster/down.sh' EXIT
fi
up=$SECONDS
hack/cluster/up.sh
echo "e2e: cluster up in $((SECONDS - up)) s"
tests=$SECONDS
# The test binary runs in its package directory, as go test runs it.
(cd test/e2e && ../../_output/e2e.test -test.count=1 -test.v -test.timeout 40m ${E2E_RUN:+-test.run "$E2E_RUN"}) 2>&1 |
	tee _output/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|^\s+\S+_test.go:'
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then echo "e2e: ok"; else echo "e2e: FAIL (exit $rc)"; fi
echo "e2e: tests took $((SECONDS - tests)) s, $((SECONDS - start)) s in all (full log: _output/e2e.log)"
exit "$rc"
