#!/usr/bin/env bash
# make release VERSION=x.y.z [REGISTRY=HOST[:PORT][/PATH]]: the release artifacts of
# VERSION, in RELEASE_DIR (default _output/release, replaced as a whole):
#   dra-driver-swap-VERSION.oci.tar  an OCI image layout (tar): the driver's
#       image dra-driver-swap:VERSION as an OCI image index of linux/amd64
#       and linux/arm64 images (static cross-compiles, reproducible), and a
#       CycloneDX SBOM per binary and architecture (cyclonedx-gomod, from the
#       modules each binary links) attached to the index as an OCI referrer;
#   dra-driver-swap-VERSION.tgz      the chart (helm package: version and
#       appVersion VERSION), which passes `helm lint --strict`;
#   SHA256SUMS                       of both (`sha256sum -c SHA256SUMS`).
# With REGISTRY, the index and its SBOM are pushed to
# REGISTRY/dra-driver-swap:VERSION and the chart to oci://REGISTRY/charts
# (plain http for a loopback registry, or with INSECURE_REGISTRY=1), so that
#   helm install dra-driver-swap oci://REGISTRY/charts/dra-driver-swap \
#     --version VERSION --set image.repository=REGISTRY/dra-driver-swap
# installs it. Both pushes authenticate with the docker config's credentials
# for HOST[:PORT] ($DOCKER_CONFIG/config.json, else ~/.docker/config.json,
# with its credential helpers: what `docker login` writes); helm looks in
# its own registry config first (`helm registry login`), then there.
#
# Environment:
#   VERSION            the release, x.y.z[-prerelease] (required)
#   REVISION           the images' revision label (default: git HEAD)
#   SOURCE_DATE_EPOCH  the images' creation time and the tar's mtimes
#                      (default: HEAD's commit time): the same sources give
#                      the same .oci.tar, byte for byte
#   ARCHES             the image's architectures (default: amd64,arm64); an
#                      index even for one
#   RELEASE_DIR        where the artifacts go (default: <repo>/_output/release)
#   REGISTRY           HOST[:PORT][/PATH] to push to (default: none)
#   HELM, CYCLONEDX_GOMOD  the tools; unset, hack/build-tools.sh builds
#                      them from the tools module into OUT_DIR (<repo>/_output/bin)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
die() {
	echo "release: error: $*" >&2
	exit 1
}
log() { echo "release: $*" >&2; }

