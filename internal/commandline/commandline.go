// Package commandline is what the driver's commands share on their command
// line: --version, component-base logging flags (text or JSON, contextual
// logging), the start's log line and the API client configuration.
package commandline

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // JSON log format
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/version"
)

// Parse adds --version and the logging flags to fs, parses args and
// refuses positional arguments. With --version it prints the version line
// of command name on stdout and returns done; otherwise it applies the
// logging configuration and logs the start with the build's version.
func Parse(name string, fs *pflag.FlagSet, args []string, stdout io.Writer) (done bool, err error) {
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	logConfig := logsapi.NewLoggingConfiguration()
	gate := featuregate.NewFeatureGate()
	utilruntime.Must(logsapi.AddFeatureGates(gate))
	utilruntime.Must(gate.SetFromMapWithLogger(klog.Background(), map[string]bool{string(logsapi.ContextualLogging): true}))
	logsapi.AddFlags(logConfig, fs)
	fs.Var(gate, "feature-gates", "Logging feature gates: "+fmt.Sprint(gate.KnownFeatures()))
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	build := version.Get()
	if *showVersion {
		_, err := fmt.Fprintln(stdout, build.Line(name))
		return true, err
	}
	if err := logsapi.ValidateAndApply(logConfig, gate); err != nil {
		return false, err
	}
	klog.Background().Info("Starting "+name, "version", build.Version, "revision", build.Revision, "goVersion", build.GoVersion)
	return false, nil
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
