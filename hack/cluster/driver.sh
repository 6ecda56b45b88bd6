#!/usr/bin/env bash
# driver.sh start|stop|restart: the dra.swap kubelet plugin as a process on
# the node, against the kubelet's plugin registry, and the controller with
# its webhooks on https://localhost:$WEBHOOK_PORT (restart: the plugin only).
source "$(dirname "$0")/lib.sh"
require_root
start_driver() {
	mkdir -p "$CLUSTER_DIR/bin" "$CLUSTER_DIR/kubelet/plugins_registry" "$CLUSTER_DIR/cdi" "$RUN/hook"
	start dra-swap-kubeletplugin "$BIN/dra-swap-kubeletplugin" \
		--kubeconfig "$CLUSTER_DIR/kubeconfig/admin.kubeconfig" \
		--node-name "$NODE_NAME" \
		--cdi-dir "$CLUSTER_DIR/cdi" \
		--install-hook-from "$BIN/dra-swap-hook" \
		--hook-path "$CLUSTER_DIR/bin/dra-swap-hook" \
		--hook-state-dir "$RUN/hook" \
		--plugin-data-dir "$CLUSTER_DIR/kubelet/plugins/dra.swap" \
		--registrar-dir "$CLUSTER_DIR/kubelet/plugins_registry" \
		--kubelet-config "$CLUSTER_DIR/kubelet/config.yaml" \
		--rescan-interval 2s \
		--metrics-address 127.0.0.1:28080 \
		-v=4
	log "dra-swap-kubeletplugin started (pid $(cat "$PIDS/dra-swap-kubeletplugin.pid"))"
}
start_controller() {
	start dra-swap-controller "$BIN/dra-swap-controller" \
		--kubeconfig "$CLUSTER_DIR/kubeconfig/admin.kubeconfig" \
		--webhook-host 127.0.0.1 --webhook-port "$WEBHOOK_PORT" \
		--webhook-dns-names localhost \
		--webhook-secret-namespace kube-system \
		--leader-election-namespace kube-system \
		--metrics-address 127.0.0.1:28081 --health-address 127.0.0.1:28082 \
		--cert-check-interval 10s \
		-v=4
	log "dra-swap-controller started (pid $(cat "$PIDS/dra-swap-controller.pid"))"
}
case "${1:-}" in
start) start_driver; start_controller ;;
stop) stop dra-swap-controller; stop dra-swap-kubeletplugin ;;
restart) stop dra-swap-kubeletplugin; start_driver
	wait_for "the kubelet registered the plugin" 60 curl -sf http://127.0.0.1:28080/readyz ;;
*) die "usage: driver.sh start|stop|restart" ;;
esac
