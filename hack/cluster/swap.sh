#!/usr/bin/env bash
# swap.sh add NAME MIB | remove NAME: a swap file of the cluster's.
source "$(dirname "$0")/lib.sh"
require_root
cmd=${1:-}; name=${2:-}
[[ "$name" =~ ^[a-z0-9-]+$ ]] || die "usage: swap.sh add NAME MIB | remove NAME"
file="$CLUSTER_DIR/swap/$name"
case "$cmd" in
add)
	mib=${3:-}
	[[ "$mib" =~ ^[0-9]+$ ]] || die "usage: swap.sh add NAME MIB"
	mkdir -p "$CLUSTER_DIR/swap"
	# fallocate'd files are fine for swap on ext4/xfs; dd is the fallback.
	fallocate -l "${mib}M" "$file" 2>/dev/null || dd if=/dev/zero of="$file" bs=1M count="$mib" status=none
	chmod 600 "$file"
	mkswap "$file" >/dev/null
	swapon "$file" || { rm -f "$file"; die "swapon $file failed: this machine cannot enable swap (set E2E=skip to skip the e2e tests explicitly)"; }
	log "swapon $file (${mib} MiB)"
	;;
remove)
	if [ -e "$file" ]; then
		swapoff "$file"
		rm -f "$file"
		log "swapoff $file"
	fi
	;;
*) die "usage: swap.sh add NAME MIB | remove NAME" ;;
esac
