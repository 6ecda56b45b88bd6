#!/usr/bin/env bash
# Checks that each of the other modules that make test compiles requires
# the same version as the driver's module of every module whose packages
# both compile: tools/ (Kubernetes, helm and the image builder) and
# tools/lint (golangci-lint). The build cache keys a
# compiled package on its source, so a version that differs compiles that
# package, and everything above it (client-go, apimachinery, grpc...),
# twice in a cold make test: minutes on two cores. Part of make verify; the
# first run downloads the modules' sources (make test has them already).
set -euo pipefail
cd "$(dirname "$0")/.."
fmt='{{if .Module}}{{.ImportPath}} {{.Module.Path}} {{with .Module.Replace}}{{.Version}}{{else}}{{.Module.Version}}{{end}}{{end}}'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go list -deps -test -f "$fmt" ./... | sort -u > "$tmp/main"
# The tools module's commands are the ones its tools.go pins (-e: go list
# reports importing a command as an error, and lists it all the same), and
# the image builder with its tests.
read -r -a commands <<<"$(cd tools && go list -e -tags tools -f '{{join .Imports " "}}' .)"
[ "${#commands[@]}" -gt 0 ] || { echo "check-modules: tools/tools.go pins no commands" >&2; exit 1; }
(cd tools && CGO_ENABLED=0 go list -deps -f "$fmt" "${commands[@]}" &&
	CGO_ENABLED=0 go list -deps -test -f "$fmt" ./images/...) | sort -u > "$tmp/tools"
(cd tools/lint && CGO_ENABLED=0 go list -deps -f "$fmt" ./golangci-lint) | sort -u > "$tmp/lint"
# MODULE DIR: modules that may differ, each with why. golangci-lint v2.15.0
# requires logrus v1.10.2; the driver links v1.9.4 (containerd's cgroups
# and nri), which tools/ shares: one small package compiles twice.
allowed="lint github.com/sirupsen/logrus"
dir_of() { if [ "$1" = tools ]; then echo tools; else echo "tools/$1"; fi; }
rc=0
for other in tools lint; do
	# Lines: import path, main module path and version, other's version.
	mismatch=$(join "$tmp/main" "$tmp/$other" | awk '$3 != $5 { print $2, $3, $5 }' | sort -u |
		while read -r mod main theirs; do
			grep -qxF "$other $mod" <<<"$allowed" || echo "$mod $main $theirs"
		done)
	shared=$(join "$tmp/main" "$tmp/$other" | wc -l)
	if [ -n "$mismatch" ]; then
		{
			echo "check-modules: the driver's module (go.mod) and $other's ($(dir_of "$other")/go.mod)"
			echo "require different versions of modules whose packages both compile:"
			echo "MODULE MAIN OTHER" | cat - <(echo "$mismatch") | column -t | sed 's/^/  /'
			echo "Require the same version in both (go get MODULE@VERSION in each, then go mod tidy)."
		} >&2
		rc=1
	else
		echo "check-modules: $other: $shared packages compiled by it and the driver's module, each at one version"
	fi
done
exit "$rc"
