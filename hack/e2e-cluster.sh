#!/usr/bin/env bash
# Runs the end-to-end suite on a two-node cluster: one control plane on this
# host, and two nodes with different facts on purpose:
#   dra-swap-node   this host: cgroup v1, cgroupfs, kubelet NoSwap (the
#                   kubelet refuses LimitedSwap on cgroup v1), 1 GiB of
#                   swap, zone-a/region-1, pods 10.88.0.0/16
#   dra-swap-guest  a Debian guest under QEMU software emulation
#                   (hack/guest): cgroup v2, systemd, kubelet NoSwap (a
#                   node sells swap under no other behavior;
#                   TestKubeletSwapBehaviorChange turns it to LimitedSwap
#                   and back), 768 MiB of swap, zone-b/region-2,
#                   pods 10.89.0.0/16
# joined over a tap link (host 10.200.0.1, guest 10.200.0.2) with each
# node's pod network routed to the other. The driver is installed once, by
# helm, on this host; its DaemonSet runs on both nodes.
# Three phases, one after another (the emulated guest must not share its
# CPU with a running suite: see hack/test.sh):
#   1. host   the suite, its pods pinned to this host's node, before the
#             guest boots (the guest's name is known, its node is not there):
#             first the conformance suite (hack/e2e-conformance.sh), as a
#             user runs it from elsewhere (as nobody, with a kubeconfig only,
#             the cluster's state directory, cgroups and pod logs out of
#             sight), then the rest (E2E_CONFORMANCE_RAN=1: the tests the
#             conformance suite ran in full skip, the others run);
#   2. guest  the guest boots, joins, and runs the same suite pinned to its
#             node (tests that do not depend on the cgroup version skip
#             there: hostLegOnly);
#   3. nodes  from this host, the tests of both nodes (TestTwoNodes*), the
#             last of which powers the guest off for good (node gone).
# The guest's suite writes its exit code to the share; qemu's own exit code
# says nothing.
#   E2E=skip          skip, explicitly
#   E2E_RUN=regexp    run only the matching tests (go test -run) in each phase
#   E2E_BENCH=regexp  also run the matching benchmarks once in the nodes phase
#                     (from this host; report in _output/bench-nodes.txt)
#   E2E_GUEST_BENCH=regexp  the same in the guest phase, on the guest
#                     (_output/bench-guest.txt); the BENCH_* variables go along
#   GUEST_SWAP_MIB    the guest's swap file (default 768)
#   E2E_PHASES        which phases run (default "host guest nodes"; the guest
#                     boots for "guest" or "nodes")
#   E2E_SKIP_BUILD=1  use what hack/e2e-build.sh and hack/guest/build.sh built
#   E2E_CONFORMANCE=skip  no conformance pass: phase host runs the whole suite
#   GUEST_RUNTIME     the guest node's container runtime: containerd (with
#                     runc, default) or crio (CRI-O with crun: the v2 node's
#                     second configuration; make e2e-crio runs its guest phase)
# If the emulator stops running the guest (hack/guest/run.sh: no heartbeat,
# exit 3) before its suite finished, that says nothing of what the guest
# ran: the phase says so and boots the guest once more. A test failure is
# never run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${E2E:-}" = skip ]; then
	echo "e2e-cluster: SKIPPED because E2E=skip was set"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "e2e-cluster: the cluster runs a kubelet, containerd, swapon and a guest image build (debootstrap): run as root or set E2E=skip." >&2
	exit 1
fi
if [ ! -r /proc/swaps ] || ! command -v swapon >/dev/null; then
	echo "e2e-cluster: this machine cannot enable swap (no /proc/swaps or swapon); set E2E=skip to skip explicitly." >&2
	exit 1
fi
phases=" ${E2E_PHASES:-host guest nodes} "
has_phase() { [[ "$phases" == *" $1 "* ]]; }

