#!/usr/bin/env bash
# Builds everything the local cluster runs, from source, and installs the
# Debian packages it needs. Up-to-date outputs are kept.
source "$(dirname "$0")/lib.sh"
cd "$REPO"
start_time=$SECONDS
hack/install-deps.sh etcd-server runc containernetworking-plugins openssl util-linux curl
OUT_DIR="$BIN" hack/build-k8s.sh kube-apiserver kube-controller-manager kube-scheduler kubelet
ctd_src=test/tools/containerd
if [ ! -x "$BIN/containerd" ] || [ "$ctd_src/go.sum" -nt "$BIN/containerd" ]; then
	log "building containerd (about 2 minutes the first time)"
	(cd "$ctd_src" && go build -o "$BIN/" github.com/containerd/containerd/v2/cmd/containerd \
		github.com/containerd/containerd/v2/cmd/ctr github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)
fi
make --no-print-directory build OUT_DIR="$BIN"
go build -o "$BIN/e2e-clusterctl" ./test/e2e/clusterctl
go run ./test/e2e/images/build -out "$IMAGES"
log "build done in $((SECONDS - start_time))s"
