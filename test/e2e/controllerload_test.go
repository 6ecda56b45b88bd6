package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
)

// floodPeakBound is the most memory a controller replica may use while it
// is flooded: internal/controller/webhook bounds the reviews a replica
// works on at once (16 MiB of small ones, 4 large of up to 3 MiB) and
// internal/httpserver the connections it holds (128, 256 KiB of HTTP/2
// buffers each), which with the informers' caches of this cluster stays
// far below the chart's 512 MiB limit.
const floodPeakBound = 192 << 20

// Flood sizes: two flooding pods (two callers), each with floodWorkers
// workers per replica posting reviews of floodBytes, for floodFor.
const (
	floodPods    = 2
	floodWorkers = 48
	floodBytes   = 3_000_000
	floodFor     = 30 * time.Second
)

// TestControllerUnderFlood: pods post forged maximum-size admission
// reviews (a claim with ~30,000 requests, a reservation of ~20,000 pods:
// each decoded whole, they took tens of MiB) straight to both controller
// replicas' pod addresses, from many HTTP/2 streams and HTTP/1.1
// connections, for tens of seconds, as any pod in the cluster can. Both
// replicas keep running (no restart, the same pods), their memory stays
// under floodPeakBound, excess reviews are answered 429, and meanwhile a
// real pod whose claim template carries a SwapConfig is admitted (its
// template and its generated claim pass config.dra.swap, failurePolicy
// Fail) and gets its node's labels by the time its container starts.
func TestControllerUnderFlood(t *testing.T) {
	c := loadCluster(t, needsOurCluster("floods the driver's controller replicas with forged admission reviews"))
	ns := c.namespace(t)
	ctx := context.Background()
	_, dep := c.driverWorkloads(t)
	replicas := c.podsOf(t, metav1.FormatLabelSelector(dep.Spec.Selector))
	if len(replicas) < 2 {
		t.Fatalf("%d controller replicas, want 2", len(replicas))
	}
	var targets []string
	peakFiles := map[types.UID]string{}
	for i := range replicas {
		p := &replicas[i]
		if p.Status.PodIP == "" || !podReady(p) {
			t.Fatalf("controller pod %s is not ready (IP %q)", p.Name, p.Status.PodIP)
		}
		targets = append(targets, fmt.Sprintf("https://%s:%d", p.Status.PodIP, webhookPort(p)))
		if p.Spec.NodeName == c.node {
			peakFiles[p.UID] = c.resetPeak(t, p)
		}
	}
	if len(peakFiles) == 0 {
		t.Fatalf("no controller replica runs on node %s, whose cgroups this suite reads", c.node)
	}

	var flooders []*corev1.Pod
	for i := range floodPods {
		p := c.WorkloadPod(ns, fmt.Sprintf("flood-%d", i), nil, ctr{Name: "flood"})
		p.Spec.HostNetwork = false // a pod of the cluster's network, as any tenant's
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env,
			corev1.EnvVar{Name: "FLOOD_TARGETS", Value: strings.Join(targets, ",")},
			corev1.EnvVar{Name: "FLOOD_WORKERS", Value: strconv.Itoa(floodWorkers)},
			corev1.EnvVar{Name: "FLOOD_BYTES", Value: strconv.Itoa(floodBytes)},
			corev1.EnvVar{Name: "FLOOD_SECONDS", Value: strconv.Itoa(int(floodFor.Seconds()))})
		flooders = append(flooders, c.createPod(t, p))
	}
	start := time.Now()
	for i, p := range flooders {
		flooders[i] = c.waitPod(t, ns, p.Name, "running", podTimeout, running)
	}
	time.Sleep(5 * time.Second) // the flood is on

	// A real pod, admitted and labelled while the flood goes on.
	tmpl := cluster.SwapTemplate(ns, "swap-64-config", "", 64*mi)
	tmpl.Spec.Spec.Devices.Config = configClaim(ns, "x", validSwapConfig).Spec.Devices.Config
	if _, err := c.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a template with a valid SwapConfig was not admitted during the flood: %v", err)
	}
	pod := c.WorkloadPod(ns, "real", map[string]string{"swap": tmpl.Name},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"})
	fromLabel := func(name, label string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + label + "']"}}}
	}
	pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env,
		fromLabel("DOWNWARD_HOSTNAME", corev1.LabelHostname), fromLabel("DOWNWARD_SWAP_BEHAVIOR", "node.kubernetes.io/swap-behavior"))
	created := time.Now()
	pod = c.createPod(t, pod)
	pod = c.waitPod(t, ns, pod.Name, "completion", podTimeout, finished)
	t.Logf("the real pod ran to its end %v after its creation, %v into the flood", time.Since(created).Round(100*time.Millisecond), created.Sub(start).Round(time.Second))
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Errorf("the real pod: phase %s, reason %s", pod.Status.Phase, terminatedReason(pod, "worker"))
	}
	r := c.report(t, pod, "worker", "START")
	assertSwapLimit(t, r, 64*mi)
	if r.Downward["DOWNWARD_HOSTNAME"] == "" || r.Downward["DOWNWARD_SWAP_BEHAVIOR"] == "" {
		t.Errorf("the real pod's container started without its node's labels: %v", r.Downward)
	}
	if time.Since(start) > floodFor {
		t.Errorf("the real pod finished after the flood (%v): it was not served during it", time.Since(start).Round(time.Second))
	}

	answered := map[string]int64{}
	var sent int64
	for _, p := range flooders {
		p = c.waitPod(t, ns, p.Name, "completion", floodFor+podTimeout, finished)
		var f struct {
			Sent    int64            `json:"sent"`
			Answers map[string]int64 `json:"answers"`
		}
		line := floodLine(c, p)
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("flood pod %s: %q: %v", p.Name, line, err)
		}
		sent += f.Sent
		for k, v := range f.Answers {
			answered[k] += v
		}
	}
	t.Logf("%d forged reviews of %d bytes sent in %v from %d pods; answers by status: %v", sent, floodBytes, floodFor, floodPods, answered)
	if answered["429"] == 0 || answered["200"]+answered["429"] < 100 {
		t.Errorf("the flood was not a flood, or no review was refused for want of a slot: %v", answered)
	}

	after := c.podsOf(t, metav1.FormatLabelSelector(dep.Spec.Selector))
	for _, p := range replicas {
		var now *corev1.Pod
		for i := range after {
			if after[i].UID == p.UID {
				now = &after[i]
			}
		}
		if now == nil {
			t.Errorf("controller pod %s is gone", p.Name)
			continue
		}
		for _, s := range now.Status.ContainerStatuses {
			if s.RestartCount != 0 {
				t.Errorf("controller pod %s container %s restarted %d times (last: %+v)", p.Name, s.Name, s.RestartCount, s.LastTerminationState.Terminated)
			}
		}
		if file, ok := peakFiles[p.UID]; ok {
			peak := readInt(t, file)
			t.Logf("controller pod %s: peak memory %d MiB during the flood (bound %d MiB)", p.Name, peak>>20, floodPeakBound>>20)
			if peak > floodPeakBound {
				t.Errorf("controller pod %s used %d MiB during the flood, over the bound of %d MiB", p.Name, peak>>20, floodPeakBound>>20)
			}
		}
	}
}

