// Command dra-swap-kubeletplugin is the dra.swap DRA kubelet plugin: it
// publishes the node's swap as a ResourceSlice and prepares swap claims for
// the kubelet. See docs/design.md.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"

	// client-go's request metrics (rest_client_*, as every Kubernetes
	// component exports them) go to the legacy registry, which the
	// plugin's /metrics serves beside its own.
	_ "k8s.io/component-base/metrics/prometheus/restclient"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/commandline"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/discovery"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/offload"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin/pressure"
)

const name = "dra-swap-kubeletplugin"

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

type options struct {
	cfg            kubeletplugin.Config
	kubeconfig     string
	reserved       string
	defaultRequest string
	qps            float32
	burst          int
	// swapFullPercent and swapFullClearPercent are the swap-full
	// thresholds as percentages (what helm's --set passes as integers).
	swapFullPercent, swapFullClearPercent float64
	offloadMaxPass                        string
}

// run runs the plugin, or prints its version on stdout with --version.
func run(args []string, stdout io.Writer) error {
	o := options{cfg: kubeletplugin.Config{Discovery: discovery.Options{}, Pressure: pressure.DefaultConfig(), Offload: offload.DefaultParams()}}
	if done, err := commandline.Parse(name, o.flagSet(), args, stdout); done || err != nil {
		return err
	}
	if err := o.complete(); err != nil {
		return err
	}
	client, err := o.clients()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	plugin, err := kubeletplugin.New(ctx, o.cfg, client)
	if err != nil {
		return err
	}
	return plugin.Run(ctx)
}

