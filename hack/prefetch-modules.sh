#!/usr/bin/env bash
# Downloads the Go modules that make test builds from: the main module's and
# the tools modules' (Kubernetes, helm and the image builder, containerd, the
# linters). make test runs it in the background, so that a cold run fetches
# them while it compiles rather than between compiles. A failure here costs nothing: each build downloads what
# it still lacks (the module cache is safe for concurrent use).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
pids=()
for dir in . tools tools/containerd tools/lint; do
	(cd "$dir" && go mod download && echo "prefetch: $dir done after $((SECONDS - start)) s") &
	pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
exit "$rc"
