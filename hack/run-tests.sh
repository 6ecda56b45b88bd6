#!/usr/bin/env bash
# hack/run-tests.sh BIN_DIR [-C DIR] [-skip REGEXP] PATTERN... [-C DIR ...]:
# runs the test binaries that `go test -c -o BIN_DIR/ PATTERN...` linked
# (make unit-compile), as go test runs them: each in its package's
# directory, -test.count=1, go test's 10-minute timeout, two packages at a
# time, in the order given; it prints go test's summary line per package and
# a failing package's whole output, and fails if any package failed or has
# no binary. -C DIR: the patterns after it are of the module in DIR; -skip:
# the tests the packages after it skip. make test compiles and links the
# -race unit tests once, at idle priority beside the e2e run, and runs them
# with this (make unit UNIT_BIN=BIN_DIR): go test would link every test
# binary a second time.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BIN_DIR [-C DIR] [-skip REGEXP] PATTERN..." >&2; exit 2; }
bin=$(cd "$1" && pwd)
shift
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# The packages with tests, a line each: import path, directory, skip.
dir=. skip=""
while [ $# -gt 0 ]; do
	case "$1" in
	-C) dir=$2; shift 2 ;;
	-skip) skip=$2; shift 2 ;;
	*)
		(cd "$dir" && go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "$1") |
			while read -r pkg pdir; do
				[ -z "$pkg" ] || printf '%s\t%s\t%s\n' "$pkg" "$pdir" "$skip"
			done >> "$logs/packages"
		shift ;;
	esac
done
[ -s "$logs/packages" ] || { echo "run-tests: no test packages" >&2; exit 1; }

# One package: its binary run in its directory, the result in $logs/N.rc.
run() {
	local n=$1 pkg=$2 dir=$3 skip=$4 exe="$bin/${2##*/}.test" start=$SECONDS rc=0
	local args=(-test.count=1 -test.timeout=10m0s -test.paniconexit0)
	[ -z "$skip" ] || args+=(-test.skip "$skip")
	if [ ! -x "$exe" ]; then
		echo "no test binary $exe (its compile failed: see the compile's log)" > "$logs/$n.out"
		rc=1
	else
		(cd "$dir" && "$exe" "${args[@]}") > "$logs/$n.out" 2>&1 || rc=$?
	fi
	if [ "$rc" = 0 ]; then
		printf 'ok  \t%s\t%ds\n' "$pkg" "$((SECONDS - start))" > "$logs/$n.sum"
	else
		{ cat "$logs/$n.out"; printf 'FAIL\t%s\t%ds (exit %s)\n' "$pkg" "$((SECONDS - start))" "$rc"; } > "$logs/$n.sum"
	fi
	echo "$rc" > "$logs/$n.rc"
}

n=0
while IFS=$'\t' read -r pkg dir skip; do
	# At most two at a time (the machine's cores, as go test's -p).
	while [ "$(jobs -rp | wc -l)" -ge 2 ]; do
		wait -n || true
	done
	n=$((n + 1))
	run "$n" "$pkg" "$dir" "$skip" &
done < "$logs/packages"
wait
rc=0
for i in $(seq 1 "$n"); do
	cat "$logs/$i.sum"
	[ "$(cat "$logs/$i.rc")" = 0 ] || rc=1
done
exit "$rc"