// flagSet defines the command's flags into o.
func (o *options) flagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.StringVar(&o.cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "Name of this node (default $NODE_NAME).")
	fs.StringVar(&o.cfg.DriverName, "driver-name", v1alpha1.DriverName, "DRA driver name.")
	fs.StringVar(&o.cfg.PodUID, "pod-uid", os.Getenv("POD_UID"), "UID of the plugin's pod, for seamless rolling updates (default $POD_UID).")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig file; in-cluster configuration when empty.")
	fs.StringVar(&o.cfg.Discovery.Root, "host-root", "/", "Where the host's root filesystem is visible (/proc, /sys, the kubelet config).")
	fs.StringVar(&o.cfg.Discovery.KubeletConfigPath, "kubelet-config", "/var/lib/kubelet/config.yaml", "Host path of the kubelet's configuration file, read for memorySwap.swapBehavior; empty when the kubelet has none (then only --kubelet-config-dir is read, and without it swapBehavior is published as Unknown).")
	fs.StringVar(&o.cfg.Discovery.KubeletConfigDir, "kubelet-config-dir", "", "Host path of the kubelet's drop-in configuration directory (--config-dir), if any.")
	fs.StringVar(&o.cfg.CDIDir, "cdi-dir", "/var/run/cdi", "Directory for the per-claim CDI specs (one the container runtime reads).")
	fs.StringVar(&o.cfg.HookPath, "hook-path", "/opt/dra-swap/bin/dra-swap-hook", "Host path of the dra-swap-hook binary named in the CDI specs.")
	fs.StringVar(&o.cfg.HookStateDir, "hook-state-dir", "/run/dra-swap/hook", "Host directory where the hook records per-container state (keep it on tmpfs).")
	fs.StringVar(&o.cfg.InstallHookFrom, "install-hook-from", "", "If set, copy this hook binary to --hook-path under --host-root at start-up.")
	fs.StringVar(&o.cfg.PluginDataDir, "plugin-data-dir", draplugin.KubeletPluginsDir+"/"+v1alpha1.DriverName, "Directory for the plugin's socket and checkpoint.")
	fs.StringVar(&o.cfg.RegistrarDir, "registrar-dir", draplugin.KubeletRegistryDir, "The kubelet's plugin registration directory.")
	fs.Float64Var(&o.cfg.Policy.OvercommitRatio, "overcommit-ratio", 1.0, "Swap offered = active swap × this ratio − --reserved.")
	fs.StringVar(&o.reserved, "reserved", "0", "Swap kept back for system daemons (quantity, e.g. 512Mi).")
	fs.StringVar(&o.defaultRequest, "default-request", "1Gi", "Swap granted to a claim whose request names no capacity; capped at the offer.")
	fs.StringSliceVar(&o.cfg.Policy.UnsafeOfferUnder, "unsafe-offer-swap-under", nil, "Kubelet swap behaviors besides NoSwap (LimitedSwap, WorkloadControlledSwap, Unknown) under which the node still offers its swap, comma-separated. "+
		"Unsafe: under them the kubelet gives containers without a claim swap of its own from the same swap, so it is promised twice and a claimed container can be OOM-killed below its claim. "+
		"By default the node offers swap under NoSwap only.")
	fs.DurationVar(&o.cfg.RescanInterval, "rescan-interval", 5*time.Second, "How often the node's swap and kubelet configuration are rediscovered.")
	fs.BoolVar(&o.cfg.AllowCriticalPods, "allow-critical-pods", false, "Let system-node-critical and system-cluster-critical pods use swap.")
	fs.StringVar(&o.cfg.NRISocket, "nri-socket", "/var/run/nri/nri.sock", "The container runtime's NRI socket: the plugin registers there to put swap limits into containers' OCI specs and correct the kubelet's container updates. Empty turns NRI off; a missing socket is waited for.")
	fs.DurationVar(&o.cfg.VerifyInterval, "verify-interval", 10*time.Second, "How often every prepared container's swap limit is read back from its cgroup and restored if something rewrote it.")
	p := &o.cfg.Pressure
	fs.DurationVar(&o.cfg.PressureInterval, "pressure-interval", 5*time.Second, "How often memory pressure (PSI) and swap use are sampled for the swap device's dra.swap/memory-pressure and dra.swap/swap-full taints; 0 turns the taints off.")
	fs.StringVar(&o.cfg.NodePressureFile, "node-pressure-file", "", "The node's memory pressure stall information (PSI) as the plugin sees it, e.g. /proc/pressure/memory: the kernel shows its system-wide PSI in every procfs, a pod's own included. Empty reads /proc/pressure/memory under --host-root. A missing file (PSI off at boot) turns the memory-pressure taint off and is reported; it is no error.")
	fs.Float64Var(&p.PressureSomeThreshold, "pressure-some-threshold", p.PressureSomeThreshold, "Memory pressure taint: set when PSI \"some\" avg10 (percent, the node's or the kubepods cgroup's, whichever is higher) stays at or above this for --pressure-set-after.")
	fs.Float64Var(&p.PressureSomeClear, "pressure-some-clear", p.PressureSomeClear, "Memory pressure taint: cleared when \"some\" avg10 stays below this (and \"full\" below --pressure-full-clear) for --pressure-clear-after.")
	fs.Float64Var(&p.PressureFullThreshold, "pressure-full-threshold", p.PressureFullThreshold, "Memory pressure taint: set when PSI \"full\" avg10 (percent) stays at or above this for --pressure-set-after.")
	fs.Float64Var(&p.PressureFullClear, "pressure-full-clear", p.PressureFullClear, "Memory pressure taint: the \"full\" avg10 below which it may clear.")
	fs.Float64Var(&o.swapFullPercent, "swap-full-percent", p.SwapFullThreshold*100, "Swap-full taint: set when the percentage of the node's swap in use stays at or above this for --pressure-set-after.")
	fs.Float64Var(&o.swapFullClearPercent, "swap-full-clear-percent", p.SwapFullClear*100, "Swap-full taint: cleared when the percentage of swap in use stays below this for --pressure-clear-after.")
	fs.DurationVar(&p.SetAfter, "pressure-set-after", p.SetAfter, "How long a condition must hold before its taint is set.")
	fs.DurationVar(&p.ClearAfter, "pressure-clear-after", p.ClearAfter, "How long a condition must be gone before its taint is cleared.")
	fs.BoolVar(&o.cfg.ClaimUsageMetrics, "claim-usage-metrics", false, "Export dra_swap_claim_swap_used_bytes{claim_namespace,claim}, the swap in use by each prepared claim's containers: one series per claim.")
	fs.DurationVar(&o.cfg.OffloadInterval, "offload-interval", 6*time.Second, "How often the offload loop reads the memory pressure (PSI) of the containers whose claims ask for offload (SwapConfig offload) and has the kernel reclaim a step of their memory into their swap while the stall is within the claim's budget; the stall is measured over this interval. 0 turns offload off: such claims then fail to prepare on this node, and its device's offload attribute is false.")
	fs.Int64Var(&o.cfg.Offload.MaxStepPercent, "offload-max-step-percent", o.cfg.Offload.MaxStepPercent, "The offload loop's largest step, as a percentage of a container's memory.current, taken when its stall is 0 (less the nearer the stall is to half the claim's budget, none from there).")
	fs.StringVar(&o.offloadMaxPass, "offload-max-pass", "256Mi", "The most memory one pass of the offload loop has the kernel reclaim on the node (quantity); the containers past it wait for the next pass.")
	fs.Float32Var(&o.qps, "kube-api-qps", 50, "Queries per second to the API server, for the claim reads of the kubelet's calls and, with a rate limiter of their own, for events and claim status writes.")
	fs.IntVar(&o.burst, "kube-api-burst", 200, "Burst of queries to the API server.")
	fs.StringVar(&o.cfg.MetricsAddress, "metrics-address", "", "Serve Prometheus metrics at http://ADDRESS/metrics, readiness (registered with the kubelet) at /readyz and liveness (the plugin runs) at /healthz; disabled when empty.")
	return fs
}

