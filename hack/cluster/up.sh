#!/usr/bin/env bash
# Brings up a single-node cluster of real components on the node's own
# address: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# an image registry on loopback, containerd with runc, a kubelet, kube-proxy,
# a bridge pod network, a swap file, and then the dra.swap driver (helm,
# hack/cluster/driver.sh). Run hack/cluster/build.sh first. State:
# CLUSTER_DIR (default /var/lib/dra-swap-e2e). Clears whatever an earlier,
# killed run left.
#   CLUSTER_NODE=host|guest  a node of the two-node cluster (lib.sh); the
#                     guest joins a cluster whose driver is installed
#                     already: it waits for the driver's DaemonSet to
#                     publish its swap instead of installing it
source "$(dirname "$0")/lib.sh"
require_root
begin=$SECONDS
has_control_plane() { [ "$CLUSTER_ROLE" != node ]; }
need=(dra-swap-images kubelet kube-proxy e2e-clusterctl)
has_control_plane && need+=(kube-apiserver kube-controller-manager kube-scheduler)
case "$CONTAINER_RUNTIME" in
containerd) need+=(containerd ctr containerd-shim-runc-v2) ;;
crio)
	need+=(crio pinns)
	[ "$CGROUP_DRIVER" = systemd ] || die "CONTAINER_RUNTIME=crio runs with the systemd cgroup driver here: on the guest (CLUSTER_NODE=guest)"
	for b in crun conmon; do command -v "$b" >/dev/null || die "CONTAINER_RUNTIME=crio needs $b (Debian's package $b)"; done
	;;
esac
for b in "${need[@]}"; do
	[ -x "$BIN/$b" ] || die "$BIN/$b is missing: run hack/cluster/build.sh"
done
if has_control_plane; then
	for layout in $IMAGE_LAYOUTS; do
		[ -f "$layout/index.json" ] || die "$layout holds no OCI image layout: run hack/cluster/build.sh"
	done
fi
if ! has_control_plane; then
	[ -f "$NODE_PKI/ca.crt" ] || die "the guest needs the control plane's certificates ($NODE_PKI_FILES) in $NODE_PKI"
fi
teardown
mkdir -p "$PKI" "$LOGS" "$PIDS" "$RUN" "$CLUSTER_DIR"/{kubeconfig,cdi,cni/net.d,cni/ipam,swap,bin,pod-logs,registry,kubelet/plugins_registry}
# RUN is a tmpfs, as /run is on a production node: the hook's records and
# the runtime's state there never wait for the disk (on the guest, whose
# swap file shares its disk, the hook's fsyncs waited behind swap-out for
# seconds while 20 offloading pods started). teardown unmounts it.
mountpoint -q "$RUN" || mount -t tmpfs -o mode=0755,size=256m dra-swap-run "$RUN"
export PATH="$BIN:$PATH"

# --- the network: ports, and the node's address
if has_control_plane; then
	for port in $ETCD_PORT $ETCD_PEER_PORT; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port on 127.0.0.1 is in use"; fi
	done
	if (exec 3<>"/dev/tcp/$REGISTRY_HOST/$REGISTRY_PORT") 2>/dev/null; then die "port $REGISTRY_PORT on $REGISTRY_HOST is in use"; fi
fi
for port in $PROXY_HEALTHZ_PORT $PROXY_METRICS_PORT; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port on 127.0.0.1 is in use"; fi
done
add_node_ip
add_service_route
add_peer_route
set_sysctls
if has_control_plane && (exec 3<>"/dev/tcp/$API_HOST/$API_PORT") 2>/dev/null; then die "port $API_PORT on $API_HOST is in use"; fi

# --- certificates: made by the control plane; a node copies what it needs
if has_control_plane; then
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
	cert apiserver "/CN=kube-apiserver" "IP:$API_HOST,IP:127.0.0.1,IP:$KUBERNETES_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	cert admin "/O=system:masters/CN=admin"
	cert kube-controller-manager "/CN=system:kube-controller-manager"
	cert kube-scheduler "/CN=system:kube-scheduler"
	cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
	cert kube-proxy "/CN=system:kube-proxy"
	cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	if [ -n "$PEER_NODE_NAME" ]; then
		cert peer-kubelet "/O=system:nodes/CN=system:node:$PEER_NODE_NAME"
	fi
	# The registry's user, with a password of this cluster's, and a docker
	# config holding them (what `docker login` writes).
	(
		umask 077
		printf '%s:%s\n' "$REGISTRY_USER" "$(openssl rand -hex 16)" > registry-basic-auth
		printf '{"auths": {"%s": {"auth": "%s"}}}\n' "$REGISTRY" "$(tr -d '\n' < registry-basic-auth | base64 -w0)" > registry-docker-config.json
	)
	cd - >/dev/null
	if [ -n "$PEER_NODE_NAME" ]; then
		mkdir -p "$NODE_PKI"
		for f in $NODE_PKI_FILES; do cp "$PKI/$f" "$NODE_PKI/"; done
		# The other node's kubelet has a certificate of its own name.
		if [ -n "$PEER_NODE_NAME" ]; then
			cp "$PKI/peer-kubelet.crt" "$NODE_PKI/kubelet.crt"
			cp "$PKI/peer-kubelet.key" "$NODE_PKI/kubelet.key"
		fi
	fi
