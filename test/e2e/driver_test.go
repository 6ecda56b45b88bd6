package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// The driver as hack/cluster/driver.sh installs it with helm. The tests
// that the conformance suite runs use c.DriverNamespace, the namespace
// they found the driver in.
const (
	driverNamespace = cluster.DefaultDriverNamespace
	driverRelease   = "dra-driver-swap"
)

// driverWorkloads are the chart's DaemonSet (the kubelet plugin) and
// Deployment (the controller); the chart makes one of each.
func (c *env) driverWorkloads(t *testing.T) (*appsv1.DaemonSet, *appsv1.Deployment) {
	t.Helper()
	ctx := context.Background()
	chart := metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=dra-driver-swap"}
	dss, err := c.client.AppsV1().DaemonSets(c.DriverNamespace).List(ctx, chart)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := c.client.AppsV1().Deployments(c.DriverNamespace).List(ctx, chart)
	if err != nil {
		t.Fatal(err)
	}
	if len(dss.Items) != 1 || len(deps.Items) != 1 {
		t.Fatalf("namespace %s: want one DaemonSet and one Deployment of the chart, got %d and %d", c.DriverNamespace, len(dss.Items), len(deps.Items))
	}
	return &dss.Items[0], &deps.Items[0]
}

// pluginPods are the kubelet plugin's pods, oldest first.
// pluginPods are the kubelet plugin's pods on this suite's node (in the
// two-node cluster the DaemonSet has one on each).
func (c *env) pluginPods(t *testing.T) []corev1.Pod {
	t.Helper()
	return c.pluginPodsOn(t, c.node)
}

func (c *env) pluginPodsOn(t *testing.T, node string) []corev1.Pod {
	t.Helper()
	ds, _ := c.driverWorkloads(t)
	return c.podsOf(t, metav1.FormatLabelSelector(ds.Spec.Selector), "spec.nodeName="+node)
}

// podsOf lists the driver's pods matching selector (and the field
// selector, if given), oldest first.
func (c *env) podsOf(t *testing.T, selector string, fieldSelector ...string) []corev1.Pod {
	t.Helper()
	list, err := c.client.CoreV1().Pods(c.DriverNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector, FieldSelector: strings.Join(fieldSelector, ",")})
	if err != nil {
		t.Fatal(err)
	}
	pods := list.Items
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// restartPlugin deletes the kubelet plugin's pod, as a node drain or a
// crash would, and waits until its replacement is ready (registered with
// the kubelet).
func (c *env) restartPlugin(t *testing.T) {
	t.Helper()
	old := c.pluginPods(t)
	if len(old) != 1 {
		t.Fatalf("want one kubelet plugin pod, got %d", len(old))
	}
	if err := c.client.CoreV1().Pods(c.DriverNamespace).Delete(context.Background(), old[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitPluginReady(t, func(p *corev1.Pod) bool { return p.UID != old[0].UID })
}

// waitPluginReady waits until exactly one plugin pod runs, it satisfies
// cond and it is ready.
func (c *env) waitPluginReady(t *testing.T, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		pods := c.pluginPods(t)
		if len(pods) != 1 || pods[0].DeletionTimestamp != nil || !cond(&pods[0]) || !podReady(&pods[0]) {
			return false, nil
		}
		got = &pods[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for a ready kubelet plugin pod: %v\n%s", err, c.driverDiagnostics())
	}
	return got
}

// driverScript runs hack/cluster/driver.sh (helm) and returns its output.
func (c *env) driverScript(t *testing.T, args ...string) string {
	t.Helper()
	out := c.script(t, "driver.sh", args...)
	if len(args) > 0 && (args[0] == "install" || args[0] == "upgrade" || args[0] == "set") {
		c.waitWebhookServing(t)
	}
	return out
}

// helm runs the helm binary the cluster scripts use, on the cluster.
func (c *env) helm(t *testing.T, args ...string) string {
	t.Helper()
	c.requireNode(t, "helm with the cluster's files")
	bin := filepath.Join(c.repoRoot, "_output", "bin", "helm")
	cmd := exec.Command(bin, append(args, "--namespace", driverNamespace)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Env["KUBECONFIG"])
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// driverDiagnostics describes the driver's pods (what `kubectl describe`
// shows: node, images, conditions, container states and restarts, events)
// and prints the tail of each container's log.
func (c *env) driverDiagnostics() string {
	ctx := context.Background()
	var b strings.Builder
	pods, err := c.client.CoreV1().Pods(c.DriverNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("list driver pods: %v", err)
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "=== driver pod %s/%s (uid %s) on %q: phase %s, created %s, deleting %v\n",
			p.Namespace, p.Name, p.UID, p.Spec.NodeName, p.Status.Phase, p.CreationTimestamp.Format(time.RFC3339), p.DeletionTimestamp != nil)
		fmt.Fprintf(&b, "  conditions: %s\n", conditions(p.Status.Conditions))
		for _, s := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  container %s: image %s (%s), ready %v, restarts %d, %s\n", s.Name, s.Image, s.ImageID, s.Ready, s.RestartCount, containerState(s))
			if s.LastTerminationState.Terminated != nil {
				l := s.LastTerminationState.Terminated
				fmt.Fprintf(&b, "    last terminated: %s exit %d: %s\n", l.Reason, l.ExitCode, l.Message)
			}
		}
		events, _ := c.client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
		for _, e := range events.Items {
			fmt.Fprintf(&b, "  event %s %s (x%d): %s\n", e.Type, e.Reason, e.Count, e.Message)
		}
		for _, s := range p.Spec.Containers {
			fmt.Fprintf(&b, "  --- last 40 log lines of container %s\n%s\n", s.Name, c.containerLogTail(&p, s.Name, 40))
		}
	}
	for _, kind := range []string{"DaemonSet", "Deployment"} {
		var status string
		switch kind {
		case "DaemonSet":
			list, _ := c.client.AppsV1().DaemonSets(c.DriverNamespace).List(ctx, metav1.ListOptions{})
			for _, d := range list.Items {
				status += fmt.Sprintf("%s: desired %d, updated %d, ready %d, available %d; ", d.Name, d.Status.DesiredNumberScheduled, d.Status.UpdatedNumberScheduled, d.Status.NumberReady, d.Status.NumberAvailable)
			}
		case "Deployment":
			list, _ := c.client.AppsV1().Deployments(c.DriverNamespace).List(ctx, metav1.ListOptions{})
			for _, d := range list.Items {
				status += fmt.Sprintf("%s: replicas %d, updated %d, ready %d, available %d; ", d.Name, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas)
			}
		}
		fmt.Fprintf(&b, "%s %s\n", kind, status)
	}
	return b.String()
}

// containerLogTail reads a container's log files on the node (all
// restarts), the last n lines.
func (c *env) containerLogTail(p *corev1.Pod, container string, n int) string {
	if c.Portable {
		data, err := c.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, TailLines: ptr.To(int64(n))}).DoRaw(context.Background())
		if err != nil {
			return fmt.Sprintf("(logs: %v)", err)
		}
		return strings.TrimRight(string(data), "\n")
	}
	files := c.ContainerLogFiles(p, container)
	if len(files) == 0 {
		return "(no log files)"
	}
	var out []string
	for _, f := range files {
		out = append(out, "["+filepath.Base(f)+"]", tail(f, n))
	}
	return strings.Join(out, "\n")
}

