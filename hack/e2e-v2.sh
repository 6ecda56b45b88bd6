#!/usr/bin/env bash
# Runs the end-to-end suite on a cgroup v2 node: a Debian guest under QEMU
# software emulation (hack/guest), with the same cluster scripts, binaries,
# the driver's helm chart and the compiled e2e test binary shared over 9p.
# The node (containerd, the kubelet, kube-proxy, the driver, the suite) runs
# in the guest; its control plane (etcd, kube-apiserver, the controller
# manager, the scheduler and the image registry) runs on this host, natively,
# reached over a tap link (host 10.200.0.1, guest 10.200.0.2): under
# emulation the idle control plane alone took half of the guest's two CPUs.
# The guest writes the suite's exit code to a result file; qemu's own exit
# code says nothing.
#   E2E=skip   skip, explicitly
#   E2E_RUN=regexp  run only the matching tests (go test -run)
#   E2E_SKIP_BUILD=1  use what hack/e2e-build.sh and hack/guest/build.sh built
#   E2E_V2_TIMEOUT  seconds for the whole guest run (default 2700; a warm run
#                   takes about 450)
# If the emulator stops running the guest (hack/guest/run.sh: no heartbeat
# for GUEST_STALL_SECONDS, exit 3), that says nothing of what the guest
# ran: the leg says so, keeps the first attempt's output, and runs once more
# from a fresh control plane and a fresh boot. A test failure is never run
# again.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${E2E:-}" = skip ]; then
	echo "e2e-v2: SKIPPED because E2E=skip was set"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "e2e-v2: building the guest image needs root (debootstrap, mkfs); run as root or set E2E=skip." >&2
	exit 1
fi

start=$SECONDS
if [ "${E2E_SKIP_BUILD:-}" != 1 ]; then
	hack/e2e-build.sh
	hack/guest/build.sh
	echo "e2e-v2: host and guest builds took $((SECONDS - start)) s"
fi

share=$PWD/_output/guest-share
rm -rf "$share"
mkdir -p "$share/repo/hack" "$share/repo/_output" "$share/repo/test/e2e" "$share/repo/deployments"
cp -a hack/cluster "$share/repo/hack/"
# The chart that hack/cluster/driver.sh installs.
cp -a deployments/helm "$share/repo/deployments/"
# Hard links where possible: the binaries, images and the suite are large.
link_or_copy() { cp -al "$1" "$2" 2>/dev/null || cp -a "$1" "$2"; }
link_or_copy _output/bin "$share/repo/_output/bin"
for layout in images images-upgrade; do
	link_or_copy "_output/$layout" "$share/repo/_output/$layout"
done
link_or_copy _output/e2e.test "$share/e2e.test"
printf '%s' "${E2E_RUN:-}" > "$share/run-filter"

# The control plane on this host, on its end of the tap link; pod IPs (the
# webhooks' endpoints) are routed to the guest. Its logs are on the share,
# where the suite's diagnostics read the scheduler's.
# guest_ip is the address hack/guest/init gives the guest's eth0.
tap=dra-swap-tap0 host_ip=10.200.0.1 guest_ip=10.200.0.2 guest_pods=10.89.0.0/16
# Its own etcd ports, so that it never collides with the host leg's cluster.
cp_env=(CLUSTER_DIR=/var/lib/dra-swap-e2e-v2 CLUSTER_ROLE=control-plane CLUSTER_LOGS="$share/control-plane-logs"
	NODE_PKI="$share/pki" NODE_IP=$guest_ip API_HOST=$host_ip REGISTRY_HOST=$host_ip ETCD_PORT=23791 ETCD_PEER_PORT=23801)
control_plane_down() {
	env "${cp_env[@]}" hack/cluster/down.sh >/dev/null 2>&1 || true
	ip link del "$tap" 2>/dev/null || true
}
control_plane_up() {
	control_plane_down
	ip tuntap add dev "$tap" mode tap
	ip addr add "$host_ip/24" dev "$tap"
	ip link set "$tap" up
	ip route add "$guest_pods" via "$guest_ip" dev "$tap"
	env "${cp_env[@]}" hack/cluster/up.sh
}
trap control_plane_down EXIT
# The node half of the cluster, in the guest, against it.
cat > "$share/node.env" <<ENV
export CLUSTER_ROLE=node NODE_IP=$guest_ip API_HOST=$host_ip REGISTRY_HOST=$host_ip NODE_PKI=/share/pki \\
	POD_CIDR=$guest_pods CONTROL_PLANE_LOGS=/share/control-plane-logs
ENV
cat > "$share/run.sh" <<'RUN'
#!/bin/bash
# Inside the guest: bring the node up from the shared scripts and run the suite.
set -euo pipefail
# systemd is the guest's PID 1: the kubelet and containerd use the systemd cgroup
# driver and run as systemd units (the v1 leg on the host keeps cgroupfs).
export TIMEOUT_SCALE=4 E2E_TIMEOUT_SCALE=4 E2E_EMULATED=1 CGROUP_DRIVER=systemd
# The node half of the cluster; the control plane and the registry are on
# the host (e2e-v2.sh wrote their addresses).
source /share/node.env
echo "guest: $(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup), in $(cat /proc/self/cgroup)"
cd /share/repo
hack/cluster/up.sh
cd test/e2e
rc=0
filter=$(cat /share/run-filter)
/share/e2e.test -test.v -test.timeout 40m ${filter:+-test.run "$filter"} || rc=$?
/share/repo/hack/cluster/logs.sh 60 > /share/cluster-logs.txt 2>&1 || true
exit "$rc"
RUN
chmod +x "$share/run.sh"

for attempt in 1 2; do
	control_plane_up
	run=$SECONDS
	set +e
	GUEST_TAP=$tap hack/guest/run.sh "$share" "${E2E_V2_TIMEOUT:-2700}" | tee _output/e2e-v2.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|guest:|\[cluster)|^\s+\S+_test.go:'
	rc=${PIPESTATUS[0]}
	set -e
	echo "e2e-v2: guest run took $((SECONDS - run)) s, $((SECONDS - start)) s in all (full log: _output/e2e-v2.log)"
	if [ "$rc" != 3 ] || [ "$attempt" = 2 ]; then
		break
	fi
	cp _output/e2e-v2.log _output/e2e-v2.stalled.log
	cp "$share/console.log" _output/e2e-v2.stalled-console.log 2>/dev/null || true
	echo "e2e-v2: the emulator stopped running the guest (no heartbeat; see above and _output/e2e-v2.stalled*.log):" \
		"that is no result of the suite, so the leg runs once more, from a fresh control plane and boot"
done
if [ "$rc" != 0 ]; then
	if [ -f "$share/cluster-logs.txt" ]; then
		echo "e2e-v2: component log tails from the guest:"
		tail -n 200 "$share/cluster-logs.txt"
	fi
	echo "e2e-v2: the control plane's log tails (on this host):"
	env "${cp_env[@]}" hack/cluster/logs.sh 30 || true
	echo "e2e-v2: the guest console's last 40 lines (kernel messages such as OOM kills):"
	tail -n 40 "$share/console.log" 2>/dev/null || echo "(no console.log)"
fi
exit "$rc"