else
	log "certificates from $NODE_PKI"
	for f in $NODE_PKI_FILES; do
		cp "$NODE_PKI/$f" "$PKI/$f" || die "$NODE_PKI/$f: the control plane's certificates are incomplete"
	done
fi
# helm and dra-swap-images take the registry's credentials from here.
mkdir -p "$DOCKER_CONFIG_DIR"
cp "$PKI/registry-docker-config.json" "$DOCKER_CONFIG_DIR/config.json"
export DOCKER_CONFIG="$DOCKER_CONFIG_DIR"
users="admin"
has_control_plane && users="$users kube-controller-manager kube-scheduler"
users="$users kubelet kube-proxy"
for user in $users; do
	cat > "$CLUSTER_DIR/kubeconfig/$user.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://$API_HOST:$API_PORT", certificate-authority: "$PKI/ca.crt"}
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
NODE_IP=$NODE_IP
REGISTRY=$REGISTRY
DRIVER_REPOSITORY=$DRIVER_REPOSITORY
DOCKER_CONFIG=$DOCKER_CONFIG_DIR
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
DRIVER_VERSION=$DRIVER_VERSION
DRIVER_UPGRADE_VERSION=$DRIVER_UPGRADE_VERSION
CHART=$CHART_REF
NRI_SOCKET=$NRI_SOCKET
NRI_DISABLE=${NRI_DISABLE:-0}
CGROUP_DRIVER=$CGROUP_DRIVER
CONTAINER_RUNTIME=$CONTAINER_RUNTIME
CLUSTER_NODE=$CLUSTER_NODE
CLUSTER_ROLE=$CLUSTER_ROLE
API_HOST=$API_HOST
SWAP_BEHAVIOR=$SWAP_BEHAVIOR
NODE_ZONE=$NODE_ZONE
NODE_REGION=$NODE_REGION
PEER_NODE_NAME=$PEER_NODE_NAME
CONTROL_PLANE_LOGS=$LOGS
ENV

# --- control plane
if has_control_plane; then
	log "etcd"
	start etcd etcd --name=e2e --data-dir="$CLUSTER_DIR/etcd" \
		--listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster="e2e=http://127.0.0.1:$ETCD_PEER_PORT" --log-level=warn
	log "kube-apiserver"
	start kube-apiserver "$BIN/kube-apiserver" --bind-address="$API_HOST" --advertise-address="$API_HOST" --secure-port="$API_PORT" \
		--etcd-servers="http://127.0.0.1:$ETCD_PORT" --service-cluster-ip-range="$SERVICE_CIDR" \
		--client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP \
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

	# --- image registry: the images build.sh made (an OCI layout), served on
	# loopback for containerd to pull over plain http; the tests' images
	# public, the driver's private (lib.sh)
	log "registry on $REGISTRY (private: $REGISTRY_PATH)"
	# Off loopback only on the host's end of the v2 leg's tap link, which
	# reaches nothing but the guest.
	remote=()
	[ "$REGISTRY_HOST" = 127.0.0.1 ] || remote=(-allow-remote)
	start registry "$BIN/dra-swap-images" registry -addr "$REGISTRY" -dir "$CLUSTER_DIR/registry" "${remote[@]}" \
		-basic-auth "$PKI/registry-basic-auth" -private "$REGISTRY_PATH"
	# Any answer will do: without credentials it is 401.
	wait_for "registry" 30 curl -s -o /dev/null "http://$REGISTRY/v2/"
	push_layout() { # LAYOUT DEST
		"$BIN/dra-swap-images" push -from "$1" -registry "$2" >> "$LOGS/push.log" 2>&1 ||
			{ cat "$LOGS/push.log" >&2; die "pushing $1 to $2 failed"; }
	}
	# The tests' images where everyone pulls them, the driver's (both
	# versions) where the credentials are needed.
	push_layout "$IMAGES" "$REGISTRY"
	for layout in $IMAGE_LAYOUTS; do push_layout "$layout" "$DRIVER_REPOSITORY"; done
	# The release: its image index (with its SBOM; hack/e2e-build.sh's
	# holds the nodes' architecture) replaces the layout's image of the
	# same tag, and
	# its chart, which driver.sh installs from here.
	if [ -n "${RELEASE_DIR:-}" ]; then
		(cd "$RELEASE_DIR" && sha256sum --quiet -c SHA256SUMS) || die "the release in $RELEASE_DIR does not match its SHA256SUMS"
		release_layout=$(mktemp -d)
		tar -xf "$RELEASE_DIR/dra-driver-swap-$DRIVER_VERSION.oci.tar" -C "$release_layout"
		push_layout "$release_layout" "$DRIVER_REPOSITORY"
		rm -rf "$release_layout"
		"$BIN/helm" push "$RELEASE_DIR/dra-driver-swap-$DRIVER_VERSION.tgz" "oci://$DRIVER_REPOSITORY/charts" --plain-http >> "$LOGS/push.log" 2>&1 ||
			{ cat "$LOGS/push.log" >&2; die "pushing the release's chart to oci://$DRIVER_REPOSITORY/charts failed"; }
		log "release $DRIVER_VERSION from $RELEASE_DIR: the chart $CHART_REF and the image index"
	fi
	log "images in $REGISTRY: $(curl -sf -u "$(cat "$PKI/registry-basic-auth")" "http://$REGISTRY/v2/_catalog" | tr -d '\n')"
