#!/usr/bin/env bash
# Builds the commands of the tools module (tools/) that the integration
# and end-to-end tests and `make release` run: real Kubernetes components,
# the helm v4 CLI, cyclonedx-gomod (the release's SBOMs), helm-docs (the
# chart's README) and helm-values-schema-json (its values.schema.json), from
# source, in one go build; and golangci-lint with
# logcheck compiled in (`make lint`), from the lint module (tools/lint).
#
# Usage: hack/build-tools.sh [COMMAND...]
#   COMMAND is one of kube-apiserver, kube-scheduler, kube-controller-manager,
#   kubelet, kube-proxy, kubectl, helm, cyclonedx-gomod, helm-docs,
#   helm-values-schema-json, golangci-lint
#   (default: kube-apiserver).
#
# helm is built in the same module as Kubernetes, and that module requires
# the versions the driver's module does for every package both compile
# (hack/check-modules.sh, part of make verify): a cold make test compiles
# client-go, apimachinery, grpc and the rest once, not once per module.
#
# Environment:
#   OUT_DIR       where binaries go (default: <repo>/_output/bin)
#   KUBE_VERSION  Kubernetes version to build (default: v1.37.1). It must match
#                 the k8s.io/kubernetes version that tools/go.mod requires:
#                 to build another version, edit tools/go.mod (the
#                 k8s.io/kubernetes require and every k8s.io/* staging replace,
#                 v1.X.Y -> v0.X.Y) and run `go mod tidy` in tools/.
#   GO            go command (default: go)
#   FORCE=1       rebuild even when a binary is up to date
#
# A binary is rebuilt only when it is missing or older than its module's
# go.sum or go.mod (tools/, or tools/lint and golangci-lint's
# main.go), like make.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${repo_root}/tools"
GO="${GO:-go}"
KUBE_VERSION="${KUBE_VERSION:-v1.37.1}"
OUT_DIR="${OUT_DIR:-${repo_root}/_output/bin}"
FORCE="${FORCE:-0}"

die() {
	echo "build-tools: error: $*" >&2
	exit 1
}

[[ -f "${tools_dir}/go.mod" ]] || die "${tools_dir}/go.mod not found"

if [[ ! "${KUBE_VERSION}" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.+-]+)?$ ]]; then
	die "KUBE_VERSION=${KUBE_VERSION} is not of the form vMAJOR.MINOR.PATCH"
fi
git_major="${BASH_REMATCH[1]}"
git_minor="${BASH_REMATCH[2]}"

# required MODULE: the version of MODULE that the tools module requires, in
# a require block ("\tk8s.io/kubernetes v1.37.1") or a one-line require.
required() {
	local version
	version="$(awk -v m="$1" '
		$1 == "require" && $2 == m { print $3; exit }
		$1 == m && $2 ~ /^v/ { print $2; exit }
	' "${tools_dir}/go.mod")"
	[[ -n "${version}" ]] || die "tools/go.mod does not require $1"
	echo "${version}"
}
pinned="$(required k8s.io/kubernetes)"
if [[ "${pinned}" != "${KUBE_VERSION}" ]]; then
	die "KUBE_VERSION=${KUBE_VERSION} but tools/go.mod pins k8s.io/kubernetes ${pinned}.
To build ${KUBE_VERSION}, edit tools/go.mod: set the k8s.io/kubernetes
require to ${KUBE_VERSION} and every k8s.io staging replace to v0.${git_minor}.x,
then run 'go mod tidy' in tools/."
fi

