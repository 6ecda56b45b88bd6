# Shared settings and helpers of the local cluster scripts. Sourced, not run.
# Everything the cluster makes lives under CLUSTER_DIR; every process it
# starts has a PID file there, so teardown stops exactly those.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$REPO/_output/bin"
IMAGES="$REPO/_output/images"
# The driver image's tag (the chart's appVersion) and the tag of the same
# code built with another version label, which the e2e upgrade test rolls to.
DRIVER_VERSION="${DRIVER_VERSION:-${VERSION:-0.2.0}}"
DRIVER_UPGRADE_VERSION="$DRIVER_VERSION-upgrade"
# The OCI layouts build.sh writes and up.sh pushes: every image at
# DRIVER_VERSION, and the driver's at DRIVER_UPGRADE_VERSION.
IMAGES_UPGRADE="$IMAGES-upgrade"
IMAGE_LAYOUTS="$IMAGES $IMAGES_UPGRADE"
CLUSTER_DIR="${CLUSTER_DIR:-/var/lib/dra-swap-e2e}"
SWAP_SIZE_MIB="${SWAP_SIZE_MIB:-1024}"
[[ "$SWAP_SIZE_MIB" =~ ^[1-9][0-9]*$ ]] || { echo "SWAP_SIZE_MIB must be a positive number of MiB, not '$SWAP_SIZE_MIB'" >&2; exit 1; }
# Which node this is (CLUSTER_NODE); every name, address and fact of it
# follows from that:
#   single  one node with its own control plane (make demo, make e2e), on
#           10.201.0.1 (on lo)
#   host    the two-node cluster's (hack/e2e-cluster.sh) first node and its
#           control plane, on this host's end of the tap link to the guest
#           (10.200.0.1), with the certificates of the guest's kubelet in
#           NODE_PKI and the guest's pods routed to it
#   guest   its second node, in the emulated guest (10.200.0.2, which the
#           guest image sets: hack/guest/init), joining the cluster whose
#           driver is installed already (the chart from the registry); the
#           systemd cgroup driver
# The nodes differ on purpose: zone-a/region-1 and pods 10.88.0.0/16 on
# single and host, zone-b/region-2 and 10.89.0.0/16 on guest. The kubelet's
# swapBehavior is NoSwap on all (the driver sells no swap under another).
# A running cluster's env file says which node it is.
if [ -z "${CLUSTER_NODE:-}" ] && [ -f "$CLUSTER_DIR/env" ]; then
	CLUSTER_NODE=$(sed -n 's/^CLUSTER_NODE=//p' "$CLUSTER_DIR/env")
fi
CLUSTER_NODE="${CLUSTER_NODE:-single}"
LINK_TAP=dra-swap-tap0 LINK_HOST_IP=10.200.0.1 LINK_GUEST_IP=10.200.0.2
HOST_NODE=dra-swap-node GUEST_NODE=dra-swap-guest
HOST_POD_CIDR=10.88.0.0/16 GUEST_POD_CIDR=10.89.0.0/16
# Every node's pod network (kube-proxy's clusterCIDR).
CLUSTER_CIDR=10.88.0.0/15
SWAP_BEHAVIOR=NoSwap
# CLUSTER_ROLE: all (the control plane and a node) or node (a node joining
# the control plane at API_HOST). PEER_NODE_NAME: the other node, for which
# the control plane makes a kubelet certificate (in NODE_PKI, the directory
# between the two). PEER_POD_CIDR is routed to PEER_NODE_IP (the other end
# of the link) and noted for teardown. API_HOST: the API server's address,
# the node's own unless the control plane runs elsewhere. The node's address (NODE_IP):
# kube-apiserver binds and advertises it (the endpoint of the kubernetes
# Service), the kubelet reports it; unless an interface has it already
# (the tap, the guest's dummy0), up.sh adds it to lo as a /32 labelled
# NODE_IP_LABEL, which teardown removes again.
case "$CLUSTER_NODE" in
single)
	CLUSTER_ROLE=all NODE_NAME=$HOST_NODE NODE_IP=10.201.0.1 API_HOST=10.201.0.1 REGISTRY_HOST=127.0.0.1
	POD_CIDR=$HOST_POD_CIDR NODE_ZONE=zone-a NODE_REGION=region-1
	NODE_PKI="" PEER_NODE_NAME="" PEER_NODE_IP="" PEER_POD_CIDR=""
	;;
