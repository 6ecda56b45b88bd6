#!/usr/bin/env bash
# make test: gofmt and go vet, the unit tests (-race), the integration tests
# and the end-to-end suite on a two-node cluster (this host's node, cgroup
# v1, and an emulated guest's, cgroup v2: hack/e2e-cluster.sh), arranged
# for a 2-core machine with cold caches:
#   1. gofmt (fails at once), the modules downloaded in the background;
#   2. the builds: the cluster's binaries, images and the e2e suite (one
#      static binary for both nodes), with the guest image (mostly downloads
#      and disk) beside them;
#   3. the two-node e2e run and the integration tests one after another, at
#      normal priority. Beside them, in the CPU time they leave idle
#      (SCHED_IDLE: the e2e run never waits for it), make verify (go vet,
#      and golangci-lint: built from tools/lint, then run), the -race unit
#      tests compiled and linked, the other large compiles of a cold run,
#      and the release test (for this machine's architecture);
#   4. the unit tests, at normal priority: the binaries step 3 linked, run
#      (make unit UNIT_BIN, hack/run-tests.sh), but the release test.
# Nothing timed runs at idle priority: vet's result does not depend on time,
# and the unit tests themselves run in step 4. Running the emulated leg
# beside the host's tests was tried twice and measured (see docs/development.md):
# with the guest's control plane inside it, the starved guest's API server
# timed out TLS handshakes and its node went NotReady; with the control
# plane on the host and QEMU at nice -5, the guest still got too little CPU
# (its cluster took 469 s to come up instead of 149 s, its first tests ran
# 2-3 times slower), because with autogroup scheduling each setsid'd
# component of the host leg's cluster is a group of its own, as heavy as
# QEMU's whatever its nice value.
#   E2E=skip   no cluster builds; verify, unit and integration tests only
#              (the e2e run says it skips)
# Logs: _output/{verify,unit-build,integration,e2e,e2e-v2,e2e-nodes}.log.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p _output
start=$SECONDS
phase() { echo "test: $* (at $((SECONDS - start)) s)"; }

phase "gofmt"
make --no-print-directory fmt-check

if [ "${E2E:-}" = skip ]; then
	rc=0
	make --no-print-directory verify unit integration || rc=1
	hack/e2e-cluster.sh
	make --no-print-directory monitoring-check SCRAPED=tools/promql/testdata/scraped.prom || rc=1
	exit "$rc"
fi

hack/prefetch-modules.sh > _output/prefetch.log 2>&1 &

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

# In the background, at idle priority: make verify (the linters' build and
# run, go vet), then the -race unit tests compiled and linked into a
# scratch directory, which step 4 runs.
unit_bin=$(mktemp -d)
rm -f _output/release-test.rc
(
	# SCHED_IDLE (and idle I/O), before anything starts: the children
	# inherit it. The compiles get only the CPU the legs leave.
	chrt -i -p 0 "$BASHPID" >/dev/null
	ionice -c 3 -p "$BASHPID" >/dev/null 2>&1 || true
	rc=0
	make --no-print-directory verify > _output/verify.log 2>&1 || rc=1
	echo "verify: exit $rc after $((SECONDS - start)) s" >> _output/verify.log
	if make --no-print-directory unit-compile UNIT_BIN="$unit_bin" > _output/unit-build.log 2>&1; then
		echo "unit tests compiled after $((SECONDS - start)) s" >> _output/unit-build.log
	else
		echo "compiling the unit tests failed after $((SECONDS - start)) s" >> _output/unit-build.log
	fi
	# The PromQL evaluator (a module of its own) compiled, with vet: the
	# build cache keeps its packages for make monitoring-check.
	(cd tools/promql && CGO_ENABLED=0 GOFLAGS=-trimpath go vet . >> ../../_output/unit-build.log 2>&1) ||
		echo "vetting the PromQL evaluator failed (make monitoring-check says why)" >> _output/unit-build.log
	# The chart's doc and schema generators, which make integration runs.
	hack/build-tools.sh helm-docs helm-values-schema-json >> _output/unit-build.log 2>&1 ||
		echo "building helm-docs and helm-values-schema-json failed (make integration says why)" >> _output/unit-build.log
	# The release test (tools/images TestRelease: two releases built and
	# read back), run here and not in step 4: it builds, and nothing in it
	# is timed. Its result is judged in step 4. It builds for this machine's
	# architecture only (RELEASE_TEST_ARCHES): the driver's arm64 compile is
	# some 500 CPU seconds that make test cannot spare on a 2-core machine;
	# make release builds and checks every architecture (the image tool's
	# checkBinaries).
	release_rc=0
	# Its binary is the one unit-compile linked.
	(cd tools/images && RELEASE_TEST_ARCHES="$(go env GOARCH)" "$unit_bin/images.test" -test.count=1 -test.timeout=60m -test.v -test.run '^TestRelease$') > _output/release-test.log 2>&1 || release_rc=$?
	echo "$release_rc" > _output/release-test.rc
	exit "$rc"
) &
checks=$!
trap 'kill "$checks" 2>/dev/null || true; rm -rf "$unit_bin"' EXIT

rc=0
phase "e2e on two nodes (this host, and cgroup v2 in an emulated guest)"
E2E_SKIP_BUILD=1 hack/e2e-cluster.sh || rc=1
phase "integration tests"
make --no-print-directory integration || rc=1

phase "waiting for go vet and the unit tests' compile"
if ! wait "$checks"; then
	cat _output/verify.log
	echo "test: make verify failed" >&2
	rc=1
else
	tail -n 1 _output/verify.log
fi
tail -n 1 _output/unit-build.log
phase "the alert rules and dashboard over the scraped series (PromQL)"
if [ -s _output/scraped.prom ]; then
	make --no-print-directory monitoring-check SCRAPED=_output/scraped.prom || rc=1
else
	echo "test: the e2e run scraped no series (_output/scraped.prom): TestScrapeForRules failed or did not run" >&2
	rc=1
fi
phase "unit tests"
if [ "$(cat _output/release-test.rc 2>/dev/null)" = 0 ]; then
	tail -n 1 _output/release-test.log
else
	cat _output/release-test.log 2>/dev/null || echo "test: the release test did not run" >&2
	echo "test: tools/images TestRelease failed" >&2
	rc=1
fi
# The binaries the idle chain linked, run (make unit UNIT_BIN: not linked
# again); one that failed to compile is missing, and the compile's log says
# why.
if grep -q "^compiling the unit tests failed" _output/unit-build.log; then
	cat _output/unit-build.log
	rc=1
fi
make --no-print-directory unit UNIT_SKIP='^TestRelease$' UNIT_BIN="$unit_bin" || rc=1
phase "done: $([ "$rc" = 0 ] && echo passed || echo FAILED)"
exit "$rc"