// complete turns the flags that are not Config fields as they are into
// the Config.
func (o *options) complete() error {
	var err error
	if o.cfg.Policy.ReservedBytes, err = parseBytes("--reserved", o.reserved); err != nil {
		return err
	}
	if o.cfg.Policy.DefaultRequestBytes, err = parseBytes("--default-request", o.defaultRequest); err != nil {
		return err
	}
	if o.cfg.Policy.DefaultRequestBytes < v1alpha1.CapacityStep {
		return fmt.Errorf("--default-request %s must be at least 1Mi", o.defaultRequest)
	}
	o.cfg.Pressure.SwapFullThreshold, o.cfg.Pressure.SwapFullClear = o.swapFullPercent/100, o.swapFullClearPercent/100
	if err := o.cfg.Policy.Validate(); err != nil {
		return fmt.Errorf("what the node offers (--overcommit-ratio, --reserved, --default-request, --unsafe-offer-swap-under): %w", err)
	}
	if o.cfg.OffloadMaxPassBytes, err = parseBytes("--offload-max-pass", o.offloadMaxPass); err != nil {
		return err
	}
	return nil
}

// clients returns the client for the kubelet's calls and sets the
// Config's BackgroundClient.
func (o *options) clients() (kubernetes.Interface, error) {
	restConfig, err := commandline.RESTConfig(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	if o.qps <= 0 || o.burst <= 0 {
		return nil, fmt.Errorf("--kube-api-qps %v and --kube-api-burst %d must be positive", o.qps, o.burst)
	}
	restConfig.QPS, restConfig.Burst = o.qps, o.burst
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	// Each clientset built from a config gets a rate limiter of its own.
	if o.cfg.BackgroundClient, err = kubernetes.NewForConfig(restConfig); err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return client, nil
}

func parseBytes(flag, s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", flag, s, err)
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%s %q must not be negative", flag, s)
	}
	return q.Value(), nil
}
