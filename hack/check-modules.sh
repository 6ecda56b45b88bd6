#!/usr/bin/env bash
# Checks that the tools module (test/tools: Kubernetes and helm) and the
# driver's module require the same version of every module whose packages
# both compile. The build cache keys a compiled package on its source, so a
# version that differs compiles that package, and everything above it
# (client-go, apimachinery, grpc...), twice in a cold make test: minutes on
# two cores. Part of make verify; the first run downloads the tools
# module's sources (make test has them already).
set -euo pipefail
cd "$(dirname "$0")/.."
fmt='{{if .Module}}{{.ImportPath}} {{.Module.Path}} {{with .Module.Replace}}{{.Version}}{{else}}{{.Module.Version}}{{end}}{{end}}'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go list -deps -test -f "$fmt" ./... | sort -u > "$tmp/main"
# The tools module's commands are the ones its tools.go pins (-e: go list
# reports importing a command as an error, and lists it all the same).
read -r -a commands <<<"$(cd test/tools && go list -e -tags tools -f '{{join .Imports " "}}' .)"
[ "${#commands[@]}" -gt 0 ] || { echo "check-modules: test/tools/tools.go pins no commands" >&2; exit 1; }
(cd test/tools && CGO_ENABLED=0 go list -deps -f "$fmt" "${commands[@]}") | sort -u > "$tmp/tools"
# Lines: import path, main module path and version, tools version.
mismatch=$(join "$tmp/main" "$tmp/tools" | awk '$3 != $5 { print $2, $3, $5 }' | sort -u)
shared=$(join "$tmp/main" "$tmp/tools" | wc -l)
if [ -n "$mismatch" ]; then
	echo "check-modules: the driver's module (go.mod) and the tools module (test/tools/go.mod)"
	echo "require different versions of modules whose packages both compile:"
	echo "MODULE MAIN TOOLS" | cat - <(echo "$mismatch") | column -t | sed 's/^/  /'
	echo "Require the same version in both (go get MODULE@VERSION in each, then go mod tidy)."
	exit 1
fi >&2
echo "check-modules: $shared packages compiled by both modules, each at one version"