host)
	CLUSTER_ROLE=all NODE_NAME=$HOST_NODE NODE_IP=$LINK_HOST_IP API_HOST=$LINK_HOST_IP REGISTRY_HOST=$LINK_HOST_IP
	POD_CIDR=$HOST_POD_CIDR NODE_ZONE=zone-a NODE_REGION=region-1
	NODE_PKI="$REPO/_output/guest-share/pki" PEER_NODE_NAME=$GUEST_NODE PEER_NODE_IP=$LINK_GUEST_IP PEER_POD_CIDR=$GUEST_POD_CIDR
	;;
guest)
	CLUSTER_ROLE=node NODE_NAME=$GUEST_NODE NODE_IP=$LINK_GUEST_IP API_HOST=$LINK_HOST_IP REGISTRY_HOST=$LINK_HOST_IP
	POD_CIDR=$GUEST_POD_CIDR NODE_ZONE=zone-b NODE_REGION=region-2
	NODE_PKI=/share/pki PEER_NODE_NAME="" PEER_NODE_IP=$LINK_HOST_IP PEER_POD_CIDR=$HOST_POD_CIDR
	;;
*) echo "CLUSTER_NODE must be single, host or guest, not $CLUSTER_NODE" >&2; exit 1 ;;
esac
NODE_IP_LABEL=lo:draswap
# Timeouts are multiplied by the whole part of E2E_TIMEOUT_SCALE, the
# suite's own factor (4 on the emulated guest; 1 by default).
TIMEOUT_SCALE=${E2E_TIMEOUT_SCALE:-1}
TIMEOUT_SCALE=${TIMEOUT_SCALE%%.*}
[[ "$TIMEOUT_SCALE" =~ ^[1-9][0-9]*$ ]] || TIMEOUT_SCALE=1
ETCD_PORT=23790
ETCD_PEER_PORT=23800
API_PORT=26443
# Pod network: a bridge (CNI bridge + host-local IPAM) on the node, and
# kube-proxy in iptables mode for Services.
POD_BRIDGE=dra-swap0
CNI_NETWORK=dra-swap-pods
SERVICE_CIDR=10.0.0.0/24
# The kubernetes Service: the first address of SERVICE_CIDR.
KUBERNETES_SERVICE_IP=10.0.0.1
PROXY_HEALTHZ_PORT=10256
PROXY_METRICS_PORT=10249
# The namespace hack/cluster/driver.sh installs the driver in (its pods' logs
# are in logs.sh's output).
DRIVER_NAMESPACE=dra-swap
# The image registry that containerd pulls from over plain http: on
# loopback, or on the control plane's end of the tap link for two nodes.
REGISTRY_PORT=25000
REGISTRY="$REGISTRY_HOST:$REGISTRY_PORT"
# It wants credentials, as a user's registry does: for every push, and for
# pulls under REGISTRY_PATH, where the driver's images and chart go
# (DRIVER_REPOSITORY); the tests' images stay public. The user is
# REGISTRY_USER with a password up.sh makes: the registry's -basic-auth
# file and a docker config holding them are REGISTRY_AUTH_FILES in PKI
# (a node elsewhere copies them from NODE_PKI); helm and dra-swap-images
# read the docker config from DOCKER_CONFIG_DIR, and the driver's pods
# pull with the Secret PULL_SECRET made of it.
REGISTRY_PATH=private/dra-swap
DRIVER_REPOSITORY="$REGISTRY/$REGISTRY_PATH"
REGISTRY_USER=dra-swap
REGISTRY_AUTH_FILES="registry-basic-auth registry-docker-config.json"
DOCKER_CONFIG_DIR="$CLUSTER_DIR/docker"
PULL_SECRET=dra-swap-registry
# The chart driver.sh installs: the checkout's, or the release's from the
# cluster's registry, as users install it (oci://, --version
# DRIVER_VERSION): with RELEASE_DIR (hack/release.sh's artifacts of
# DRIVER_VERSION, which up.sh pushes there; the host node's is
# _output/release-e2e), and on the guest, which joins such a cluster.
if [ "$CLUSTER_NODE" = host ]; then
	RELEASE_DIR="${RELEASE_DIR:-$REPO/_output/release-e2e}"