if [[ $# -eq 0 ]]; then
	set -- kube-apiserver
fi
# package_of COMMAND: the package that builds COMMAND.
package_of() {
	case "$1" in
	kube-apiserver | kube-scheduler | kube-controller-manager | kubelet | kube-proxy | kubectl) echo "k8s.io/kubernetes/cmd/$1" ;;
	helm) echo helm.sh/helm/v4/cmd/helm ;;
	cyclonedx-gomod) echo github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod ;;
	helm-docs) echo github.com/norwoodj/helm-docs/cmd/helm-docs ;;
	helm-values-schema-json) echo github.com/losisin/helm-values-schema-json/v2 ;;
	golangci-lint) echo github.com/dra-driver-swap/dra-driver-swap/tools/lint/golangci-lint ;;
	*) die "unknown command '$1' (want kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, kube-proxy, kubectl, helm, cyclonedx-gomod, helm-docs, helm-values-schema-json or golangci-lint)" ;;
	esac
}
# module_of COMMAND: the directory of the module that builds COMMAND.
module_of() {
	case "$1" in
	golangci-lint) echo "${tools_dir}/lint" ;;
	*) echo "${tools_dir}" ;;
	esac
}
for cmd in "$@"; do
	package_of "${cmd}" >/dev/null
done

mkdir -p "${OUT_DIR}"
OUT_DIR="$(cd "${OUT_DIR}" && pwd)"

# helm's, helm-docs' and helm-values-schema-json's versions, as their
# release builds set them.
helm_version="$(required helm.sh/helm/v4)"
helm_docs_version="$(required github.com/norwoodj/helm-docs)"
schema_version="$(required github.com/losisin/helm-values-schema-json/v2)"

# -s -w: no symbol table and no DWARF (as Kubernetes releases build them):
# a faster link, and smaller binaries for the emulated node to load over 9p.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=${git_major}"
ldflags+=" -X k8s.io/component-base/version.gitMinor=${git_minor}"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X helm.sh/helm/v4/internal/version.version=${helm_version}"
# helm-docs' and helm-values-schema-json's main packages; -X on the other
# commands' main packages, which have no such variable, sets nothing.
ldflags+=" -X main.version=${helm_docs_version#v}"
ldflags+=" -X main.Version=${schema_version}"

todo=()
for cmd in "$@"; do
	out="${OUT_DIR}/${cmd}"
	mod="$(module_of "${cmd}")"
	newer=1
	srcs=("${mod}/go.sum" "${mod}/go.mod")
	[[ "${cmd}" != golangci-lint ]] || srcs+=("${mod}/golangci-lint/main.go")
	for src in "${srcs[@]}"; do
		[[ "${out}" -nt "${src}" ]] || newer=0
	done
	if [[ "${FORCE}" != 1 && -x "${out}" && "${newer}" == 1 ]]; then
		echo "build-tools: ${out} is up to date; FORCE=1 rebuilds it"
		continue
	fi
	todo+=("${cmd}")
done
[[ ${#todo[@]} -gt 0 ]] || exit 0

echo "build-tools: building ${todo[*]} (Kubernetes ${KUBE_VERSION}, helm ${helm_version}) -> ${OUT_DIR} (this takes minutes the first time)"
start=${SECONDS}
# One go build for all of them: it compiles their shared packages once and
# links one while it compiles the next. Into a temporary directory, so an
# interrupted build never leaves a half-written binary that looks up to date.
# Static and -trimpath, as Kubernetes releases its server binaries and as
# this repository builds its own, so that the packages this module shares
# with the driver's (at the same versions, see above) compile once for both.
tmp="$(mktemp -d "${OUT_DIR}/.build-tools.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
# One go build per module (golangci-lint's is tools/lint).
for mod in "${tools_dir}" "${tools_dir}/lint"; do
	pkgs=()
	for cmd in "${todo[@]}"; do
		[[ "$(module_of "${cmd}")" == "${mod}" ]] && pkgs+=("$(package_of "${cmd}")")
	done
	[[ ${#pkgs[@]} -gt 0 ]] || continue
	(cd "${mod}" && CGO_ENABLED=0 "${GO}" build -trimpath -o "${tmp}/" -ldflags "${ldflags}" "${pkgs[@]}") ||
		die "go build of ${pkgs[*]} failed"
done
for cmd in "${todo[@]}"; do
	[[ -x "${tmp}/${cmd}" ]] || die "go build wrote no ${cmd}"
	mv -f "${tmp}/${cmd}" "${OUT_DIR}/${cmd}"
done
echo "build-tools: built ${todo[*]} in $((SECONDS - start))s"
