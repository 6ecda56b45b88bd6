# Shared settings and helpers of the local cluster scripts. Sourced, not run.
# Everything the cluster makes lives under CLUSTER_DIR; every process it
# starts has a PID file there, so teardown stops exactly those.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$REPO/_output/bin}"
IMAGES="${IMAGES:-$REPO/_output/images}"
CLUSTER_DIR="${CLUSTER_DIR:-/var/lib/dra-swap-e2e}"
NODE_NAME="${NODE_NAME:-dra-swap-node}"
SWAP_SIZE_MIB="${SWAP_SIZE_MIB:-1024}"
ETCD_PORT="${ETCD_PORT:-23790}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-23800}"
API_PORT="${API_PORT:-26443}"
# The kubelet's node IP: loopback here; a guest without a NIC uses a dummy interface.
NODE_IP="${NODE_IP:-127.0.0.1}"
WEBHOOK_PORT="${WEBHOOK_PORT:-29443}"
PKI="$CLUSTER_DIR/pki"
LOGS="$CLUSTER_DIR/logs"
PIDS="$CLUSTER_DIR/pids"
RUN="$CLUSTER_DIR/run"
SOCK="$RUN/containerd.sock"

log() { printf '[cluster %s] %s\n' "$(date +%T)" "$*"; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }
require_root() { [ "$(id -u)" = 0 ] || die "the local cluster runs a kubelet, containerd and swapon: run as root"; }

# start NAME CMD...: runs CMD in the background with its log and PID file.
start() {
	local name=$1; shift
	mkdir -p "$LOGS" "$PIDS"
	# setsid: the component outlives the shell that started it.
	setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
	echo $! > "$PIDS/$name.pid"
}

# ours PID NAME: whether PID is alive and still the binary we started.
ours() {
	local pid=$1 name=$2
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$name"
}

# stop NAME: stops the process of NAME's PID file (TERM, then KILL).
stop() {
	local name=$1 file="$PIDS/$1.pid" pid
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
# times TIMEOUT_SCALE (an integer, 1 unless the node runs emulated).
wait_for() {
	local what=$1 timeout=$(( $2 * ${TIMEOUT_SCALE:-1} )); shift 2
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

api() { curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://127.0.0.1:$API_PORT$1"; }

COMPONENTS="dra-swap-controller dra-swap-kubeletplugin kubelet kube-scheduler kube-controller-manager kube-apiserver containerd etcd"

# teardown: stops everything a run (also a killed one) left behind.
teardown() {
	[ -d "$CLUSTER_DIR" ] || return 0
	for c in $COMPONENTS; do stop "$c"; done
	# Shims of our containerd, and the containers they run.
	local p
	for p in $(pgrep -f "containerd-shim-runc-v2.*-address $SOCK" 2>/dev/null || true); do kill -KILL "$p" 2>/dev/null || true; done
	for p in $(pgrep -f "runc --root $CLUSTER_DIR" 2>/dev/null || true); do kill -KILL "$p" 2>/dev/null || true; done
	sleep 0.2
	# Mounts under the state directory (pod volumes, rootfs, shm), deepest first.
	findmnt -rn -o TARGET | grep "^$CLUSTER_DIR" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	# Swap files.
	local f
	for f in "$CLUSTER_DIR"/swap/*; do
		[ -e "$f" ] || continue
		swapoff "$f" 2>/dev/null || true
	done
	rm -rf "$CLUSTER_DIR"
}
