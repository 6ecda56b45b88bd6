// Package cluster reaches the local cluster that hack/cluster/up.sh brings
// up: its client, the workload pods the e2e tests and the demo create, and
// the reports those pods write to their logs on the node.
package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/images/workload/report"
)

// DefaultDir is where hack/cluster/up.sh keeps the cluster's state.
const DefaultDir = "/var/lib/dra-swap-e2e"

// Scaled multiplies a timeout by E2E_TIMEOUT_SCALE (default 1; the cgroup
// v2 leg sets 4, because its node runs under software emulation).
func Scaled(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("E2E_TIMEOUT_SCALE"), 64); err == nil && f >= 1 {
		return time.Duration(float64(d) * f)
	}
	return d
}

// Emulated reports whether the node runs under software emulation (the
// cgroup v2 leg: hack/e2e-v2.sh sets E2E_EMULATED=1), where a pod takes
// seconds to start, not milliseconds. It is a flag of its own, not read off
// E2E_TIMEOUT_SCALE: make test also scales the host leg's timeouts, while
// the emulated guest shares its CPU, and the host leg must still run its
// whole suite.
func Emulated() bool { return os.Getenv("E2E_EMULATED") == "1" }

// DefaultRegistry is the loopback registry hack/cluster/up.sh runs; the
// cluster's env file names the one in use (REGISTRY).
const DefaultRegistry = "127.0.0.1:25000"

// Registry is where the cluster's containerd pulls the driver's and the
// tests' images from.
func (c *Cluster) Registry() string {
	if r := c.Env["REGISTRY"]; r != "" {
		return r
	}
	return DefaultRegistry
}

// WorkloadImage is the test workload (test/e2e/images/workload), built by
// `make images` and pushed to the cluster's registry.
func (c *Cluster) WorkloadImage() string { return c.Registry() + "/swap-workload:v1" }

// Cluster is a running local cluster.
type Cluster struct {
	Dir    string
	Node   string
	Client kubernetes.Interface
	// Config is the admin's client configuration.
	Config *rest.Config
	Env    map[string]string
}

// Load reads dir/env (dir defaults to $CLUSTER_DIR, then DefaultDir).
func Load(dir string) (*Cluster, error) {
	if dir == "" {
		dir = os.Getenv("CLUSTER_DIR")
	}
	if dir == "" {
		dir = DefaultDir
	}
	data, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		return nil, fmt.Errorf("no running cluster (%w): bring one up with hack/cluster/up.sh", err)
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
		return nil, fmt.Errorf("kubeconfig %q: %w", env["KUBECONFIG"], err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &Cluster{Dir: dir, Node: env["NODE_NAME"], Client: client, Config: config, Env: env}, nil
}

// SwapTemplate is a ResourceClaimTemplate asking for bytes of swap from
// class (dra.swap when empty).
func SwapTemplate(ns, name, class string, bytes int64) *resourceapi.ResourceClaimTemplate {
	if class == "" {
		class = "dra.swap"
	}
	return &resourceapi.ResourceClaimTemplate{
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
}

// Container describes one workload container of a pod.
type Container struct {
	Name     string
	Claims   []string // pod-level claim names
	AllocMiB int
	MemLimit string // "" for none
	CPU      string // requests = limits when set (Guaranteed with MemLimit)
	Hold     int    // seconds to stay alive after the allocation
	Thrash   int    // seconds to touch the allocation again and again first
}

// WorkloadPod builds a hostNetwork pod of workload containers, pinned to
// the cluster's node (in the two-node cluster each node's suite tests its
// own node; a test of placement removes NodeSelector); templates maps
// pod-level claim names to ResourceClaimTemplates.
func (c *Cluster) WorkloadPod(ns, name string, templates map[string]string, containers ...Container) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: c.Node},
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	for _, claim := range slices.Sorted(maps.Keys(templates)) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: claim, ResourceClaimTemplateName: ptr.To(templates[claim])})
	}
	for _, ctr := range containers {
		k := corev1.Container{
			Name:            ctr.Name,
			Image:           c.WorkloadImage(),
			ImagePullPolicy: corev1.PullIfNotPresent,
			Env: []corev1.EnvVar{
				{Name: "ALLOC_MIB", Value: strconv.Itoa(ctr.AllocMiB)},
				{Name: "HOLD_SECONDS", Value: strconv.Itoa(ctr.Hold)},
				{Name: "THRASH_SECONDS", Value: strconv.Itoa(ctr.Thrash)},
			},
		}
		if ctr.MemLimit != "" {
			k.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(ctr.MemLimit)}
			if ctr.CPU != "" {
				k.Resources.Limits[corev1.ResourceCPU] = resource.MustParse(ctr.CPU)
				k.Resources.Requests = k.Resources.Limits.DeepCopy()
			}
		}
		for _, claim := range ctr.Claims {
			k.Resources.Claims = append(k.Resources.Claims, corev1.ResourceClaim{Name: claim})
		}
		p.Spec.Containers = append(p.Spec.Containers, k)
	}
	return p
}

