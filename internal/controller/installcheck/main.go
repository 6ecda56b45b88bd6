package installcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/dra-driver-swap/dra-driver-swap/internal/commandline"
)

// Command is how the chart runs the check: the controller's binary with
// the subcommand check (a command of its own would add client-go's
// weight to the image every node pulls).
const (
	Command    = "/dra-swap-controller"
	Subcommand = "check"
)

// terminationMessageLimit is the most bytes the kubelet keeps of a
// container's termination message.
const terminationMessageLimit = 4096

// ErrFailed: a node failed the check (the output says which and why).
var ErrFailed = errors.New("the check failed")

// Main runs the check with args (after the subcommand), printing the
// outcome on stdout, or the probe with --probe, which reads files under
// root ("/": the container's own).
func Main(args []string, stdout io.Writer, root string) error {
	name := Command[1:] + " " + Subcommand
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	probe := fs.Bool("probe", false, "Run as the probe: write this container's cgroup swap limit and DRA_SWAP_LIMIT_BYTES as JSON to --termination-log and stdout, and exit.")
	terminationLog := fs.String("termination-log", "/dev/termination-log", "Where the result goes for the pod's status (the container's terminationMessagePath); \"\" for nowhere.")
	kubeconfig := fs.String("kubeconfig", "", "Kubeconfig file; in-cluster configuration when empty.")
	qps := fs.Float32("kube-api-qps", 20, "Queries per second to the API server.")
	burst := fs.Int("kube-api-burst", 40, "Burst of queries to the API server.")
	flags := AddFlags(fs)
	if done, err := commandline.Parse(name, fs, args, stdout); done || err != nil {
		return err
	}

	if *probe {
		data := ReadSelf(root, os.LookupEnv).Encode()
		_, werr := fmt.Fprintf(stdout, "%s\n", data)
		if err := writeTerminationLog(*terminationLog, data); err != nil {
			// The pod's FallbackToLogsOnError then takes the report from
			// the log: exit non-zero.
			return fmt.Errorf("%w (the report is the log's last line)", err)
		}
		return werr
	}

	cfg, err := flags.Config()
	if err != nil {
		return err
	}
	restConfig, err := commandline.RESTConfig(*kubeconfig)
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = *qps, *burst
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	res, err := Run(ctx, client, cfg)
	if err != nil {
		msg := "dra.swap helm test: cannot run: " + err.Error()
		fmt.Fprintln(stdout, msg)
		_ = writeTerminationLog(*terminationLog, []byte(truncate(msg, terminationMessageLimit)))
		return err
	}
	if err := res.Write(stdout); err != nil {
		return err
	}
	if err := writeTerminationLog(*terminationLog, []byte(res.Brief(terminationMessageLimit))); err != nil {
		klog.FromContext(ctx).Error(err, "Writing the termination message")
	}
	if !res.Passed() {
		return ErrFailed
	}
	return nil
}

// writeTerminationLog writes data to path ("" writes nothing).
func writeTerminationLog(path string, data []byte) error {
	if path == "" {
		return nil
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write the termination message: %w", err)
	}
	return nil
}