// webhookPort is the controller container's webhook port.
func webhookPort(p *corev1.Pod) int32 {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "webhook" {
				return port.ContainerPort
			}
		}
	}
	return 9443
}

// resetPeak resets the controller container's peak memory on the node
// (cgroup v1: memory.max_usage_in_bytes; v2: memory.peak, reset by a
// write on kernels from 6.12) and returns the file to read it from.
func (c *env) resetPeak(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	version, root, group := c.hostCgroup(t, p, "controller")
	file := filepath.Join(root, group, "memory.peak")
	if version == 1 {
		file = filepath.Join(root, "memory", group, "memory.max_usage_in_bytes")
	}
	if err := os.WriteFile(file, []byte("0"), 0); err != nil {
		t.Logf("peak memory of %s not reset (%v): it includes the time before the flood", p.Name, err)
	}
	return file
}

func readInt(t *testing.T, file string) int64 {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return n
}

// floodLine is the flood pod's FLOOD line (the workload image's flood.go).
func floodLine(c *env, p *corev1.Pod) string {
	for _, f := range c.ContainerLogFiles(p, "flood") {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		s := bufio.NewScanner(fh)
		for s.Scan() {
			if _, msg, ok := strings.Cut(s.Text(), " F FLOOD "); ok {
				fh.Close()
				return msg
			}
		}
		fh.Close()
	}
	return ""
}
