#!/usr/bin/env bash
# Prints the last N (default 40) lines of each component's log.
source "$(dirname "$0")/lib.sh"
n=${1:-40}
for c in $COMPONENTS; do
	[ -f "$LOGS/$c.log" ] || continue
	echo "----- $c (last $n lines of $LOGS/$c.log)"
	tail -n "$n" "$LOGS/$c.log"
done
