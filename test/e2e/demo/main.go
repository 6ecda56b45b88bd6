// Command demo runs the README's story on the local cluster: two pods with
// a 128Mi memory limit allocate 200MiB, one with a 300Mi swap claim and one
// without, and a table shows what each got.
package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

const (
	ns       = "swap-demo"
	swapSize = 300 << 20
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	c, err := cluster.Load("")
	if err != nil {
		return err
	}
	if err := reset(ctx, c); err != nil {
		return err
	}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.SwapTemplate(ns, "swap-300mi", "", swapSize), metav1.CreateOptions{}); err != nil {
		return err
	}
	pods := []*corev1.Pod{
		c.WorkloadPod(ns, "with-swap-claim", map[string]string{"swap": "swap-300mi"},
			cluster.Container{Name: "worker", Claims: []string{"swap"}, AllocMiB: 200, MemLimit: "128Mi"}),
		c.WorkloadPod(ns, "without-claim", nil,
			cluster.Container{Name: "worker", AllocMiB: 200, MemLimit: "128Mi"}),
	}
	fmt.Println("Each pod: memory limit 128Mi, allocates and touches 200MiB.")
	for _, p := range pods {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tSWAP CLAIM\tCGROUP SWAP LIMIT\tDRA_SWAP_LIMIT_BYTES\tSWAP USED\tOUTCOME")
	for _, p := range pods {
		done, err := waitFinished(ctx, c, p.Name)
		if err != nil {
			return err
		}
		claim := "-"
		if len(done.Spec.ResourceClaims) > 0 {
			claim = "300Mi"
		}
		outcome := string(done.Status.Phase)
		if reason := cluster.TerminatedReason(done, "worker"); reason != "" {
			outcome += " (" + reason + ")"
		}
		limit, env, used := "-", "-", "-"
		if r, ok, _ := c.Report(done, "worker", "START"); ok {
			limit, env = bytes(r.SwapLimitBytes), r.EnvSwapLimit
			if env == "" {
				env = "-"
			}
		}
		if r, ok, _ := c.Report(done, "worker", "RESULT"); ok {
			used = bytes(r.SwapUsageBytes)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", done.Name, claim, limit, env, used, outcome)
	}
	return w.Flush()
}

// reset deletes an earlier demo's namespace and creates a fresh one.
func reset(ctx context.Context, c *cluster.Cluster) error {
	err := c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil {
			return false, nil // still terminating
		}
		return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		}) == nil, nil
	})
}

func waitFinished(ctx context.Context, c *cluster.Cluster, name string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return cluster.Finished(p), nil
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s did not finish: %w (kubectl --kubeconfig %s -n %s describe pod %s)", name, err, c.Env["KUBECONFIG"], ns, name)
	}
	return pod, nil
}

func bytes(b int64) string {
	if b < 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.1fMi", float64(b)/(1<<20))
}