GUEST_RUNTIME=${GUEST_RUNTIME:-containerd}
case "$GUEST_RUNTIME" in containerd | crio) ;; *) echo "e2e-cluster: GUEST_RUNTIME must be containerd or crio, not $GUEST_RUNTIME" >&2; exit 1 ;; esac

start=$SECONDS
if [ "${E2E_SKIP_BUILD:-}" != 1 ]; then
	BUILD_CRIO=$([ "$GUEST_RUNTIME" = crio ] && echo 1 || echo 0) hack/e2e-build.sh
	hack/guest/build.sh
	echo "e2e-cluster: host and guest builds took $((SECONDS - start)) s"
fi

share=$PWD/_output/guest-share
rm -rf "$share"
mkdir -p "$share/repo/hack" "$share/repo/_output" "$share/repo/test/e2e" "$share/repo/deployments"
cp -a hack/cluster "$share/repo/hack/"
# The chart that the guest suite's driver tests reinstall and upgrade, and
# the examples that TestExamples applies as they are.
cp -a deployments/helm "$share/repo/deployments/"
cp -a examples "$share/repo/"
# Hard links where possible: the binaries, images and the suite are large.
link_or_copy() { cp -al "$1" "$2" 2>/dev/null || cp -a "$1" "$2"; }
link_or_copy _output/bin "$share/repo/_output/bin"
for layout in images images-upgrade; do
	link_or_copy "_output/$layout" "$share/repo/_output/$layout"
done
link_or_copy _output/e2e.test "$share/e2e.test"
printf '%s' "${E2E_RUN:-}" > "$share/run-filter"
# E2E_GUEST_BENCH: the benchmarks the guest runs too (go test -bench, once),
# with the BENCH_* settings; the OFFLOAD_* settings go along to the guest's
# own cluster (hack/cluster/driver.sh), as the host's driver.sh takes them.
printf '%s' "${E2E_GUEST_BENCH:-}" > "$share/bench-filter"
env | grep -E '^(BENCH|OFFLOAD)_[A-Z_]+=' | sed 's/^/export /' > "$share/bench.env" || true
# How long the guest may run: an hour for the suites; with benchmarks, the
# guest's and the host's go test timeouts (120 minutes each) and ten more
# (make bench-offload's density ran past the hour, and the guest was
# killed under it).
guest_timeout=3600
[ -z "${E2E_BENCH:-}${E2E_GUEST_BENCH:-}" ] || guest_timeout=$(((120 + 120 + 10) * 60))
printf '%s' "$guest_timeout" > "$share/guest-timeout"

# The two nodes' names and link (hack/cluster/lib.sh, CLUSTER_NODE).
eval "$(CLUSTER_NODE=host bash -c 'source hack/cluster/lib.sh
	printf "tap=%q host_ip=%q host_node=%q guest_node=%q\n" "$LINK_TAP" "$LINK_HOST_IP" "$HOST_NODE" "$GUEST_NODE"')"