// scaleController sets the controller Deployment's replicas and waits
// until that many pods are ready (0: until none is left).
func (c *env) scaleController(t *testing.T, replicas int32) {
	t.Helper()
	ctx := context.Background()
	_, dep := c.driverWorkloads(t)
	scale, err := c.client.AppsV1().Deployments(c.DriverNamespace).GetScale(ctx, dep.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = replicas
	if _, err := c.client.AppsV1().Deployments(c.DriverNamespace).UpdateScale(ctx, dep.Name, scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	selector := metav1.FormatLabelSelector(dep.Spec.Selector)
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		pods := c.podsOf(t, selector)
		if replicas == 0 {
			return len(pods) == 0, nil
		}
		ready := 0
		for i := range pods {
			if podReady(&pods[i]) && pods[i].DeletionTimestamp == nil {
				ready++
			}
		}
		d, err := c.client.AppsV1().Deployments(c.DriverNamespace).Get(ctx, dep.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return int32(ready) == replicas && d.Status.AvailableReplicas == replicas, nil
	})
	if err != nil {
		t.Fatalf("scaling the controller to %d: %v\n%s", replicas, err, c.driverDiagnostics())
	}
	if replicas > 0 {
		c.waitWebhookServing(t)
	}
}

// waitWebhookServing waits until the API server reaches the controller's
// validating webhook through its Service: a server-side dry run of a claim
// carrying dra.swap configuration is admitted. Ready pods are not enough:
// the Service's EndpointSlice and kube-proxy's rules follow them by a few
// seconds (more on the emulated node), and until then the API server's
// call is refused and, with failurePolicy Fail, so is the claim.
func (c *env) waitWebhookServing(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var last error
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		_, last = c.client.ResourceV1().ResourceClaims(c.DriverNamespace).Create(ctx,
			configClaim(c.DriverNamespace, "webhook-probe", validSwapConfig), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("the config webhook does not admit a valid claim: %v\n%s", last, c.driverDiagnostics())
	}
	t.Logf("the config webhook served %s after the controller was ready", time.Since(start).Round(10*time.Millisecond))
}

// waitGone polls until get reports NotFound.
func waitGone(ctx context.Context, timeout time.Duration, get func(context.Context) error) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, cluster.Scaled(timeout), true, func(ctx context.Context) (bool, error) {
		err := get(ctx)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, nil
	})
}