fi
CHART_REF=""
if [ -n "${RELEASE_DIR:-}" ] || [ "$CLUSTER_NODE" = guest ]; then
	CHART_REF="oci://$DRIVER_REPOSITORY/charts/dra-driver-swap"
fi
PKI="$CLUSTER_DIR/pki"
# The certificates the other node needs (NODE_PKI: the control plane writes
# them there, the guest copies them from there).
NODE_PKI_FILES="ca.crt admin.crt admin.key kubelet.crt kubelet.key kube-proxy.crt kube-proxy.key $REGISTRY_AUTH_FILES"
# Component logs.
LOGS="$CLUSTER_DIR/logs"
PIDS="$CLUSTER_DIR/pids"
RUN="$CLUSTER_DIR/run" # a tmpfs (up.sh)
# containerd's NRI socket (NRI on, its default; NRI_DISABLE=1 turns it off
# to run the driver with the CDI hook and the verifier alone).
NRI_SOCKET="$RUN/nri/nri.sock"
# The kubelet's and the runtime's cgroup driver: cgroupfs, or systemd on
# the guest (where systemd is PID 1; the kubelet and the runtime then run
# as systemd units).
CGROUP_DRIVER=cgroupfs
[ "$CLUSTER_NODE" = guest ] && CGROUP_DRIVER=systemd
# The node's container runtime: containerd with runc (both nodes by
# default), or CRI-O with crun (the v2 node's second configuration,
# GUEST_RUNTIME=crio in hack/e2e-cluster.sh; needs the systemd cgroup
# driver here). A running cluster's env file says which.
if [ -z "${CONTAINER_RUNTIME:-}" ] && [ -f "$CLUSTER_DIR/env" ]; then
	CONTAINER_RUNTIME=$(sed -n 's/^CONTAINER_RUNTIME=//p' "$CLUSTER_DIR/env")
fi
CONTAINER_RUNTIME="${CONTAINER_RUNTIME:-containerd}"
case "$CONTAINER_RUNTIME" in containerd | crio) ;; *) echo "CONTAINER_RUNTIME must be containerd or crio, not $CONTAINER_RUNTIME" >&2; exit 1 ;; esac
SOCK="$RUN/$CONTAINER_RUNTIME.sock"
# runc's state of our containers (containerd adds the namespace, k8s.io).
RUNC_ROOT="$CLUSTER_DIR/runc"
# CRI-O's storage and state, and crun's state of its containers.
CRIO_DIR="$CLUSTER_DIR/crio"
CRUN_ROOT="$CLUSTER_DIR/crun"

log() { printf '[cluster %s] %s\n' "$(date +%T)" "$*"; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }
require_root() { [ "$(id -u)" = 0 ] || die "the local cluster runs a kubelet, containerd and swapon: run as root"; }

# start NAME CMD...: runs CMD in the background with its log and PID file.
start() {
	local name=$1; shift
	mkdir -p "$LOGS" "$PIDS"
	# The command line, for restart.sh.
	printf '%s\0' "$@" > "$PIDS/$name.cmd"
	if as_unit "$name"; then
		start_unit "$name" "$@"
		return
	fi
	# setsid: the component outlives the shell that started it.
	setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
	echo $! > "$PIDS/$name.pid"
}

# as_unit NAME: whether NAME runs as a systemd unit: with the systemd cgroup
# driver the kubelet and the runtime do, as packages install them.
as_unit() {
	[ "$CGROUP_DRIVER" = systemd ] && { [ "$1" = kubelet ] || [ "$1" = containerd ] || [ "$1" = crio ]; }
}

unit_file() { echo "/run/systemd/system/dra-swap-$1.service"; }

