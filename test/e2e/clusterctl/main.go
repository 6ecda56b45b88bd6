// Command clusterctl does the API steps of hack/cluster/up.sh and
// driver.sh: waiting for the node, labelling it, creating the driver's
// namespace and its image pull Secret, and waiting for the driver's
// ResourceSlice and node labels. It reads CLUSTER_DIR/env like the e2e tests.
// Its guest-run runs and judges the emulated guest for hack/guest/run.sh
// (package guestrun).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/guestrun"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: clusterctl node-ready|setup|namespace NAME|pull-secret NAMESPACE NAME DOCKER-CONFIG|driver-ready|embed-kubeconfig KUBECONFIG|guest-run FLAGS -- QEMU...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "guest-run":
		os.Exit(guestRun(os.Args[2:]))
	case "embed-kubeconfig":
		// The kubeconfig with its files put in, on stdout.
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: clusterctl embed-kubeconfig KUBECONFIG")
			os.Exit(2)
		}
		out, err := cluster.EmbeddedKubeconfig(os.Args[2])
		if err == nil {
			_, err = os.Stdout.Write(out)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "clusterctl embed-kubeconfig: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if err := run(context.Background(), os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "clusterctl %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd string, args []string) error {
	c, err := cluster.Load("")
	if err != nil {
		return err
	}
	switch cmd {
	case "node-ready":
		return poll(ctx, 3*time.Minute, "node "+c.Node+" Ready", func(ctx context.Context) (bool, error) {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, c.Node, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
	case "setup":
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{
			corev1.LabelTopologyZone: c.Env["NODE_ZONE"], corev1.LabelTopologyRegion: c.Env["NODE_REGION"]}}})
		if err != nil {
			return err
		}
		if c.Env["NODE_ZONE"] == "" || c.Env["NODE_REGION"] == "" {
			return fmt.Errorf("the cluster's env file names no NODE_ZONE and NODE_REGION")
		}
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, c.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label node: %w", err)
		}
		return poll(ctx, time.Minute, "the default ServiceAccount", func(ctx context.Context) (bool, error) {
			_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		})
	case "namespace":
		// The driver's namespace: its kubelet plugin mounts host paths,
		// which only the privileged Pod Security level allows.
		if len(args) != 1 {
			return fmt.Errorf("usage: namespace NAME")
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: args[0], Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "privileged",
			"pod-security.kubernetes.io/warn":    "privileged",
		}}}
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	case "pull-secret":
		// An image pull Secret holding a docker config file, as
		// `kubectl create secret docker-registry --from-file` makes it;
		// replaced if there is one.
		if len(args) != 3 {
			return fmt.Errorf("usage: pull-secret NAMESPACE NAME DOCKER-CONFIG")
		}
		config, err := os.ReadFile(args[2])
		if err != nil {
			return err
		}
		if !json.Valid(config) {
			return fmt.Errorf("%s is not JSON", args[2])
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: args[0], Name: args[1]},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: config},
		}
		secrets := c.Client.CoreV1().Secrets(args[0])
		_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
		}
		return err
	case "driver-ready":
		err := poll(ctx, 2*time.Minute, "the dra.swap ResourceSlice with a swap device", func(ctx context.Context) (bool, error) {
			slices, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, s := range slices.Items {
				if s.Spec.Driver == "dra.swap" && s.Spec.Pool.Name == c.Node && len(s.Spec.Devices) == 1 &&
					s.Spec.Devices[0].Attributes["topology.kubernetes.io/zone"].StringValue != nil {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
		return poll(ctx, 2*time.Minute, "the controller: swap-behavior node label and webhook CA injected", func(ctx context.Context) (bool, error) {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, c.Node, metav1.GetOptions{})
			if err != nil || node.Labels[v1alpha1.LabelSwapBehavior] == "" {
				return false, nil
			}
			list, err := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, m := range list.Items {
				for _, w := range m.Webhooks {
					if w.Name == "reservation.dra.swap" && len(w.ClientConfig.CABundle) > 0 {
						return true, nil
					}
				}
			}
			return false, nil
		})
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// poll waits for cond, up to timeout times E2E_TIMEOUT_SCALE.
func poll(ctx context.Context, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) error {
	timeout = cluster.Scaled(timeout)
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, cond); err != nil {
		return fmt.Errorf("waiting %v for %s: %w", timeout, what, err)
	}
	fmt.Printf("%s after %.1fs\n", what, time.Since(start).Seconds())
	return nil
}

// guestRun runs QEMU as hack/guest/run.sh configured it and exits with
// the guest's result (package guestrun says the codes).
func guestRun(args []string) int {
	fs := flag.NewFlagSet("guest-run", flag.ContinueOnError)
	cfg := guestrun.Config{Log: os.Stderr, Out: os.Stdout}
	fs.StringVar(&cfg.Share, "share", "", "the directory shared with the guest")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "how long the run may take")
	fs.DurationVar(&cfg.Stall, "stall", 4*time.Minute, "how long the guest's heartbeat may stand still")
	fs.StringVar(&cfg.Monitor, "monitor", "", "QEMU's QMP socket, for the virtual CPUs' state on a stall")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Command = fs.Args()
	if cfg.Share == "" || len(cfg.Command) == 0 || cfg.Timeout <= 0 || cfg.Stall <= 0 {
		fmt.Fprintln(os.Stderr, "usage: clusterctl guest-run -share DIR [-timeout D] [-stall D] [-monitor SOCKET] -- QEMU ARGS...")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return guestrun.Run(ctx, cfg)
}
