// Package e2e tests the driver on a real single-node cluster (kube-apiserver,
// kube-scheduler, kube-controller-manager, kubelet, containerd, runc and the
// kernel's cgroups) brought up by hack/cluster/up.sh. Run with `make e2e`.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

const (
	mi = int64(1) << 20
	// Images built by test/e2e/images and imported into containerd.
	workloadImage = "registry.local/swap-workload:v1"
)

// cluster is the running local cluster, described by CLUSTER_DIR/env.
type cluster struct {
	dir      string
	node     string
	client   kubernetes.Interface
	repoRoot string
	env      map[string]string
}

func loadCluster(t *testing.T) *cluster {
	t.Helper()
	dir := os.Getenv("CLUSTER_DIR")
	if dir == "" {
		dir = "/var/lib/dra-swap-e2e"
	}
	data, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatalf("no running cluster (%v): bring one up with `make e2e` or hack/cluster/up.sh", err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "export ")
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = strings.Trim(v, `"'`)
		}
	}
	config, err := clientcmd.BuildConfigFromFlags("", env["KUBECONFIG"])
	if err != nil {
		t.Fatalf("kubeconfig %q: %v", env["KUBECONFIG"], err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	return &cluster{dir: dir, node: env["NODE_NAME"], client: client, repoRoot: filepath.Join(wd, "..", ".."), env: env}
}

// namespace creates a namespace for one test and deletes it afterwards,
// dumping diagnostics first when the test failed.
func (c *cluster) namespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := "e2e-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-") + "-" + rand.String(4)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pods need the namespace's default ServiceAccount, made by the controller-manager.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no default ServiceAccount in %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.diagnose(t, name)
		}
		c.deleteNamespace(t, name)
	})
	return name
}

func (c *cluster) deleteNamespace(t *testing.T, ns string) {
	ctx := context.Background()
	_ = c.client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	if err := c.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Logf("delete namespace %s: %v", ns, err)
	}
}

// diagnose prints what a person needs to see why a test failed: pod
// phases and events, claim status, and the plugin's and kubelet's logs.
func (c *cluster) diagnose(t *testing.T, ns string) {
	ctx := context.Background()
	var b strings.Builder
	pods, _ := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: phase %s, conditions %v\n", p.Name, p.Status.Phase, conditions(p.Status.Conditions))
		for _, s := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  container %s: %s\n", s.Name, containerState(s))
		}
	}
	events, _ := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	for _, e := range events.Items {
		fmt.Fprintf(&b, "event %s/%s %s %s: %s\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
	}
	claims, _ := c.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	for _, cl := range claims.Items {
		status, _ := json.Marshal(cl.Status)
		fmt.Fprintf(&b, "claim %s: %s\n", cl.Name, status)
	}
	for _, component := range []string{"dra-swap-kubeletplugin", "kubelet", "kube-scheduler", "containerd"} {
		fmt.Fprintf(&b, "--- last lines of %s.log\n%s\n", component, tail(filepath.Join(c.dir, "logs", component+".log"), 40))
	}
	t.Log("diagnostics:\n" + b.String())
}

func conditions(cs []corev1.PodCondition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, ", ")
}

func containerState(s corev1.ContainerStatus) string {
	switch {
	case s.State.Terminated != nil:
		return fmt.Sprintf("terminated %s exit %d: %s", s.State.Terminated.Reason, s.State.Terminated.ExitCode, s.State.Terminated.Message)
	case s.State.Waiting != nil:
		return fmt.Sprintf("waiting %s: %s", s.State.Waiting.Reason, s.State.Waiting.Message)
	case s.State.Running != nil:
		return "running"
	}
	return "unknown"
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// swapTemplate creates a ResourceClaimTemplate asking for bytes of swap
// from class (dra.swap when empty).
func (c *cluster) swapTemplate(t *testing.T, ns, name, class string, bytes int64) {
	t.Helper()
	if class == "" {
		class = "dra.swap"
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "swap", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: class,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					"swap": *resource.NewQuantity(bytes, resource.BinarySI),
				}},
			}}},
		}}},
	}
	if _, err := c.client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// ctr describes one workload container of a test pod.
type ctr struct {
	name     string
	claims   []string // pod-level claim names
	allocMiB int
	memLimit string // "" for none
	cpu      string // requests = limits when set (Guaranteed with memLimit)
	hold     int    // seconds to stay alive after the allocation
}