// Result is what the workload image reports on its START and RESULT lines.
type Result = report.Report

// Report reads a container's report line ("START" or "RESULT") from its
// log file on the node, not through the API server's kubelet proxy. ok is
// false while the line is not there yet.
func (c *Cluster) Report(p *corev1.Pod, container, kind string) (r Result, ok bool, err error) {
	line, ok := c.logLine(p, container, kind+" ")
	if !ok {
		return r, false, nil
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, true, fmt.Errorf("pod %s container %s: %s line %q: %w", p.Name, container, kind, line, err)
	}
	return r, true, nil
}

// RunReport is Report of one run of a container: the first is 0, a
// restart's the kubelet's restart count (its log file <run>.log).
func (c *Cluster) RunReport(p *corev1.Pod, container, kind string, run int32) (r Result, ok bool, err error) {
	for _, f := range c.ContainerLogFiles(p, container) {
		if filepath.Base(f) != fmt.Sprintf("%d.log", run) {
			continue
		}
		line, ok := findLine(f, kind+" ")
		if !ok {
			continue
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return r, true, fmt.Errorf("pod %s container %s run %d: %s line %q: %w", p.Name, container, run, kind, line, err)
		}
		return r, true, nil
	}
	return r, false, nil
}

func (c *Cluster) logLine(p *corev1.Pod, container, prefix string) (string, bool) {
	for _, f := range c.ContainerLogFiles(p, container) {
		if line, ok := findLine(f, prefix); ok {
			return line, true
		}
	}
	return "", false
}

// ContainerLogFiles are the log files of a container (one per restart)
// that the kubelet wrote on the node, sorted by name within each place the
// cluster may keep them.
func (c *Cluster) ContainerLogFiles(p *corev1.Pod, container string) []string {
	var all []string
	seen := map[string]bool{}
	for _, root := range []string{c.Env["POD_LOGS_DIR"], filepath.Join(c.Dir, "pod-logs"), "/var/log/pods"} {
		if root == "" || seen[root] {
			continue
		}
		seen[root] = true
		dir := filepath.Join(root, fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), container)
		files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		all = append(all, files...) // Glob sorts
	}
	return all
}

// findLine scans a CRI log file ("<time> <stream> <tag> <message>").
func findLine(path, prefix string) (string, bool) {
	fh, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer fh.Close()
	s := bufio.NewScanner(fh)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		parts := strings.SplitN(s.Text(), " ", 4)
		if len(parts) == 4 && strings.HasPrefix(parts[3], prefix) {
			return strings.TrimPrefix(parts[3], prefix), true
		}
	}
	return "", false
}

// TerminatedReason is the container's termination reason, if any.
func TerminatedReason(p *corev1.Pod, container string) string {
	if t := TerminatedState(p, container); t != nil {
		return t.Reason
	}
	return ""
}

// TerminatedState is the container's terminated state, nil while it has
// not terminated.
func TerminatedState(p *corev1.Pod, container string) *corev1.ContainerStateTerminated {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container && s.State.Terminated != nil {
			return s.State.Terminated
		}
	}
	return nil
}

// Finished reports whether the pod ran to an end.
func Finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