# This host: the control plane (on its end of the tap link, where the
# guest reaches it and the registry) and the first node.
cluster_down() {
	CLUSTER_NODE=host hack/cluster/down.sh >/dev/null 2>&1 || true
	ip link del "$tap" 2>/dev/null || true
}
cluster_up() {
	cluster_down
	ip tuntap add dev "$tap" mode tap
	ip addr add "$host_ip/24" dev "$tap"
	ip link set "$tap" up
	CLUSTER_NODE=host hack/cluster/up.sh
}
trap cluster_down EXIT
# The guest: the second node, joining.
cat > "$share/node.env" <<ENV
export CLUSTER_NODE=guest SWAP_SIZE_MIB=${GUEST_SWAP_MIB:-768} CONTAINER_RUNTIME=$GUEST_RUNTIME
ENV
cat > "$share/run.sh" <<'RUN'
#!/bin/bash
# Inside the guest: join the cluster from the shared scripts, run the suite
# pinned to this node, then wait until the host's two-node tests are done
# (the last one asks for the power-off) and exit with the suite's code.
set -euo pipefail
# systemd is the guest's PID 1: the kubelet and containerd use the systemd cgroup
# driver and run as systemd units (the host's node keeps cgroupfs).
export E2E_TIMEOUT_SCALE=4 E2E_EMULATED=1
source /share/node.env
# What the node is: its Debian release and kernel, the kernel's swap
# features that the driver publishes, the runtime and its OCI runtime.
has() { if [ -e "$1" ]; then echo yes; else echo no; fi; }
echo "guest: Debian $(cat /etc/debian_version), kernel $(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup), in $(cat /proc/self/cgroup)"
echo "guest: kernel features: memory.swap.peak $(has /sys/fs/cgroup/system.slice/memory.swap.peak)," \
	"memory.zswap.writeback $(has /sys/fs/cgroup/system.slice/memory.zswap.writeback)," \
	"memory.zswap.max $(has /sys/fs/cgroup/system.slice/memory.zswap.max), zswap enabled $(cat /sys/module/zswap/parameters/enabled 2>/dev/null || echo no)"
echo "guest: kernel command line: $(cat /proc/cmdline); CPU vulnerabilities: $(grep -v -e 'Not affected' /sys/devices/system/cpu/vulnerabilities/* 2>/dev/null | sed 's|.*/||' | paste -sd ';' -)"
if [ "$CONTAINER_RUNTIME" = crio ]; then
	echo "guest: runtime $(/share/repo/_output/bin/crio --version 2>/dev/null | head -n1) with $(crun --version | head -n1), $(conmon --version | head -n1)"
else
	echo "guest: runtime containerd $(/share/repo/_output/bin/containerd --version | awk '{print $3}') with $(runc --version | head -n1)"
fi
cd /share/repo
# shellcheck disable=SC1091
source /share/bench.env
hack/cluster/up.sh
source /var/lib/dra-swap-e2e/env
if [ "$CONTAINER_RUNTIME" = containerd ]; then
	# The image the two-node upgrade test rolls to, pulled now: the emulated
	# containerd took minutes to pull it while the test's pods were starting.
	/share/repo/_output/bin/ctr -a "$CONTAINERD_SOCK" -n k8s.io images pull --plain-http \
		--user "$(cat "$CLUSTER_DIR/pki/registry-basic-auth")" "$DRIVER_REPOSITORY/dra-driver-swap:$DRIVER_UPGRADE_VERSION" >/dev/null
fi
rc=0
if [ -f /share/run-guest-suite ]; then
	cd test/e2e
	filter=$(cat /share/run-filter)
	bench=$(cat /share/bench-filter)
	BENCH_REPORT=/share/bench-guest.txt /share/e2e.test -test.v -test.timeout "$([ -n "$bench" ] && echo 120m || echo 40m)" -test.skip '^TestTwoNodes' \
		${filter:+-test.run "$filter"} ${bench:+-test.bench "$bench" -test.benchtime 1x} || rc=$?
	cd /share/repo
fi
/share/repo/hack/cluster/logs.sh 60 > /share/cluster-logs.txt 2>&1 || true
echo "$rc" > /share/node-suite-rc
echo "guest: suite exited with $rc; the node stays up for the two-node tests"
# At most the guest's time (an hour, longer for benchmarks): the host's
# run is bounded by its own timeout.
for _ in $(seq "$(cat /share/guest-timeout)"); do
	[ -f /share/poweroff ] && break
	sleep 1
done
echo "guest: powering off ($( [ -f /share/poweroff ] && echo asked || echo 'not asked in time'))"
exit "$rc"
RUN
chmod +x "$share/run.sh"
has_phase guest && touch "$share/run-guest-suite"

rc=0
up=$SECONDS
cluster_up
echo "e2e-cluster: control plane and $host_node up with the driver in $((SECONDS - up)) s"

