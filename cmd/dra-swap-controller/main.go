// Command dra-swap-controller labels nodes with their swap behavior and
// pods with their node's topology and swap labels, and serves the
// driver's admission webhooks. One Deployment per cluster; replicas
// elect a leader. See docs/design.md. `dra-swap-controller check` is the
// chart's helm test (internal/controller/installcheck).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/dra-driver-swap/dra-driver-swap/internal/commandline"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/installcheck"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
)

const name = "dra-swap-controller"

// maxCleanupNodes bounds the Nodes --cleanup-node-labels walks through per
// label key: far above any cluster's node count.
const maxCleanupNodes = 100000

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, installcheck.ErrFailed) {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		}
		os.Exit(1)
	}
}

// run runs the controller, or prints its version on stdout with --version.
// With the subcommand check it runs the chart's helm test
// (internal/controller/installcheck) instead.
func run(args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == installcheck.Subcommand {
		return installcheck.Main(args[1:], stdout, "/")
	}
	namespace := os.Getenv("POD_NAMESPACE")
	if namespace == "" {
		namespace = "kube-system"
	}
	var (
		cfg        controller.Config
		kubeconfig string
		selection  string
		nsSelector string
		allowlist  []string
		dnsNames   []string
		qps        float32
		burst      int
	)
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	cleanup := fs.Bool("cleanup-node-labels", false,
		"Remove the labels the controller sets on Nodes ("+strings.Join(podlabels.NodeKeys(), ", ")+") from every Node, and only those, then exit: the chart's post-delete hook runs this when the driver is uninstalled.")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig file; in-cluster configuration when empty.")
	fs.StringVar(&selection, "pod-selection", string(podlabels.SelectSwapClaims),
		"Which pods get topology and swap labels: swap-claims (pods with an allocated dra.swap claim), all (every pod on a node running the driver), or namespaces (pods in namespaces matching --namespace-selector, and pods with swap claims).")
	fs.StringVar(&nsSelector, "namespace-selector", "", "Label selector of namespaces for --pod-selection=namespaces, e.g. swap-labels=enabled.")
	fs.StringSliceVar(&allowlist, "node-label-allowlist", nil, "Extra Node label keys copied onto selected pods (comma-separated). Empty by default; only this flag widens it.")
	fs.BoolVar(&cfg.RemoveWithoutDriver, "remove-node-labels-without-plugin", false,
		"Remove node.kubernetes.io/swap-behavior and dra.swap/capacity from a node when the kubelet plugin no longer publishes for it. Off: the labels stay (as KEP-5425 keeps them on downgrade).")
	fs.Float32Var(&qps, "kube-api-qps", 50, "Queries per second to the API server (label patches and reads).")
	fs.IntVar(&burst, "kube-api-burst", 100, "Burst of queries to the API server.")
	fs.Float32Var(&cfg.WebhookQPS, "webhook-kube-api-qps", 200,
		"Queries per second of the webhooks' own API client (the pod label patch inside the scheduler's binding cycle; the webhooks read only the informer cache), apart from --kube-api-qps: every call answers an admission request.")
	fs.IntVar(&cfg.WebhookBurst, "webhook-kube-api-burst", 400, "Burst of the webhooks' own API client.")
	fs.DurationVar(&cfg.ShutdownDelay, "shutdown-delay", 5*time.Second, "After SIGTERM, keep serving the webhooks this long, not ready, so the Service and the API servers drop this replica before it stops listening (0: stop at once).")
	fs.IntVar(&cfg.Workers, "workers", 4, "Concurrent reconciles per reconciler.")
	fs.BoolVar(&cfg.LeaderElection, "leader-elect", true, "Elect a leader among replicas; only the leader reconciles and rotates the webhook certificate.")
	fs.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", namespace, "Namespace of the leader election Lease (default $POD_NAMESPACE or kube-system).")
	fs.StringVar(&cfg.LeaderElectionID, "leader-election-id", "dra-swap-controller", "Name of the leader election Lease.")
	fs.StringVar(&cfg.OwnerDeployment, "owner-deployment", "",
		"The controller's Deployment in $POD_NAMESPACE: the leader election Lease and the self-managed webhook certificate Secret get an ownerReference to it, so that deleting it (helm uninstall) deletes them. None when empty.")
	fs.BoolVar(&cfg.DisableWebhooks, "disable-webhooks", false, "Do not serve the admission webhooks (labels then come from the reconciler only).")
	fs.StringVar(&cfg.WebhookHost, "webhook-host", "", "Address the webhook server listens on (all when empty).")
	fs.IntVar(&cfg.WebhookPort, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&cfg.CertDir, "tls-cert-dir", "", "Directory with an admin-supplied tls.crt and tls.key (for example a cert-manager Secret), reloaded on change. When empty the controller keeps its own CA in --webhook-secret and injects it into the webhook configurations.")
	fs.StringVar(&cfg.Cert.SecretNamespace, "webhook-secret-namespace", namespace, "Namespace of the Secret holding the self-managed CA and certificate.")
	fs.StringVar(&cfg.Cert.SecretName, "webhook-secret", "dra-swap-controller-webhook-tls", "Secret holding the self-managed CA and certificate.")
	fs.StringSliceVar(&dnsNames, "webhook-dns-names", []string{"dra-swap-controller." + namespace + ".svc"}, "DNS names of the self-managed certificate (the webhook Service's name).")
	fs.StringSliceVar(&cfg.Cert.MutatingWebhookConfigurations, "mutating-webhook-configuration", nil, "MutatingWebhookConfigurations whose caBundle the controller keeps current (the driver installs none).")
	fs.StringSliceVar(&cfg.Cert.ValidatingWebhookConfigurations, "validating-webhook-configuration", []string{"dra-swap"}, "ValidatingWebhookConfigurations whose caBundle the controller keeps current.")
	fs.DurationVar(&cfg.CertCheckInterval, "cert-check-interval", time.Minute, "How often the certificate is checked and, when due, rotated.")
	fs.StringVar(&cfg.MetricsAddress, "metrics-address", ":8080", "Serve Prometheus metrics at http://ADDRESS/metrics; 0 disables.")
	fs.StringVar(&cfg.HealthAddress, "health-address", ":8081", "Serve /healthz and /readyz; 0 disables.")

	if done, err := commandline.Parse(name, fs, args, stdout); done || err != nil {
		return err
	}
	cfg.Policy = podlabels.Policy{Allowlist: trimmed(allowlist), Selection: podlabels.Selection(selection)}
	if nsSelector != "" {
		sel, err := labels.Parse(nsSelector)
		if err != nil {
			return fmt.Errorf("--namespace-selector %q: %w", nsSelector, err)
		}
		cfg.Policy.NamespaceSelector = sel
	}
	if err := cfg.Policy.Validate(); err != nil {
		return err
	}
	cfg.Cert.DNSNames = trimmed(dnsNames)

	restConfig, err := commandline.RESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = qps, burst
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	ctrl.SetLogger(logger)
	ctx = klog.NewContext(ctx, logger)
	if *cleanup {
		client, err := kubernetes.NewForConfig(restConfig)
		if err != nil {
			return fmt.Errorf("create client: %w", err)
		}
		n, err := controller.RemoveNodeLabels(ctx, client, maxCleanupNodes)
		if err != nil {
			return fmt.Errorf("remove the driver's node labels: %w", err)
		}
		logger.Info("Removed the driver's node labels", "keys", podlabels.NodeKeys(), "nodes", n)
		return nil
	}
	cfg.OwnerNamespace = namespace
	if limit := softMemoryLimit("/sys/fs/cgroup", os.Getenv); limit > 0 {
		debug.SetMemoryLimit(limit)
		logger.Info("Soft memory limit set to two fifths of the container's", "bytes", limit)
	}
	return controller.Run(ctx, restConfig, cfg)
}

func trimmed(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
