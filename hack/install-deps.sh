#!/usr/bin/env bash
# Ensures the Debian packages that the tests need are installed, idempotently.
#
# Usage: hack/install-deps.sh [PACKAGE...]   (default: etcd-server)
#
# Installed packages are left alone. When something is missing, `apt-get update`
# runs once and then `apt-get install -y` installs what is missing. Without
# root it only prints what is missing and exits non-zero.
set -euo pipefail

if [[ $# -eq 0 ]]; then
	set -- etcd-server
fi

installed() {
	[[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

missing=()
for pkg in "$@"; do
	if ! installed "${pkg}"; then
		missing+=("${pkg}")
	fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
	echo "install-deps: already installed: $*"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-deps: error: missing packages: ${missing[*]}; apt-get not found, install them by hand" >&2
	exit 1
fi

if [[ "$(id -u)" -ne 0 ]]; then
	echo "install-deps: error: missing packages: ${missing[*]}" >&2
	echo "install-deps: run as root, or: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
	exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# One apt at a time: make test builds the cluster and the guest image at once,
# and each may install packages (apt's own lock fails instead of waiting).
apt_lock=/run/lock/dra-swap-apt.lock
flock "${apt_lock}" apt-get update -q
flock "${apt_lock}" apt-get install -y -q --no-install-recommends "${missing[@]}"

still=()
for pkg in "${missing[@]}"; do
	installed "${pkg}" || still+=("${pkg}")
done
if [[ ${#still[@]} -ne 0 ]]; then
	echo "install-deps: error: still missing after install: ${still[*]}" >&2
	exit 1
fi
echo "install-deps: installed ${missing[*]}"
