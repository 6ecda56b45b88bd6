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

stall=${GUEST_STALL_SECONDS:-240}
[[ "$stall" =~ ^[1-9][0-9]*$ ]] || die "GUEST_STALL_SECONDS must be a positive number of seconds, not '$stall'"
rm -f "$share"/{booted,heartbeat,result,result.tmp,run.log,console.log,qemu.log,guest-init-error}
# QEMU's monitor (QMP), on a socket outside the share, for the stall diagnostics.
mon_dir=$(mktemp -d)
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
start=$SECONDS
"${qemu[@]}" </dev/null >"$share/qemu.log" 2>&1 &
qpid=$!

stop_qemu() {
	kill -0 "$qpid" 2>/dev/null || return 0
	kill -TERM "$qpid" 2>/dev/null || true
	local tries=20
	while [ "$tries" -gt 0 ] && kill -0 "$qpid" 2>/dev/null; do
		sleep 0.5
		tries=$((tries - 1))
	done
	kill -0 "$qpid" 2>/dev/null || return 0
	kill -KILL "$qpid" 2>/dev/null || true
}
trap 'stop_qemu; rm -rf "$mon_dir"' EXIT
trap 'log "interrupted"; exit 130' INT TERM

# vcpus: each virtual CPU's instruction pointer, privilege level and
# whether it is halted, from QEMU's monitor (QMP on a unix socket; best
# effort: python3 speaks it, and without python3 there is nothing).
vcpus() {
	command -v python3 >/dev/null 2>&1 || { echo "(python3 is missing: no monitor output)"; return 0; }
	timeout 20 python3 - "$monitor" <<'PY' 2>&1 || true
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
f = s.makefile("rw")
def call(cmd, **args):
    f.write(json.dumps({"execute": cmd, "arguments": args}) + "\n")
    f.flush()
    while True:
        msg = json.loads(f.readline())
        if "return" in msg or "error" in msg:
            return msg
json.loads(f.readline())  # the greeting
call("qmp_capabilities")
regs = call("human-monitor-command", **{"command-line": "info registers -a"}).get("return", "")
for line in regs.splitlines():
    if line.startswith("CPU#"):
        print(line, end=": ")
    elif line.startswith("RIP="):
        print(line)
PY
}

# heartbeat_age: seconds since the guest last showed progress (its
# heartbeat, else the booted file), by this host's clock.
heartbeat_age() {
	local f=$share/heartbeat
	[ -f "$f" ] || f=$share/booted
	echo $(($(date +%s) - $(stat -c %Y "$f")))
}

booted_at='' result_at='' timed_out=0 hung=0 stalled=0
note_progress() {
	if [ -z "$booted_at" ] && [ -f "$share/booted" ]; then
		booted_at=$((SECONDS - start))
		log "guest booted after ${booted_at} s; run.sh is running"
	fi
	if [ -z "$result_at" ] && [ -f "$share/result" ]; then
		result_at=$((SECONDS - start))
		log "result after ${result_at} s"
	fi
}
while kill -0 "$qpid" 2>/dev/null; do
	note_progress
	now=$((SECONDS - start))
	if [ "$now" -ge "$timeout" ]; then
		timed_out=1
		log "timeout: no result after ${timeout} s; killing qemu"
		stop_qemu
		break
	fi
	if [ -n "$booted_at" ] && [ -z "$result_at" ] && [ "$(heartbeat_age)" -ge "$stall" ]; then
		stalled=1
		log "the guest stopped: no heartbeat for $(heartbeat_age) s (GUEST_STALL_SECONDS=$stall); its virtual CPUs, twice, 3 s apart (HLT=1: waiting for an interrupt; a moving RIP: running something):"
		vcpus >&2
		sleep 3
		vcpus >&2
		stop_qemu
		break
	fi
	if [ -n "$result_at" ] && [ $((now - result_at)) -ge 60 ]; then
		hung=1
		log "the guest wrote its result but did not power off within 60 s; killing qemu"
		stop_qemu
		break
	fi
	sleep 1
done
qemu_rc=0
wait "$qpid" 2>/dev/null || qemu_rc=$?
note_progress
total=$((SECONDS - start))
trap - EXIT

if [ -s "$share/run.log" ]; then
	log "----- run.log -----"
	cat "$share/run.log"
	log "----- end of run.log -----"
fi

if [ -f "$share/result" ]; then
	rc=$(tr -cd '0-9' <"$share/result")
	if [ -z "$rc" ] || [ "$rc" -gt 255 ]; then
		log "unreadable result '$(head -c 100 "$share/result")': counting it as a failure"
		rc=1
	fi
	msg="run.sh exited with $rc; booted after ${booted_at:-?} s, result after ${result_at:-?} s, qemu exited after ${total} s"
	[ "$hung" = 0 ] || msg="$msg (killed: it did not power off)"
	log "$msg"
	exit "$rc"
fi

if [ -n "$booted_at" ] || [ -f "$share/booted" ]; then
	if [ "$stalled" = 1 ]; then
		why="the guest booted (after ${booted_at:-?} s) and stopped making progress after about $((total - stall)) s: no heartbeat for ${stall} s"
	elif [ "$timed_out" = 1 ]; then
		why="the guest booted (after ${booted_at:-?} s) but run.sh did not finish within the timeout of ${timeout} s"
	else
		why="the guest booted (after ${booted_at:-?} s) but stopped after ${total} s without writing a result (qemu exit code $qemu_rc)"
	fi
	[ -f "$share/guest-init-error" ] && why="$why; $(cat "$share/guest-init-error")"
else
	if [ "$timed_out" = 1 ]; then
		why="the guest did not boot: no $share/booted within the timeout of ${timeout} s"
	else
		why="the guest did not boot: qemu exited with code $qemu_rc after ${total} s and no $share/booted"
	fi
fi
if [ -s "$share/qemu.log" ]; then
	log "----- qemu.log -----"
	tail -n 20 "$share/qemu.log" >&2
fi
log "----- last 60 lines of console.log -----"
tail -n 60 "$share/console.log" >&2 2>/dev/null || log "(no console.log)"
log "FAILED: $why"
[ "$stalled" = 1 ] && exit 3
exit 1
