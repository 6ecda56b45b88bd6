#!/usr/bin/env bash
# driver.sh install|upgrade TAG|uninstall|values: the dra.swap driver in the
# local cluster, installed the way users install it: `helm install` of
# deployments/helm/dra-driver-swap with the images the cluster's registry
# serves. Only the values that differ for this cluster are set: its host
# paths live under CLUSTER_DIR instead of /var/lib/kubelet, /var/run/cdi,
# /opt and /run; the image comes from the registry's private path, pulled
# with the Secret PULL_SECRET (lib.sh).
source "$(dirname "$0")/lib.sh"
CHART="${CHART:-$REPO/deployments/helm/dra-driver-swap}"
RELEASE=dra-driver-swap
NAMESPACE=$DRIVER_NAMESPACE
HELM="$BIN/helm"
export KUBECONFIG="$CLUSTER_DIR/kubeconfig/admin.kubeconfig"
# helm's credentials for the registry (up.sh wrote them).
export DOCKER_CONFIG="$DOCKER_CONFIG_DIR"
# The chart: the checkout's (CHART), or the release's from the cluster's
# registry (lib.sh: CHART_REF, as the running cluster's node has it).
chart=("$CHART")
[ -z "$CHART_REF" ] || chart=("$CHART_REF" --version "$DRIVER_VERSION" --plain-http)

values() {
	cat <<VALUES
# What this cluster sets; every other value is the chart's default.
image:
  repository: $DRIVER_REPOSITORY/dra-driver-swap
  tag: "$DRIVER_VERSION"
imagePullSecrets:
- name: $PULL_SECRET
kubeletPlugin:
  kubeletRootDir: $CLUSTER_DIR/kubelet
  kubeletConfig:
    path: $CLUSTER_DIR/kubelet/config.yaml
  cdiDir: $CLUSTER_DIR/cdi
  hookDir: $CLUSTER_DIR/bin
  hookStateDir: $RUN/hook
  nri:
    socketPath: $NRI_SOCKET
  # The e2e suite adds and removes swap and waits for the new offer.
  rescanInterval: 2s
  # What a request without a capacity gets (TestExtendedResourceRequest:
  # an extended-resource request carries none).
  defaultRequest: 200Mi
  # Off: the suite's swapping must not taint the node for the next test;
  # TestPressureTaints turns them on with short dwell times (driver.sh set).
  pressure:
    interval: 0s
  # TestOffload sees a container's cold memory offloaded within seconds:
  # a pass every 2s, steps of up to 10% of memory.current (the chart's
  # defaults, 6s and 1, with OFFLOAD_INTERVAL and OFFLOAD_MAX_STEP_PERCENT).
  offload:
    interval: ${OFFLOAD_INTERVAL:-2s}
    maxStepPercent: ${OFFLOAD_MAX_STEP_PERCENT:-10}
  logVerbosity: 4
controller:
  logVerbosity: 4
VALUES
}

namespace() {
	# The plugin needs hostPath volumes, which only the privileged Pod
	# Security level allows; the namespace gets that level and nothing
	# runs in it but the driver.
	"$BIN/e2e-clusterctl" namespace "$NAMESPACE"
	# The nodes pull the driver's image with the registry's credentials.
	"$BIN/e2e-clusterctl" pull-secret "$NAMESPACE" "$PULL_SECRET" "$DOCKER_CONFIG_DIR/config.json"
}

case "${1:-}" in
install | start)
	require_root
	values > "$CLUSTER_DIR/values.yaml"
	namespace
	log "helm install $RELEASE from ${chart[*]} (image $DRIVER_REPOSITORY/dra-driver-swap:$DRIVER_VERSION)"
	begin=$SECONDS
	"$HELM" upgrade --install "$RELEASE" "${chart[@]}" --namespace "$NAMESPACE" \
		--values "$CLUSTER_DIR/values.yaml" --wait --timeout "$((5 * TIMEOUT_SCALE))m"
	log "driver installed and ready in $((SECONDS - begin))s"
	;;
upgrade)
	require_root
	[ -n "${2:-}" ] || die "usage: driver.sh upgrade TAG"
	"$HELM" upgrade "$RELEASE" "${chart[@]}" --namespace "$NAMESPACE" --reuse-values --set-string "image.tag=$2" \
		--wait --timeout "$((5 * TIMEOUT_SCALE))m"
	;;
set)
	require_root
	[ -n "${2:-}" ] || die "usage: driver.sh set KEY=VALUE..."
	shift
	sets=()
	for kv in "$@"; do sets+=(--set "$kv"); done
	"$HELM" upgrade "$RELEASE" "${chart[@]}" --namespace "$NAMESPACE" --reuse-values "${sets[@]}" \
		--wait --timeout "$((5 * TIMEOUT_SCALE))m"
	;;
uninstall | stop)
	require_root
	"$HELM" uninstall "$RELEASE" --namespace "$NAMESPACE" --wait --timeout "$((3 * TIMEOUT_SCALE))m"
	;;
values) values ;;
*) die "usage: driver.sh install|upgrade TAG|set KEY=VALUE...|uninstall|values" ;;
esac
