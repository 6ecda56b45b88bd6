#!/usr/bin/env bash
# Builds everything the local cluster runs, from source, and installs the
# Debian packages it needs. Up-to-date outputs are kept.
source "$(dirname "$0")/lib.sh"
cd "$REPO"
start_time=$SECONDS
hack/install-deps.sh etcd-server runc containernetworking-plugins iptables iproute2 openssl util-linux curl
# containerd beside Kubernetes: it shares no compiled package with the
# others (its own module versions, cgo), so the two builds only fill each
# other's idle CPU (links, narrow stretches of the package graph).
ctd_src=tools/containerd
ctd_pid=""
mkdir -p "$BIN"
if [ ! -x "$BIN/containerd" ] || [ "$ctd_src/go.sum" -nt "$BIN/containerd" ]; then
	log "building containerd beside Kubernetes (3-4 minutes the first time)"
	(cd "$ctd_src" && go build -ldflags="-s -w" -o "$BIN/" github.com/containerd/containerd/v2/cmd/containerd \
		github.com/containerd/containerd/v2/cmd/ctr github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2) \
		> "$BIN/.containerd-build.log" 2>&1 &
	ctd_pid=$!
fi
# CRI-O (BUILD_CRIO=1: the v2 node's second configuration, make e2e-crio)
# from tools/crio, its own module, beside Kubernetes like containerd:
# static, without cgo, so without seccomp (CRI-O then applies no seccomp
# profile) and with the pure-Go OpenPGP; and pinns, the small C program of
# CRI-O's source that pins pod namespaces, with the host's gcc.
crio_src=tools/crio
crio_pid=""
if [ "${BUILD_CRIO:-}" = 1 ] && { [ ! -x "$BIN/crio" ] || [ "$crio_src/go.sum" -nt "$BIN/crio" ]; }; then
	hack/install-deps.sh gcc libc6-dev
	log "building CRI-O beside Kubernetes (several minutes the first time)"
	(cd "$crio_src" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" \
		-tags "containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper" \
		-o "$BIN/" github.com/cri-o/cri-o/cmd/crio &&
		src=$(go list -m -f '{{.Dir}}' github.com/cri-o/cri-o) &&
		gcc -std=c99 -Os -Wall -Wextra -static -o "$BIN/pinns" "$src"/pinns/src/*.c) \
		> "$BIN/.crio-build.log" 2>&1 &
	crio_pid=$!
fi
# Kubernetes (kubectl for the docs' commands, TestDocCommands) and helm in one
# go build (one module, one set of versions).
OUT_DIR="$BIN" hack/build-tools.sh kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl helm
if [ -n "$ctd_pid" ]; then
	wait "$ctd_pid" || { cat "$BIN/.containerd-build.log" >&2; die "building containerd failed"; }
	log "containerd built"
fi
if [ -n "$crio_pid" ]; then
	wait "$crio_pid" || { cat "$BIN/.crio-build.log" >&2; die "building CRI-O failed"; }
	log "CRI-O built"
fi
make --no-print-directory build OUT_DIR="$BIN" VERSION="$DRIVER_VERSION"
CGO_ENABLED=0 go build -trimpath -o "$BIN/e2e-clusterctl" ./test/e2e/clusterctl
make --no-print-directory image-tool OUT_DIR="$BIN"
# The driver's image and the tests' images, as one OCI layout that up.sh
# pushes into the cluster's registry; and the driver's image of the same
# code with another version label (another digest), the e2e upgrade's target.
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
"$BIN/dra-swap-images" build -out "$IMAGES" -version "$DRIVER_VERSION" -revision "$revision" -set all
"$BIN/dra-swap-images" build -out "$IMAGES_UPGRADE" -version "$DRIVER_UPGRADE_VERSION" -revision "$revision" -set driver
log "build done in $((SECONDS - start_time))s"
