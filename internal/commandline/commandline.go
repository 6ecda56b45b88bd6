// Package commandline is what the driver's commands share on their command
// line: component-base logging flags (text or JSON, contextual logging)
// and the API client configuration.
package commandline

import (
	"fmt"

	"github.com/spf13/pflag"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // JSON log format
	"k8s.io/klog/v2"
)

// Parse adds the logging flags to fs, parses args, refuses positional
// arguments and applies the logging configuration.
func Parse(fs *pflag.FlagSet, args []string) error {
	logConfig := logsapi.NewLoggingConfiguration()
	gate := featuregate.NewFeatureGate()
	utilruntime.Must(logsapi.AddFeatureGates(gate))
	// Before the logging configuration applies: klog's default logger.
	utilruntime.Must(gate.SetFromMapWithLogger(klog.Background(), map[string]bool{string(logsapi.ContextualLogging): true}))
	logsapi.AddFlags(logConfig, fs)
	fs.Var(gate, "feature-gates", "Logging feature gates: "+fmt.Sprint(gate.KnownFeatures()))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return logsapi.ValidateAndApply(logConfig, gate)
}

// RESTConfig loads kubeconfig, or the in-cluster configuration when it is
// empty.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (use --kubeconfig outside a cluster): %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}
