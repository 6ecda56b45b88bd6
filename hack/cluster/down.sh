#!/usr/bin/env bash
# Tears the local cluster down: stops the processes it started, unmounts,
# swapoffs and removes its state. Safe to run twice or after a killed run.
source "$(dirname "$0")/lib.sh"
require_root
teardown
log "cluster down ($CLUSTER_DIR removed)"
