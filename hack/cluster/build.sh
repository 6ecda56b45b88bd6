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
ctd_src=test/tools/containerd
ctd_pid=""
mkdir -p "$BIN"
if [ ! -x "$BIN/containerd" ] || [ "$ctd_src/go.sum" -nt "$BIN/containerd" ]; then
	log "building containerd beside Kubernetes (3-4 minutes the first time)"
	(cd "$ctd_src" && go build -ldflags="-s -w" -o "$BIN/" github.com/containerd/containerd/v2/cmd/containerd \
		github.com/containerd/containerd/v2/cmd/ctr github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2) \
		> "$BIN/.containerd-build.log" 2>&1 &
	ctd_pid=$!
fi
# Kubernetes and helm in one go build (one module, one set of versions).
OUT_DIR="$BIN" hack/build-tools.sh kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy helm
if [ -n "$ctd_pid" ]; then
	wait "$ctd_pid" || { cat "$BIN/.containerd-build.log" >&2; die "building containerd failed"; }
	log "containerd built"
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
