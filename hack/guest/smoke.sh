#!/usr/bin/env bash
# Smoke test of the guest: writes a share whose run.sh checks cgroup v2 (every
# controller, the init in system.slice with memory.swap.max, a child cgroup
# taking a swap limit, memory.swap.peak and memory.zswap.writeback), a swap
# file, overlayfs, the dummy node interface and the cluster's Debian tools
# (runc, crun, conmon), then boots it with hack/guest/run.sh.
#
# Usage: hack/guest/smoke.sh [SHARE_DIR] [TIMEOUT_SECONDS]   (default /tmp/smoke 600)
# Build first: hack/guest/build.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
share=${1:-/tmp/smoke}
timeout=${2:-600}

log() { printf '[guest-smoke %s] %s\n' "$(date +%T)" "$*" >&2; }

mkdir -p "$share"
cat >"$share/run.sh" <<'RUN'
#!/bin/bash
# Runs inside the guest as root (hack/guest/smoke.sh).
set -euo pipefail
check() { echo "ok: $*"; }
echo "uname -r: $(uname -r)"
echo "uptime: $(cut -d' ' -f1 /proc/uptime) s, $(nproc) CPUs, $(free -m | awk '/^Mem:/ {print $2}') MiB"
echo "cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "cgroup.subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
echo "/proc/self/cgroup: $(cat /proc/self/cgroup)"

[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && check "cgroup v2 at /sys/fs/cgroup"
for c in cpu memory pids io cpuset; do
	grep -qw "$c" /sys/fs/cgroup/cgroup.subtree_control
done
check "cpu memory pids io cpuset delegated by the root"
[ "$(cat /proc/self/cgroup)" = "0::/system.slice" ]
check "run.sh is in system.slice"
test -f /sys/fs/cgroup/system.slice/memory.swap.max
check "system.slice/memory.swap.max = $(cat /sys/fs/cgroup/system.slice/memory.swap.max)"
cg=/sys/fs/cgroup/smoke
mkdir "$cg"
echo 32M >"$cg/memory.swap.max"
[ "$(cat "$cg/memory.swap.max")" = 33554432 ]
rmdir "$cg"
check "a child cgroup takes a swap limit"

swap=/var/tmp/smoke.swap
fallocate -l 64M "$swap"
chmod 600 "$swap"
mkswap "$swap" >/dev/null
swapon "$swap"
grep "^$swap " /proc/swaps
swapoff "$swap"
rm -f "$swap"
check "64M swap file: swapon and swapoff"

d=$(mktemp -d)
mkdir "$d"/{lower,upper,work,merged}
echo hi >"$d/lower/f"
mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged"
[ "$(cat "$d/merged/f")" = hi ]
umount "$d/merged"
check "overlayfs"
findmnt -no PROPAGATION / | grep shared >/dev/null && check "/ is shared"

ip addr show dummy0
ip -4 addr show dummy0 | grep 'inet 10.200.0.2/24' >/dev/null
check "dummy0 has 10.200.0.2/24"

for f in memory.swap.peak memory.zswap.writeback; do
	if [ -f "/sys/fs/cgroup/system.slice/$f" ]; then check "the kernel has $f"; else echo "note: the kernel has no $f"; fi
done
echo "runc: $(runc --version | head -n1)"
echo "crun: $(crun --version | head -n1)"
echo "conmon: $(conmon --version | head -n1)"
test -x /usr/lib/cni/loopback && check "CNI loopback plugin"
openssl version
echo "smoke: all checks passed"
RUN
chmod +x "$share/run.sh"
log "share $share written; booting"
exec "$HERE/run.sh" "$share" "$timeout"
