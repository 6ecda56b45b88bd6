#!/usr/bin/env bash
# restart.sh NAME: stops a cluster component (kubelet, containerd, crio, …) the
# way an admin's `systemctl restart` does (SIGTERM, then SIGKILL after 5 s)
# and starts it again with the command line up.sh started it with. Running
# containers survive a containerd restart (their shims keep them), pods a
# kubelet restart.
source "$(dirname "$0")/lib.sh"
require_root
name=${1:?usage: restart.sh NAME}
cmd_file="$PIDS/$name.cmd"
[ -f "$cmd_file" ] || die "no command line recorded for $name ($cmd_file): was it started by up.sh?"
mapfile -d '' cmd < "$cmd_file"
begin=$SECONDS
stop "$name"
start "$name" "${cmd[@]}"
case "$name" in
containerd | crio) wait_for "$name" 60 runtime_ready ;;
kubelet) wait_for "kubelet healthy" 60 curl -sf "http://127.0.0.1:10248/healthz" ;;
esac
log "$name restarted in $((SECONDS - begin))s"