# start_unit NAME CMD...: runs CMD as the runtime unit dra-swap-NAME.service,
# written as packages write containerd.service and kubelet.service:
# Delegate=yes and KillMode=process, so that containerd's shims (and so the
# containers) outlive a restart. A persistent unit, not a transient one
# (systemd-run), so that `systemctl stop` and `start` work while the old
# unit's left-over processes (the shims) still run, as on a real node. The
# manager is reloaded only when the file changes: a daemon-reload is itself
# one of the events under test.
start_unit() {
	local name=$1 arg quoted=() unit
	shift
	unit=$(unit_file "$name")
	for arg in "$@"; do
		# systemd's ExecStart quoting: \\ and \" inside double quotes; %
		# and $ are specifiers and variables.
		arg=${arg//\\/\\\\}
		arg=${arg//\"/\\\"}
		arg=${arg//%/%%}
		arg=${arg//\$/\$\$}
		quoted+=("\"$arg\"")
	done
	mkdir -p "$(dirname "$unit")"
	cat > "$unit.tmp" <<EOF
# Written by hack/cluster (dra-driver-swap's local cluster); removed by down.sh.
[Unit]
Description=dra-swap local cluster: $name

[Service]
ExecStart=${quoted[*]}
Environment="PATH=$PATH"
Delegate=yes
KillMode=process
Restart=no
TimeoutStopSec=10
LimitNOFILE=1048576
LimitNPROC=infinity
TasksMax=infinity
StandardOutput=append:$LOGS/$name.log
StandardError=append:$LOGS/$name.log
EOF
	if cmp -s "$unit.tmp" "$unit"; then
		rm -f "$unit.tmp"
	else
		mv -f "$unit.tmp" "$unit"
		systemctl daemon-reload
	fi
	systemctl reset-failed "dra-swap-$name.service" 2>/dev/null || true
	systemctl start "dra-swap-$name.service"
	systemctl show -p MainPID --value "dra-swap-$name.service" > "$PIDS/$name.pid"
}

# ours PID NAME: whether PID is alive and still the binary we started.
ours() {
	local pid=$1 name=$2
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
	{ tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "$name"
}

# stop NAME: stops the process of NAME's PID file (TERM, then KILL).
stop() {
	local name=$1 file="$PIDS/$1.pid" pid
	if as_unit "$name" && [ -f "$(unit_file "$name")" ]; then
		# SIGTERM to the main process (KillMode=process), SIGKILL after
		# TimeoutStopSec, as `systemctl stop` on a real node.
		systemctl stop "dra-swap-$name.service" 2>/dev/null || true
		rm -f "$file"
		return 0
	fi
	[ -f "$file" ] || return 0
	pid=$(cat "$file")
	if ours "$pid" "$name"; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 50); do ours "$pid" "$name" || break; sleep 0.1; done
		ours "$pid" "$name" && kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$file"
}

# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds, for SECONDS
# times TIMEOUT_SCALE.
wait_for() {
	local what=$1 timeout=$(( $2 * TIMEOUT_SCALE )); shift 2
	local start=$SECONDS
	until "$@" >/dev/null 2>&1; do
		if (( SECONDS - start > timeout )); then
			"$REPO/hack/cluster/logs.sh" 30 >&2 || true
			die "timed out after ${timeout}s waiting for $what"
		fi
		sleep 0.5
	done
	log "$what after $((SECONDS - start))s"
}

api() { curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://$API_HOST:$API_PORT$1"; }

# Stopped in this order.
COMPONENTS="kubelet kube-proxy kube-scheduler kube-controller-manager kube-apiserver containerd crio registry etcd"

# runtime_ready: whether the runtime answers on its socket.
runtime_ready() {
	case "$CONTAINER_RUNTIME" in
	containerd) "$BIN/ctr" -a "$SOCK" version ;;
	crio) curl -sf --unix-socket "$SOCK" http://localhost/info ;;
	esac
}

# Sysctls that up.sh sets, and teardown puts back to what they were.
SYSCTLS="net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables"

# set_sysctls: sets SYSCTLS to 1, noting each old value in
# CLUSTER_DIR/sysctl.restore. bridge-nf-call-iptables (br_netfilter) makes
# kube-proxy's rules see traffic between pods on the bridge; the bridge
# plugin turns on ip_forward itself, for pods reaching Services of pods.
set_sysctls() {
	[ -e /proc/sys/net/bridge ] || modprobe br_netfilter 2>/dev/null || true
	local k old
	for k in $SYSCTLS; do
		old=$(sysctl -n "$k" 2>/dev/null) || die "sysctl $k is missing (br_netfilter for net.bridge.*)"
		echo "$k=$old" >> "$CLUSTER_DIR/sysctl.restore"
		sysctl -qw "$k=1" || die "cannot set sysctl $k=1"
	done
}

# restore_sysctls: puts back what set_sysctls changed.
restore_sysctls() {
	local f="$CLUSTER_DIR/sysctl.restore" kv
	[ -f "$f" ] || return 0
	while read -r kv; do sysctl -qw "$kv" 2>/dev/null || true; done < "$f"
	rm -f "$f"
}

# add_node_ip: gives the node its address unless an interface has it.
add_node_ip() {
	if [ -n "$(ip -4 -o addr show to "$NODE_IP/32")" ]; then
		log "node IP $NODE_IP: on $(ip -4 -o addr show to "$NODE_IP/32" | awk '{print $2}') already"
		return 0
	fi
	ip addr add "$NODE_IP/32" dev lo label "$NODE_IP_LABEL" || die "cannot add $NODE_IP/32 to lo"
	log "node IP $NODE_IP/32 on lo ($NODE_IP_LABEL)"
}

# add_peer_route: PEER_POD_CIDR via PEER_NODE_IP (the pods of the other
# node), noted in CLUSTER_DIR/routes for teardown.
add_peer_route() {
	[ -n "$PEER_POD_CIDR" ] || return 0
	[ -n "$PEER_NODE_IP" ] || die "PEER_POD_CIDR needs PEER_NODE_IP"
	ip route replace "$PEER_POD_CIDR" via "$PEER_NODE_IP" || die "cannot route $PEER_POD_CIDR via $PEER_NODE_IP"
	echo "$PEER_POD_CIDR via $PEER_NODE_IP" >> "$CLUSTER_DIR/routes"
	log "the other node's pods: $PEER_POD_CIDR via $PEER_NODE_IP"
}

# add_service_route: a node without a default route (the guest) cannot even
# send to a Service IP, so kube-proxy never sees the packet to DNAT it:
# route SERVICE_CIDR to the node IP's interface there, and note the route in
# CLUSTER_DIR/routes for teardown.
add_service_route() {
	if ip route get "$KUBERNETES_SERVICE_IP" >/dev/null 2>&1; then
		return 0
	fi
	local dev
	dev=$(ip -4 -o addr show to "$NODE_IP/32" | awk '{print $2; exit}')
	[ -n "$dev" ] || die "no interface has the node IP $NODE_IP"
	ip route add "$SERVICE_CIDR" dev "$dev" src "$NODE_IP" || die "cannot route $SERVICE_CIDR to $dev"
	echo "$SERVICE_CIDR dev $dev src $NODE_IP" >> "$CLUSTER_DIR/routes"
	log "no route to Service IPs: $SERVICE_CIDR via $dev"
}

# clean_chains CMD: deletes every KUBE-* and CNI-* chain of the filter, nat
# and mangle tables of CMD (iptables or ip6tables), and the rules of other
# chains that jump to them. The kubelet (KUBE-FIREWALL, KUBE-KUBELET-CANARY,
# KUBE-IPTABLES-HINT), kube-proxy and the CNI portmap plugin make them.
clean_chains() {
	local cmd=$1 table rule chain
	command -v "$cmd" >/dev/null || return 0
	for table in filter nat mangle; do
		"$cmd" -t "$table" -S >/dev/null 2>&1 || continue
		# Rules in any chain that jump (-j) or go (-g) to one of ours.
		"$cmd" -t "$table" -S 2>/dev/null | awk '$1 == "-A" && / -[jg] (KUBE|CNI)-/ {sub(/^-A /, "-D "); print}' |
			while read -r rule; do
				eval "\"\$cmd\" -t \"\$table\" $rule" 2>/dev/null || true
			done
		for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}'); do
			"$cmd" -t "$table" -F "$chain" 2>/dev/null || true
		done
		for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}'); do
			"$cmd" -t "$table" -X "$chain" 2>/dev/null || true
		done
	done
}

# teardown_network: removes what the cluster added to the node's network:
# kube-proxy's and the kubelet's rules, the pod bridge and its veths, the
# CNI plugins' cached results, the node IP on lo. Safe when none exists.
teardown_network() {
	if [ -x "$BIN/kube-proxy" ]; then
		"$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
	fi
	clean_chains iptables
	clean_chains ip6tables
	local l
	if ip link show "$POD_BRIDGE" >/dev/null 2>&1; then
		for l in $(ip -o link show master "$POD_BRIDGE" | awk -F': ' '{print $2}' | cut -d@ -f1); do
			ip link del "$l" 2>/dev/null || true
		done
		ip link del "$POD_BRIDGE" 2>/dev/null || true
	fi
	# containerd's CNI library caches each attachment in /var/lib/cni/results:
	# <network>-<sandbox id>-<interface>, ours and the loopback of our sandboxes.
	local f id
	for f in /var/lib/cni/results/"$CNI_NETWORK"-*-eth0; do
		[ -e "$f" ] || continue
		id=${f#/var/lib/cni/results/"$CNI_NETWORK"-}
		id=${id%-eth0}
		rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
	done
	rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
	if [ -n "$(ip -4 -o addr show dev lo label "$NODE_IP_LABEL" 2>/dev/null)" ]; then
		ip -4 -o addr show dev lo label "$NODE_IP_LABEL" | awk '{print $4}' | while read -r a; do ip addr del "$a" dev lo 2>/dev/null || true; done
	fi
}

# teardown: stops everything a run (also a killed one) left behind.
teardown() {
	if [ ! -d "$CLUSTER_DIR" ]; then
		teardown_network
		return 0
	fi
	for c in $COMPONENTS; do stop "$c"; done
	# The kubelet's and containerd's unit files (systemd cgroup driver).
	local u reload=0
	for u in /run/systemd/system/dra-swap-*.service; do
		[ -e "$u" ] || continue
		rm -f "$u"
		reload=1
	done
	if [ "$reload" = 1 ]; then systemctl daemon-reload 2>/dev/null || true; fi
	# The shims of our containerd (and the sockets they listen on), then the
	# containers they ran: pods outlive the kubelet and containerd.
	local p sockets=""
	for p in $(pgrep -f "containerd-shim-runc-v2.*-address $SOCK" 2>/dev/null || true); do
		sockets="$sockets $(ss -xlpn 2>/dev/null | awk -v pid="pid=$p," 'index($0, pid) {print $5}' | grep '^/run/containerd/s/' || true)"
		kill -KILL "$p" 2>/dev/null || true
	done
	for p in $sockets; do rm -f "$p"; done
	rmdir /run/containerd/s /run/containerd 2>/dev/null || true
	# CRI-O's conmons (one per container, outliving CRI-O like the shims)
	# and the crun containers they watch.
	for p in $(pgrep -f "conmon .*$CRIO_DIR" 2>/dev/null || true); do kill -KILL "$p" 2>/dev/null || true; done
	if [ -d "$CRUN_ROOT" ] && command -v crun >/dev/null; then
		for id in $(crun --root "$CRUN_ROOT" list -q 2>/dev/null || true); do
			crun --root "$CRUN_ROOT" delete --force "$id" 2>/dev/null || true
		done
	fi
	for p in $(pgrep -f "runc --root $RUNC_ROOT" 2>/dev/null || true); do kill -KILL "$p" 2>/dev/null || true; done
	local id
	for id in "$RUNC_ROOT"/k8s.io/*/; do
		[ -d "$id" ] || continue
		# Kills every process of the container and removes its cgroup.
		runc --root "$RUNC_ROOT/k8s.io" delete --force "$(basename "$id")" 2>/dev/null || true
	done
	sleep 0.2
	# Mounts under the state directory (pod volumes, rootfs, shm), deepest first.
	# (grep finds nothing when a run was stopped before containerd mounted
	# anything: not an error.)
	{ findmnt -rn -o TARGET | grep "^$CLUSTER_DIR" || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	teardown_network
	# The kubelet's pod cgroups (cgroupfs driver: kubepods under the root of
	# each hierarchy; systemd driver: kubepods.slice), now empty.
	if [ "$CGROUP_DRIVER" = systemd ]; then systemctl stop kubepods.slice 2>/dev/null || true; fi
	local d
	for d in /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods; do
		if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
	done
	# Swap files.
	local f
	for f in "$CLUSTER_DIR"/swap/*; do
		[ -e "$f" ] || continue
		swapoff "$f" 2>/dev/null || true
	done
	restore_sysctls
	local r
	if [ -f "$CLUSTER_DIR/routes" ]; then
		while read -r r; do
			# shellcheck disable=SC2086 # the route's words
			ip route del $r 2>/dev/null || true
		done < "$CLUSTER_DIR/routes"
	fi
	rm -rf "$CLUSTER_DIR"
}

# start_crio: writes CRI-O's configuration and starts it (up.sh), with crun
# as its runtime (Debian's crun and conmon), the systemd cgroup manager, NRI
# on as CRI-O ships it (NRI_DISABLE=1: off), the CDI spec directory the
# driver writes, the cluster's CNI network, the pause image and the
# cluster's registry over plain http. Everything it keeps lives under
# CRIO_DIR and CRUN_ROOT, which teardown removes.
start_crio() {
	log "crio (crun)"
	mkdir -p "$CRIO_DIR" "$CRUN_ROOT"
	cat > "$CRIO_DIR/registries.conf" <<REG
unqualified-search-registries = []
[[registry]]
location = "$REGISTRY"
insecure = true
REG
	mkdir -p "$CRIO_DIR/registries.conf.d"
	echo '{"default": [{"type": "insecureAcceptAnything"}]}' > "$CRIO_DIR/policy.json"
	# The node's registry credentials, as a node pulling from a private
	# registry has them: the cluster's registry wants them for its /v2/
	# ping, which containers/image makes before every pull (containerd
	# asks for the manifest straight away, which public paths serve).
	printf '{"auths": {"%s": {"auth": "%s"}}}\n' "$REGISTRY" "$(tr -d '\n' < "$PKI/registry-basic-auth" | base64 -w0)" > "$CRIO_DIR/auth.json"
	chmod 600 "$CRIO_DIR/auth.json"
	cat > "$CRIO_DIR/crio.conf" <<TOML
[crio]
root = "$CRIO_DIR/root"
runroot = "$CRIO_DIR/run"
storage_driver = "overlay"
log_dir = "$CRIO_DIR/pods"
version_file = "$CRIO_DIR/version"
version_file_persist = "$CRIO_DIR/version-persist"
clean_shutdown_file = "$CRIO_DIR/clean.shutdown"
[crio.api]
listen = "$SOCK"
stream_address = "127.0.0.1"
stream_port = "0"
[crio.runtime]
default_runtime = "crun"
cgroup_manager = "$CGROUP_DRIVER"
cdi_spec_dirs = ["$CLUSTER_DIR/cdi"]
hooks_dir = ["$CRIO_DIR/hooks.d"]
default_mounts_file = "$CRIO_DIR/mounts.conf"
pinns_path = "$BIN/pinns"
namespaces_dir = "$CRIO_DIR/ns"
container_exits_dir = "$CRIO_DIR/exits"
container_attach_socket_dir = "$CRIO_DIR/attach"
# The node has no apparmor_parser; the pods of the e2e suite ask for no profile.
apparmor_profile = "unconfined"
[crio.runtime.runtimes.crun]
runtime_path = "$(command -v crun)"
runtime_type = "oci"
runtime_root = "$CRUN_ROOT"
monitor_path = "$(command -v conmon)"
monitor_cgroup = "pod"
[crio.image]
pause_image = "$REGISTRY/pause:3.10"
global_auth_file = "$CRIO_DIR/auth.json"
signature_policy = "$CRIO_DIR/policy.json"
[crio.network]
network_dir = "$CLUSTER_DIR/cni/net.d"
plugin_dirs = ["/usr/lib/cni"]
[crio.nri]
enable_nri = $([ "${NRI_DISABLE:-0}" = 1 ] && echo false || echo true)
nri_listen = "$NRI_SOCKET"
nri_plugin_dir = "$CRIO_DIR/nri/plugins"
nri_plugin_config_dir = "$CRIO_DIR/nri/conf.d"
TOML
	mkdir -p "$CRIO_DIR/crio.conf.d" "$CRIO_DIR/hooks.d" "$CRIO_DIR/nri/plugins" "$CRIO_DIR/nri/conf.d" "$(dirname "$NRI_SOCKET")"
	: > "$CRIO_DIR/mounts.conf"
	start crio "$BIN/crio" --config "$CRIO_DIR/crio.conf" --config-dir "$CRIO_DIR/crio.conf.d" \
		--registries-conf "$CRIO_DIR/registries.conf" --registries-conf-dir "$CRIO_DIR/registries.conf.d"
	wait_for "crio" 60 runtime_ready
}