fi
# --- node: pod network, containerd, swap, kubelet, kube-proxy
# One bridge for the node's pods; containerd adds the loopback network itself.
cat > "$CLUSTER_DIR/cni/net.d/10-$CNI_NETWORK.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$POD_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$CLUSTER_DIR/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
if [ "$CONTAINER_RUNTIME" = containerd ]; then
mkdir -p "$CLUSTER_DIR/certs.d/$REGISTRY"
cat > "$CLUSTER_DIR/certs.d/$REGISTRY/hosts.toml" <<HOSTS
server = "http://$REGISTRY"
[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
HOSTS
log "containerd"
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
  # Pod network namespaces under the state directory, which teardown unmounts.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = $([ "$CGROUP_DRIVER" = systemd ] && echo true || echo false)
        BinaryName = "$(command -v runc)"
        Root = "$RUNC_ROOT"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$CLUSTER_DIR/cni/net.d"
[plugins."io.containerd.nri.v1.nri"]
  disable = $([ "${NRI_DISABLE:-0}" = 1 ] && echo true || echo false)
  socket_path = "$NRI_SOCKET"
[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$REGISTRY/pause:3.10"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$CLUSTER_DIR/certs.d"
TOML
start containerd "$BIN/containerd" --config "$CLUSTER_DIR/containerd.toml"
wait_for "containerd" 30 "$BIN/ctr" -a "$SOCK" version
else
	start_crio
fi

"$REPO/hack/cluster/swap.sh" add swapfile-1 "$SWAP_SIZE_MIB"

log "kubelet"
cat > "$CLUSTER_DIR/kubelet/config.yaml" <<KCFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: $CGROUP_DRIVER
failCgroupV1: false
failSwapOn: false
memorySwap:
  swapBehavior: $SWAP_BEHAVIOR
# The apiserver reaches the kubelet (logs, exec) at the node IP.
address: $NODE_IP
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

# kube-proxy in iptables mode. It changes no sysctl: no conntrack sizing or
# timeouts, no localhost NodePorts (route_localnet); NodePorts only on the
# node IP.
log "kube-proxy"
cat > "$CLUSTER_DIR/kube-proxy.yaml" <<KPCFG
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: "$CLUSTER_DIR/kubeconfig/kube-proxy.kubeconfig"
hostnameOverride: "$NODE_NAME"
bindAddress: "$NODE_IP"
healthzBindAddress: "127.0.0.1:$PROXY_HEALTHZ_PORT"
metricsBindAddress: "127.0.0.1:$PROXY_METRICS_PORT"
mode: iptables
clusterCIDR: "$CLUSTER_CIDR"
nodePortAddresses: [primary]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
KPCFG
start kube-proxy "$BIN/kube-proxy" --config="$CLUSTER_DIR/kube-proxy.yaml" -v=2
"$BIN/e2e-clusterctl" node-ready || { "$REPO/hack/cluster/logs.sh" 30 >&2; die "the node did not become Ready"; }
wait_for "kube-proxy healthy" 60 curl -sf "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz"
"$BIN/e2e-clusterctl" setup

# --- the driver
if [ "$CLUSTER_NODE" = guest ]; then
	log "$NODE_NAME joins: waiting for the installed driver's DaemonSet to publish this node's swap"
	"$BIN/e2e-clusterctl" driver-ready || { "$REPO/hack/cluster/logs.sh" 30 >&2; die "the driver published no swap device for $NODE_NAME"; }
else
	"$REPO/hack/cluster/driver.sh" start
	"$BIN/e2e-clusterctl" driver-ready || { "$REPO/hack/cluster/logs.sh" 30 >&2; die "the driver published no swap device"; }
fi
log "cluster up in $((SECONDS - begin))s; KUBECONFIG=$CLUSTER_DIR/kubeconfig/admin.kubeconfig; tear down with hack/cluster/down.sh"