# suite LOG ARGS...: the compiled suite, in its package directory as go
# test runs it, on this host.
suite() {
	local log=$1
	shift
	set +e
	(cd test/e2e && ../../_output/e2e.test -test.count=1 -test.v -test.timeout 40m "$@") 2>&1 |
		tee "$log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|^\s+\S+_test.go:'
	local r=${PIPESTATUS[0]}
	set -e
	return "$r"
}

# conformance LOG: the conformance suite, as a user runs it against a
# cluster of theirs: hack/e2e-conformance.sh from a directory holding only
# it, examples/ and the compiled suite, as nobody, with a kubeconfig that
# embeds its certificates and nothing else of this cluster set, in a mount
# namespace where this cluster's state directory, the cgroup tree and the
# pod logs are empty, so that a test reading the node fails here.
conformance() {
	local log=$1 dir r=0 cluster_dir=${CLUSTER_DIR:-/var/lib/dra-swap-e2e}
	dir=$(mktemp -d)
	mkdir -p "$dir/repo/hack" "$dir/repo/_output" "$dir/repo/test/e2e"
	cp hack/e2e-conformance.sh "$dir/repo/hack/"
	cp -a examples "$dir/repo/"
	cp _output/e2e.test "$dir/repo/_output/"
	_output/bin/e2e-clusterctl embed-kubeconfig "$(sed -n 's/^KUBECONFIG=//p' "$cluster_dir/env")" > "$dir/kubeconfig"
	chown -R 65534:65534 "$dir"
	set +e
	unshare --mount --propagation private -- bash -c '
		for d in "$1" /sys/fs/cgroup /var/log/pods; do
			[ ! -d "$d" ] || mount -t tmpfs -o ro,size=64k e2e-conformance-hidden "$d" || { echo "e2e-cluster: cannot hide $d from the conformance suite" >&2; exit 1; }
		done
		exec setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$2" \
			KUBECONFIG="$2/kubeconfig" E2E_SKIP_BUILD=1 E2E_CONFORMANCE_LOG="$2/e2e-conformance.log" \
			${E2E_RUN:+E2E_RUN="$E2E_RUN"} ${E2E_TIMEOUT_SCALE:+E2E_TIMEOUT_SCALE="$E2E_TIMEOUT_SCALE"} \
			"$2/repo/hack/e2e-conformance.sh"' conformance "$cluster_dir" "$dir"
	r=$?
	set -e
	cp "$dir/e2e-conformance.log" "$log" 2>/dev/null || echo "e2e-cluster: the conformance suite wrote no log" > "$log"
	rm -rf "$dir"
	return "$r"
}

if has_phase host; then
	t=$SECONDS
	echo "e2e-cluster: phase host: the suite on $host_node (cgroup v$( [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && echo 2 || echo 1))"
	ran_conformance=
	if [ "${E2E_CONFORMANCE:-}" != skip ]; then
		conformance _output/e2e-conformance.log || rc=1
		echo "e2e-cluster: the conformance suite took $((SECONDS - t)) s ($([ "$rc" = 0 ] && echo ok || echo FAIL); full log: _output/e2e-conformance.log)"
		ran_conformance=1
	fi
	# The series TestScrapeForRules scrapes, for make monitoring-check.
	rm -f _output/scraped.prom
	E2E_CONFORMANCE_RAN=$ran_conformance E2E_SCRAPE_OUT=$PWD/_output/scraped.prom suite _output/e2e.log -test.skip '^TestTwoNodes' ${E2E_RUN:+-test.run "$E2E_RUN"} || rc=1
	echo "e2e-cluster: phase host took $((SECONDS - t)) s ($([ "$rc" = 0 ] && echo ok || echo FAIL); full log: _output/e2e.log)"
fi

