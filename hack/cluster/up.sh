#!/usr/bin/env bash
# Brings up a single-node cluster of real components on loopback:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
# with runc, a kubelet, a swap file, and the dra.swap kubelet plugin.
# Run hack/cluster/build.sh first. State: CLUSTER_DIR (default
# /var/lib/dra-swap-e2e). Clears whatever an earlier, killed run left.
source "$(dirname "$0")/lib.sh"
require_root
begin=$SECONDS
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet containerd ctr containerd-shim-runc-v2 dra-swap-kubeletplugin dra-swap-hook dra-swap-controller e2e-clusterctl; do
	[ -x "$BIN/$b" ] || die "$BIN/$b is missing: run hack/cluster/build.sh"
done
teardown
mkdir -p "$PKI" "$LOGS" "$PIDS" "$RUN" "$CLUSTER_DIR"/{kubeconfig,cdi,cni,swap,bin,pod-logs,kubelet/plugins_registry}
export PATH="$BIN:$PATH"

# --- certificates
log "certificates"
cd "$PKI"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj "/CN=dra-swap-e2e-ca" 2>/dev/null
cert() { # name subject [serverSANs]
	local name=$1 subj=$2 san=${3:-}
	openssl req -new -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" 2>/dev/null
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=digitalSignature,keyEncipherment"
		if [ -n "$san" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$san"; else echo "extendedKeyUsage=clientAuth"; fi
	} > "$name.ext"
	openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$name.crt" -days 30 -extfile "$name.ext" 2>/dev/null
}
cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
cert admin "/O=system:masters/CN=admin"
cert kube-controller-manager "/CN=system:kube-controller-manager"
cert kube-scheduler "/CN=system:kube-scheduler"
cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
cd - >/dev/null
for user in admin kube-controller-manager kube-scheduler kubelet; do
	cat > "$CLUSTER_DIR/kubeconfig/$user.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: $user
  user: {client-certificate: "$PKI/$user.crt", client-key: "$PKI/$user.key"}
contexts:
- name: local
  context: {cluster: local, user: $user}
current-context: local
KC
done
cat > "$CLUSTER_DIR/env" <<ENV
CLUSTER_DIR=$CLUSTER_DIR
KUBECONFIG=$CLUSTER_DIR/kubeconfig/admin.kubeconfig
NODE_NAME=$NODE_NAME
CONTAINERD_SOCK=$SOCK
POD_LOGS_DIR=$CLUSTER_DIR/pod-logs
WEBHOOK_URL=https://localhost:$WEBHOOK_PORT
ENV

# --- control plane
for port in $ETCD_PORT $ETCD_PEER_PORT $API_PORT $WEBHOOK_PORT; do
	if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then die "port $port on 127.0.0.1 is in use"; fi
done
log "etcd"
start etcd etcd --name=e2e --data-dir="$CLUSTER_DIR/etcd" \
	--listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster="e2e=http://127.0.0.1:$ETCD_PEER_PORT" --log-level=warn
log "kube-apiserver"
start kube-apiserver "$BIN/kube-apiserver" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
	--endpoint-reconciler-type=none --etcd-servers="http://127.0.0.1:$ETCD_PORT" --service-cluster-ip-range=10.0.0.0/24 \
	--client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
	--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
	--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$PKI/sa.pub" \
	--service-account-signing-key-file="$PKI/sa.key" --authorization-mode=Node,RBAC --allow-privileged=true
wait_for "kube-apiserver ready" 90 api /readyz
log "kube-controller-manager, kube-scheduler"
start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$CLUSTER_DIR/kubeconfig/kube-controller-manager.kubeconfig" \
	--authentication-kubeconfig="$CLUSTER_DIR/kubeconfig/kube-controller-manager.kubeconfig" \
	--authorization-kubeconfig="$CLUSTER_DIR/kubeconfig/kube-controller-manager.kubeconfig" \
	--bind-address=127.0.0.1 --secure-port=0 --leader-elect=false --use-service-account-credentials=true \
	--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" --controllers='*'
start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$CLUSTER_DIR/kubeconfig/kube-scheduler.kubeconfig" \
	--authentication-kubeconfig="$CLUSTER_DIR/kubeconfig/kube-scheduler.kubeconfig" \
	--authorization-kubeconfig="$CLUSTER_DIR/kubeconfig/kube-scheduler.kubeconfig" \
	--bind-address=127.0.0.1 --secure-port=0 --leader-elect=false

# --- node: containerd, swap, kubelet
log "containerd"
cat > "$CLUSTER_DIR/cni/10-loopback.conflist" <<CNI
{"cniVersion": "1.0.0", "name": "loopback-only", "plugins": [{"type": "loopback"}]}
CNI
cat > "$CLUSTER_DIR/containerd.toml" <<TOML
version = 3
root = "$CLUSTER_DIR/containerd/root"
state = "$CLUSTER_DIR/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = ["$CLUSTER_DIR/cdi"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$CLUSTER_DIR/cni"
[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "registry.local/pause:3.10"
TOML
start containerd "$BIN/containerd" --config "$CLUSTER_DIR/containerd.toml"
wait_for "containerd" 30 "$BIN/ctr" -a "$SOCK" version
for img in "$IMAGES"/*.tar; do "$BIN/ctr" -a "$SOCK" -n k8s.io images import --no-unpack=false "$img" >/dev/null; done
log "images imported: $("$BIN/ctr" -a "$SOCK" -n k8s.io images ls -q | tr '\n' ' ')"

"$REPO/hack/cluster/swap.sh" add swapfile-1 "$SWAP_SIZE_MIB"

log "kubelet"
cat > "$CLUSTER_DIR/kubelet/config.yaml" <<KCFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
memorySwap:
  swapBehavior: NoSwap
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: "unix://$SOCK"
podLogsDir: "$CLUSTER_DIR/pod-logs"
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
KCFG
start kubelet "$BIN/kubelet" --config="$CLUSTER_DIR/kubelet/config.yaml" \
	--kubeconfig="$CLUSTER_DIR/kubeconfig/kubelet.kubeconfig" --root-dir="$CLUSTER_DIR/kubelet" \
	--cert-dir="$CLUSTER_DIR/kubelet/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" -v=2
"$BIN/e2e-clusterctl" node-ready || { "$REPO/hack/cluster/logs.sh" 30 >&2; die "the node did not become Ready"; }
"$BIN/e2e-clusterctl" setup

# --- the driver
"$REPO/hack/cluster/driver.sh" start
"$BIN/e2e-clusterctl" driver-ready || { "$REPO/hack/cluster/logs.sh" 30 >&2; die "the driver published no swap device"; }
log "cluster up in $((SECONDS - begin))s; KUBECONFIG=$CLUSTER_DIR/kubeconfig/admin.kubeconfig; tear down with hack/cluster/down.sh"
