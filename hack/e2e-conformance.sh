#!/usr/bin/env bash
# The conformance suite (make e2e-conformance, docs/conformance.md): the e2e
# tests that need only the API and what a pod sees of its own cgroups, run
# against any cluster where the driver is installed, through KUBECONFIG and
# nothing else; the tests that need the node or this repository's cluster
# skip, saying why. It needs no root, no access to the nodes and no checkout
# beyond this script, examples/ and the compiled suite.
#   KUBECONFIG            the cluster (required; the current context)
#   E2E_WORKLOAD_IMAGE    the test workload's image (swap-workload:v1, `make
#                         images push REGISTRY=...`); default: beside the
#                         driver's image, pulled with its pull Secrets
#   E2E_NODE              the node under test; default: the node whose swap
#                         device has the most swap no claim holds
#   E2E_DEVICE_CLASS      the DeviceClass of the suite's claims (dra.swap)
#   E2E_DRIVER_NAMESPACE  the driver's namespace; default: found by the chart's labels
#   E2E_TIMEOUT_SCALE     multiplies the suite's timeouts (a slow cluster)
#   E2E_RUN=regexp        run only the matching tests (go test -run)
#   E2E_SKIP_BUILD=1      use _output/e2e.test as it is
#   E2E_CONFORMANCE_LOG   the full log (default _output/e2e-conformance.log)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${KUBECONFIG:-}" ]; then
	echo "e2e-conformance: set KUBECONFIG to the kubeconfig of the cluster to test (make e2e-conformance KUBECONFIG=...)" >&2
	exit 1
fi
# The suite runs in its package directory (as go test runs it): every
# file of KUBECONFIG must be named from anywhere.
kubeconfig=()
IFS=: read -ra files <<< "$KUBECONFIG"
for f in "${files[@]}"; do
	[ -n "$f" ] || continue
	if [ ! -r "$f" ]; then
		echo "e2e-conformance: KUBECONFIG names $f, which cannot be read" >&2
		exit 1
	fi
	kubeconfig+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done
KUBECONFIG=$(IFS=:; echo "${kubeconfig[*]}")
export KUBECONFIG

mkdir -p _output
if [ "${E2E_SKIP_BUILD:-}" != 1 ]; then
	# The build configuration of every other Go build here (see the Makefile).
	CGO_ENABLED=0 go test -c -trimpath -ldflags="-s -w" -o _output/e2e.test.tmp ./test/e2e
	mv -f _output/e2e.test.tmp _output/e2e.test
fi
log=${E2E_CONFORMANCE_LOG:-$PWD/_output/e2e-conformance.log}
start=$SECONDS
set +e
(cd test/e2e && E2E_CONFORMANCE=1 ../../_output/e2e.test -test.count=1 -test.v -test.timeout 60m ${E2E_RUN:+-test.run "$E2E_RUN"}) 2>&1 |
	tee "$log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|^\s+\S+_test.go:'
rc=${PIPESTATUS[0]}
set -e
ran=$(grep -c '^--- PASS' "$log" || true)
skipped=$(grep -c '^--- SKIP' "$log" || true)
failed=$(grep -c '^--- FAIL' "$log" || true)
echo "e2e-conformance: $([ "$rc" = 0 ] && echo ok || echo FAIL) in $((SECONDS - start)) s: $ran passed, $failed failed, $skipped skipped (full log: $log)"
exit "$rc"
