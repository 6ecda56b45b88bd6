#!/usr/bin/env bash
# Prints the last N (default 40) lines of each component's log, and of each
# container log of the driver's pods (namespace DRIVER_NAMESPACE).
source "$(dirname "$0")/lib.sh"
n=${1:-40}
for c in $COMPONENTS; do
	[ -f "$LOGS/$c.log" ] || continue
	echo "----- $c (last $n lines of $LOGS/$c.log)"
	tail -n "$n" "$LOGS/$c.log"
done
# The kubelet keeps <namespace>_<pod>_<uid>/<container>/<restart>.log.
for f in "$CLUSTER_DIR/pod-logs/${DRIVER_NAMESPACE}_"*/*/*.log; do
	[ -f "$f" ] || continue
	echo "----- pod log (last $n lines of $f)"
	tail -n "$n" "$f"
done
