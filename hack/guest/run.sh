#!/usr/bin/env bash
# Boots the guest that hack/guest/build.sh built (_output/guest/current) under QEMU software emulation
# (TCG; KVM guests hang on these machines), with SHARE_DIR shared over 9p at
# /share. The guest runs /share/run.sh as root and writes its exit code to
# SHARE_DIR/result; qemu's own exit code says nothing, so the run is judged
# from that file alone.
#
# Usage: hack/guest/run.sh SHARE_DIR [TIMEOUT_SECONDS]   (default 1800)
#
# Prints run.log (run.sh's output) on stdout and exits with run.sh's exit code.
# Without a result (the guest did not boot, or run.sh did not finish in time)
# it prints the last 60 lines of the guest console and exits 1; if the guest
# stopped making progress (no heartbeat for GUEST_STALL_SECONDS: the
# emulator no longer runs it, which is not a result of what it ran), it says
# so, prints what QEMU's monitor says of the virtual CPUs and exits 3.
# Left in SHARE_DIR: booted, heartbeat, result, run.log, console.log (serial
# console), qemu.log.
#
# Environment:
#   GUEST_CPUS    virtual CPUs (default 2)      GUEST_MEM  MiB of memory (default 4096)
#   GUEST_APPEND  extra kernel command line
#   GUEST_TAP     a tap device on the host to give the guest as eth0
#                 (virtio-net); without one the guest has no network beyond
#                 itself
#   GUEST_STALL_SECONDS  how long the guest's heartbeat (rewritten every 5 s
#                 by the guest while run.sh runs) may stand still before the
#                 guest counts as stopped (default 240)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

log() { printf '[guest-run %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	die "usage: hack/guest/run.sh SHARE_DIR [TIMEOUT_SECONDS]"
fi
[ -d "$1" ] || die "SHARE_DIR $1 is not a directory"
share=$(cd "$1" && pwd)
timeout=${2:-1800}
[[ "$timeout" =~ ^[1-9][0-9]*$ ]] || die "TIMEOUT_SECONDS must be a positive number of seconds, not '$timeout'"
[ -f "$share/run.sh" ] || die "$share/run.sh does not exist: the guest runs it"
case $share in *,*) die "SHARE_DIR must not contain a comma (qemu option syntax): $share" ;; esac

image=$REPO/_output/guest/current
[ -f "$image/done" ] || die "no guest image in $image: run hack/guest/build.sh first"
image=$(cd "$image" && pwd -P)
case $image in *,*) die "the image path must not contain a comma: $image" ;; esac
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing: run hack/guest/build.sh (it installs qemu-system-x86)"
clusterctl=$REPO/_output/bin/e2e-clusterctl
[ -x "$clusterctl" ] || die "$clusterctl is missing: run hack/cluster/build.sh (it runs and judges the guest)"

stall=${GUEST_STALL_SECONDS:-240}
[[ "$stall" =~ ^[1-9][0-9]*$ ]] || die "GUEST_STALL_SECONDS must be a positive number of seconds, not '$stall'"
# QEMU's monitor (QMP), on a socket outside the share, for the stall diagnostics.
mon_dir=$(mktemp -d)
trap 'rm -rf "$mon_dir"' EXIT
monitor=$mon_dir/monitor.sock

cpus=${GUEST_CPUS:-2}
mem=${GUEST_MEM:-4096}
append="console=ttyS0 panic=1 loglevel=4 cgroup_no_v1=all ${GUEST_APPEND:-}"
# shellcheck disable=SC2054 # commas inside qemu's option values
qemu=(
	qemu-system-x86_64
	-name dra-swap-guest
	-machine pc
	-accel tcg,thread=multi
	-cpu max
	-smp "$cpus"
	-m "$mem"
	-kernel "$image/vmlinuz"
	-initrd "$image/initrd.img"
	-append "$append"
	-drive "file=$image/rootfs.img,if=virtio,format=raw,snapshot=on"
	-virtfs "local,path=$share,mount_tag=share,security_model=none,id=share,multidevs=remap"
	-device virtio-rng-pci
	-display none
	-vga none
	-monitor none
	-qmp "unix:$monitor,server=on,wait=off"
	-serial "file:$share/console.log"
	-no-reboot
)

if [ -n "${GUEST_TAP:-}" ]; then
	ip link show "$GUEST_TAP" >/dev/null 2>&1 || die "GUEST_TAP $GUEST_TAP is not a network device"
	qemu+=(-netdev "tap,id=net0,ifname=$GUEST_TAP,script=no,downscript=no" -device virtio-net-pci,netdev=net0)
else
	qemu+=(-nic none)
fi

log "booting $(basename "$image") (kernel $(cat "$image/kernel-release" 2>/dev/null || echo '?'), ${cpus} CPUs, ${mem} MiB, TCG) with $share, timeout ${timeout} s"
# Runs QEMU and judges the run (test/e2e/guestrun): the result file, a
# timeout, a stall (heartbeat), a guest that does not power off.
"$clusterctl" guest-run -share "$share" -timeout "${timeout}s" -stall "${stall}s" -monitor "$monitor" -- "${qemu[@]}" &
watcher=$!
# A signal to this script stops QEMU through the watcher (exit 130).
trap 'kill -TERM "$watcher" 2>/dev/null || true' INT TERM
rc=0
wait "$watcher" || rc=$?
while kill -0 "$watcher" 2>/dev/null; do
	rc=0
	wait "$watcher" || rc=$?
done
exit "$rc"
