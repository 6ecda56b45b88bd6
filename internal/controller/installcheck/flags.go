package installcheck

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Flags are the command line of a run (the chart's test pod passes them).
type Flags struct {
	cfg          Config
	podUID       string
	pullPolicy   string
	swapRequest  string
	pullSecrets  []string
	defaultRunID string
}

// AddFlags adds a run's flags to fs. The test pod's namespace, name and
// UID default to $POD_NAMESPACE, $POD_NAME and $POD_UID (the Downward
// API).
func AddFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.cfg.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the probes and the kubelet plugin's pods (the chart's).")
	fs.StringVar(&f.cfg.TestPodName, "pod-name", os.Getenv("POD_NAME"), "The test pod's name: the probes' owner.")
	fs.StringVar(&f.podUID, "pod-uid", os.Getenv("POD_UID"), "The test pod's UID: the probes' owner and the label of this run's probes.")
	fs.StringVar(&f.cfg.Image, "image", "", "The driver's image, which the probes run.")
	fs.StringVar(&f.pullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent), "The probes' image pull policy.")
	fs.StringSliceVar(&f.pullSecrets, "image-pull-secrets", nil, "The probes' image pull Secrets (comma-separated names).")
	fs.StringVar(&f.cfg.ClaimTemplate, "claim-template", "", "The ResourceClaimTemplate of the probe's swap claim.")
	fs.StringVar(&f.swapRequest, "swap-request", "1Mi", "The swap the claim template requests (a quantity).")
	fs.StringVar(&f.cfg.PluginSelector, "plugin-selector", "app.kubernetes.io/component=kubelet-plugin", "Label selector of the kubelet plugin's pods.")
	fs.StringVar(&f.cfg.NodeSelector, "node-selector", "", "Label selector of the nodes to check; every node with a dra.swap ResourceSlice or a kubelet plugin pod when empty.")
	fs.IntVar(&f.cfg.MaxNodes, "max-nodes", 20, fmt.Sprintf("The most nodes checked, the first by name (1 to %d).", MaxMaxNodes))
	fs.DurationVar(&f.cfg.Timeout, "timeout", 3*time.Minute, "How long to wait for the probes.")
	fs.DurationVar(&f.cfg.Poll, "poll-interval", time.Second, "How often the probes are read.")
	f.defaultRunID = fmt.Sprintf("local-%d", time.Now().UnixNano())
	return f
}

// Config is the run the parsed flags describe. Without a test pod UID,
// the run gets an ID of its own.
func (f *Flags) Config() (Config, error) {
	cfg := f.cfg
	cfg.TestPodUID = types.UID(f.podUID)
	cfg.RunID = f.podUID
	if cfg.RunID == "" {
		cfg.RunID = f.defaultRunID
	}
	cfg.PullSecrets = f.pullSecrets
	switch p := corev1.PullPolicy(f.pullPolicy); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		cfg.PullPolicy = p
	default:
		return cfg, fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", f.pullPolicy)
	}
	n, err := ParseQuantity(f.swapRequest)
	if err != nil {
		return cfg, fmt.Errorf("--swap-request: %w", err)
	}
	cfg.RequestBytes = n
	return cfg, cfg.Validate()
}