// workloadPod builds a pod of workload containers; templates maps the
// pod-level claim names to ResourceClaimTemplates.
func workloadPod(ns, name string, templates map[string]string, containers ...ctr) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	for _, claim := range slices.Sorted(maps.Keys(templates)) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: claim, ResourceClaimTemplateName: ptr.To(templates[claim])})
	}
	for _, c := range containers {
		k := corev1.Container{
			Name:            c.name,
			Image:           workloadImage,
			ImagePullPolicy: corev1.PullNever,
			Env: []corev1.EnvVar{
				{Name: "ALLOC_MIB", Value: strconv.Itoa(c.allocMiB)},
				{Name: "HOLD_SECONDS", Value: strconv.Itoa(c.hold)},
			},
		}
		if c.memLimit != "" {
			k.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(c.memLimit)}
			if c.cpu != "" {
				k.Resources.Limits[corev1.ResourceCPU] = resource.MustParse(c.cpu)
				k.Resources.Requests = k.Resources.Limits.DeepCopy()
			}
		}
		for _, claim := range c.claims {
			k.Resources.Claims = append(k.Resources.Claims, corev1.ResourceClaim{Name: claim})
		}
		p.Spec.Containers = append(p.Spec.Containers, k)
	}
	return p
}

func (c *cluster) createPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// waitPod waits until cond holds for the pod and returns it.
func (c *cluster) waitPod(t *testing.T, ns, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		phase := "<none>"
		if last != nil {
			phase = string(last.Status.Phase)
		}
		t.Fatalf("pod %s/%s: waiting for %s: %v (phase %s)", ns, name, what, err, phase)
	}
	return last
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

func terminatedReason(p *corev1.Pod, container string) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container && s.State.Terminated != nil {
			return s.State.Terminated.Reason
		}
	}
	return ""
}

// result is what the workload image reports.
type result struct {
	AllocatedMiB     int    `json:"allocatedMiB"`
	SwapLimitBytes   int64  `json:"swapLimitBytes"`
	MemoryLimitBytes int64  `json:"memoryLimitBytes"`
	SwapUsageBytes   int64  `json:"swapUsageBytes"`
	EnvSwapLimit     string `json:"envSwapLimit"`
	CgroupVersion    int    `json:"cgroupVersion"`
}

// report reads a container's START (or RESULT, when final) line from its
// log file on the node (the kubelet's pod log directory), not through the
// API server's kubelet proxy.
func (c *cluster) report(t *testing.T, p *corev1.Pod, container, kind string) result {
	t.Helper()
	var r result
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		line, ok := c.logLine(p, container, kind+" ")
		if !ok {
			return false, nil
		}
		return true, json.Unmarshal([]byte(line), &r)
	})
	if err != nil {
		t.Fatalf("pod %s container %s: no %s line in its log: %v", p.Name, container, kind, err)
	}
	return r
}

func (c *cluster) logLine(p *corev1.Pod, container, prefix string) (string, bool) {
	var dirs []string
	for _, root := range []string{c.env["POD_LOGS_DIR"], filepath.Join(c.dir, "pod-logs"), "/var/log/pods"} {
		if root != "" {
			dirs = append(dirs, filepath.Join(root, fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), container))
		}
	}
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				continue
			}
			s := bufio.NewScanner(fh)
			s.Buffer(make([]byte, 64*1024), 1024*1024)
			for s.Scan() {
				// CRI format: <time> <stream> <tag> <message>
				parts := strings.SplitN(s.Text(), " ", 4)
				if len(parts) == 4 && strings.HasPrefix(parts[3], prefix) {
					fh.Close()
					return strings.TrimPrefix(parts[3], prefix), true
				}
			}
			fh.Close()
		}
	}
	return "", false
}

// script runs one of the cluster scripts (hack/cluster/NAME args...).
func (c *cluster) script(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.repoRoot, "hack", "cluster", name), args...)
	cmd.Env = append(os.Environ(), "CLUSTER_DIR="+c.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/cluster/%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// offer returns the swap capacity the node currently publishes.
func (c *cluster) offer(t *testing.T) int64 {
	t.Helper()
	dev := c.swapDevice(t)
	if dev == nil {
		t.Fatal("the node publishes no swap device")
	}
	q := dev.Capacity["swap"].Value
	return q.Value()
}

func (c *cluster) swapDevice(t *testing.T) *resourceapi.Device {
	t.Helper()
	slices, err := c.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices.Items {
		if s.Spec.Driver == "dra.swap" && s.Spec.Pool.Name == c.node && len(s.Spec.Devices) > 0 {
			return &s.Spec.Devices[0]
		}
	}
	return nil
}

// waitOffer waits until the published offer satisfies cond.
func (c *cluster) waitOffer(t *testing.T, what string, cond func(int64) bool) int64 {
	t.Helper()
	var got int64
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		if dev := c.swapDevice(t); dev != nil {
			q := dev.Capacity["swap"].Value
			got = q.Value()
			return cond(got), nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for the offer to %s: %v (last %d)", what, err, got)
	}
	return got
}