if has_phase guest || has_phase nodes; then
	t=$SECONDS
	echo "e2e-cluster: phase guest: $guest_node boots, joins and runs its tests on cgroup v2 ($GUEST_RUNTIME)"
	for attempt in 1 2; do
		rm -f "$share"/{node-suite-rc,poweroff}
		# zswap on: the v2 node keeps swapped pages compressed first, as
		# production nodes do (compressed-only claims need it).
		GUEST_APPEND="zswap.enabled=1 ${GUEST_APPEND:-}" GUEST_TAP=$tap hack/guest/run.sh "$share" "$guest_timeout" > _output/e2e-v2.log 2>&1 &
		guest=$!
		# Until the guest's suite is done (or the guest stopped).
		while kill -0 "$guest" 2>/dev/null && [ ! -f "$share/node-suite-rc" ]; do sleep 2; done
		if [ -f "$share/node-suite-rc" ]; then
			break
		fi
		grc=0
		wait "$guest" || grc=$?
		if [ "$grc" != 3 ] || [ "$attempt" = 2 ]; then
			break
		fi
		cp _output/e2e-v2.log _output/e2e-v2.stalled.log
		cp "$share/console.log" _output/e2e-v2.stalled-console.log 2>/dev/null || true
		echo "e2e-cluster: the emulator stopped running the guest before its suite finished (no heartbeat; _output/e2e-v2.stalled*.log):" \
			"that is no result of the suite, so the guest boots once more"
	done
	[ ! -f "$share/bench-guest.txt" ] || cp "$share/bench-guest.txt" _output/bench-guest.txt
	if [ -f "$share/node-suite-rc" ]; then
		echo "e2e-cluster: phase guest took $((SECONDS - t)) s (suite exit $(cat "$share/node-suite-rc"); its log follows at the end)"
	else
		echo "e2e-cluster: phase guest: the guest stopped before its suite finished (after $((SECONDS - t)) s)"
	fi
fi

nodes_rc=0
if has_phase nodes && [ -f "$share/node-suite-rc" ]; then
	t=$SECONDS
	echo "e2e-cluster: phase nodes: the two-node tests, from this host"
	E2E_TIMEOUT_SCALE=4 E2E_GUEST_SHARE=$share BENCH_REPORT=$PWD/_output/bench-nodes.txt suite _output/e2e-nodes.log \
		-test.run "${E2E_RUN:-^TestTwoNodes}" ${E2E_BENCH:+-test.bench "$E2E_BENCH" -test.benchtime 1x -test.timeout 120m} || nodes_rc=1
	echo "e2e-cluster: phase nodes took $((SECONDS - t)) s ($([ "$nodes_rc" = 0 ] && echo ok || echo FAIL); full log: _output/e2e-nodes.log)"
	[ "$nodes_rc" = 0 ] || rc=1
elif has_phase nodes; then
	echo "e2e-cluster: phase nodes cannot run: the guest node never finished joining" >&2
	rc=1
fi

if has_phase guest || has_phase nodes; then
	touch "$share/poweroff"
	grc=0
	wait "$guest" 2>/dev/null || grc=$?
	grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|guest:|\[cluster|\[guest-run)|^\s+\S+_test.go:' _output/e2e-v2.log || true
	if [ "$grc" != 0 ]; then
		rc=1
		if [ -f "$share/cluster-logs.txt" ]; then
			echo "e2e-cluster: component log tails from the guest:"
			tail -n 200 "$share/cluster-logs.txt"
		fi
		echo "e2e-cluster: the guest console's last 40 lines (kernel messages such as OOM kills):"
		tail -n 40 "$share/console.log" 2>/dev/null || echo "(no console.log)"
	fi
	echo "e2e-cluster: the guest's run exited with $grc (full log: _output/e2e-v2.log)"
fi
if [ "$rc" != 0 ]; then
	echo "e2e-cluster: this host's component log tails:"
	CLUSTER_NODE=host hack/cluster/logs.sh 30 || true
fi
echo "e2e-cluster: $([ "$rc" = 0 ] && echo ok || echo FAIL) after $((SECONDS - start)) s"
exit "$rc"