VERSION="${VERSION:-}"
[[ -n "${VERSION}" ]] || die "VERSION is required (make release VERSION=x.y.z)"
# Semantic versioning without build metadata: an image tag has no '+'.
[[ "${VERSION}" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
	die "VERSION=${VERSION} is not x.y.z or x.y.z-prerelease"
REGISTRY="${REGISTRY:-}"
registry_host="${REGISTRY%%/*}"
if [[ -n "${REGISTRY}" ]]; then
	# HOST[:PORT] (a host with a dot or a port, or localhost: image
	# references read anything else as a Docker Hub repository), then
	# repository path components as the OCI distribution spec names them.
	component='[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*'
	[[ "${registry_host}" =~ ^([A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:[0-9]+)?|\[[0-9A-Fa-f:]+\](:[0-9]+)?)$ &&
		("${registry_host}" == *[.:]* || "${registry_host}" == localhost) &&
		"${REGISTRY#"${registry_host}"}" =~ ^(/${component})*$ ]] ||
		die "REGISTRY=${REGISTRY} is not HOST[:PORT][/PATH] (a host with a dot or a port, or localhost; a path of lowercase components a/b/c)"
fi
REVISION="${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
	SOURCE_DATE_EPOCH="$(git log -1 --format=%ct 2>/dev/null || echo 0)"
fi
export SOURCE_DATE_EPOCH
ARCHES="${ARCHES:-amd64,arm64}"
OUT_DIR="${OUT_DIR:-${repo_root}/_output/bin}"
RELEASE_DIR="${RELEASE_DIR:-${repo_root}/_output/release}"
CHART="${repo_root}/deployments/helm/dra-driver-swap"
GO="${GO:-go}"
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then
	log "warning: the working tree has uncommitted changes, which the artifacts hold (revision label ${REVISION})"
fi

# The artifacts replace RELEASE_DIR as a whole; refuse a directory that
# holds anything else, so that a mistyped RELEASE_DIR removes nothing.
if [[ -e "${RELEASE_DIR}" ]]; then
	[[ -d "${RELEASE_DIR}" ]] || die "RELEASE_DIR=${RELEASE_DIR} is not a directory"
	for f in "${RELEASE_DIR}"/* "${RELEASE_DIR}"/.[!.]*; do
		[[ -e "${f}" ]] || continue
		case "$(basename "${f}")" in
		SHA256SUMS | dra-driver-swap-*.oci.tar | dra-driver-swap-*.tgz) [[ -f "${f}" ]] || die "refusing to replace ${RELEASE_DIR}: ${f} is not a file" ;;
		*) die "refusing to replace ${RELEASE_DIR}: it holds $(basename "${f}"), which is no release artifact" ;;
		esac
	done
fi

# The tools: helm and cyclonedx-gomod from the tools module, unless given.
need=()
[[ -n "${HELM:-}" ]] || { HELM="${OUT_DIR}/helm"; need+=(helm); }
[[ -n "${CYCLONEDX_GOMOD:-}" ]] || { CYCLONEDX_GOMOD="${OUT_DIR}/cyclonedx-gomod"; need+=(cyclonedx-gomod); }
if [[ ${#need[@]} -gt 0 ]]; then
	# On stderr: stdout lists what was pushed.
	OUT_DIR="${OUT_DIR}" hack/build-tools.sh "${need[@]}" >&2
fi
for tool in "${HELM}" "${CYCLONEDX_GOMOD}"; do
	[[ -x "${tool}" ]] || die "${tool} is not an executable"
done

mkdir -p "$(dirname "${RELEASE_DIR}")"
work="$(mktemp -d)"
stage="$(mktemp -d "$(dirname "${RELEASE_DIR}")/.release.XXXXXX")"
trap 'rm -rf "${work}" "${stage}"' EXIT
(cd tools/images && CGO_ENABLED=0 "${GO}" build -trimpath -o "${work}/dra-swap-images" .)

log "building dra-driver-swap:${VERSION} for ${ARCHES} (revision ${REVISION}, SOURCE_DATE_EPOCH ${SOURCE_DATE_EPOCH})"
layout="${work}/layout"
"${work}/dra-swap-images" build -out "${layout}" -set driver -version "${VERSION}" -revision "${REVISION}" \
	-arch "${ARCHES}" -index -sbom-tool "${CYCLONEDX_GOMOD}" > "${work}/built"
read -r image_ref image_digest < "${work}/built"
[[ "${image_ref}" == "dra-driver-swap:${VERSION}" && "${image_digest}" == sha256:* ]] ||
	die "dra-swap-images build printed $(cat "${work}/built")"

# The layout as a tar whose bytes depend on its content only: names
# sorted, the owner 0:0, every mtime SOURCE_DATE_EPOCH (the layout's modes
# are 0644 and 0755 already).
image_tar="dra-driver-swap-${VERSION}.oci.tar"
tar --sort=name --mtime="@${SOURCE_DATE_EPOCH}" --owner=0 --group=0 --numeric-owner --format=ustar \
	-C "${layout}" -cf "${stage}/${image_tar}" oci-layout index.json blobs

chart_tgz="dra-driver-swap-${VERSION}.tgz"
"${HELM}" package "${CHART}" --version "${VERSION}" --app-version "${VERSION}" --destination "${stage}" >&2
[[ -f "${stage}/${chart_tgz}" ]] || die "helm package wrote no ${chart_tgz}"
"${HELM}" lint --strict "${stage}/${chart_tgz}" >&2 || die "helm lint --strict of ${chart_tgz} failed"

(cd "${stage}" && sha256sum -- "${image_tar}" "${chart_tgz}" > SHA256SUMS)
chmod 0755 "${stage}"
rm -rf "${RELEASE_DIR}"
mv "${stage}" "${RELEASE_DIR}"
log "artifacts in ${RELEASE_DIR}:"
sed 's/^/  /' "${RELEASE_DIR}/SHA256SUMS" >&2
log "image index dra-driver-swap:${VERSION}@${image_digest}"

if [[ -n "${REGISTRY}" ]]; then
	plain_http=()
	case "${registry_host}" in
	localhost | localhost:* | 127.* | \[::1\] | \[::1\]:*) plain_http=(--plain-http) ;;
	*) [[ "${INSECURE_REGISTRY:-}" != 1 ]] || plain_http=(--plain-http) ;;
	esac
	insecure=()
	[[ ${#plain_http[@]} -eq 0 ]] || insecure=(-insecure)
	log "pushing the image index and its SBOM to ${REGISTRY}"
	"${work}/dra-swap-images" push -from "${layout}" -registry "${REGISTRY}" "${insecure[@]}" ||
		die "pushing the image index to ${REGISTRY} failed (the artifacts are in ${RELEASE_DIR})"
	log "pushing the chart to oci://${REGISTRY}/charts"
	"${HELM}" push "${RELEASE_DIR}/${chart_tgz}" "oci://${REGISTRY}/charts" "${plain_http[@]}" >&2 ||
		die "pushing the chart to oci://${REGISTRY}/charts failed: helm takes the credentials for ${registry_host} from its registry config (helm registry login), else from the docker config"
	log "install with: helm install dra-driver-swap oci://${REGISTRY}/charts/dra-driver-swap --version ${VERSION} --set image.repository=${REGISTRY}/dra-driver-swap" \
		"(a registry that wants credentials to pull: the nodes need them too, e.g. --set 'imagePullSecrets[0].name=SECRET', a kubernetes.io/dockerconfigjson Secret in the release's namespace)"
fi
