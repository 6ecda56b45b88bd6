package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const (
	// maxScrape bounds one target's metrics page, maxScrapeLines its
	// lines: the page comes from the cluster.
	maxScrape      = 16 << 20
	maxScrapeLines = 200000
)

// scrapeTarget is one pod a ServiceMonitor of the chart scrapes, with the
// target labels Prometheus gives each of its series.
type scrapeTarget struct {
	component string
	pod       *corev1.Pod
	// labels are the target labels: job (the metrics Service), namespace,
	// service, pod, container, endpoint, instance and node (relabeled
	// from __meta_kubernetes_pod_node_name, see
	// templates/servicemonitor.yaml).
	labels map[string]string
	page   []byte
}

// TestScrapeForRules scrapes both components as the chart's ServiceMonitors
// would, after a claim pod ran on this suite's node (so the claim series
// exist): the kubelet plugin on this node over the pod network and every
// controller pod through the API server's pod proxy. Each scrape must
// return samples, the plugin's with the Go runtime's, the process's and
// client-go's series and a prepared claim. With E2E_SCRAPE_OUT set, the
// series go to that file in the Prometheus text format with the target
// labels (and up = 1 for each target, Prometheus's own series), for the
// PromQL evaluation of the chart's rules and dashboard in tools/promql
// (make monitoring-check SCRAPED=<file>).
func TestScrapeForRules(t *testing.T) {
	c := loadCluster(t, needsOurCluster("scrapes the kubelet plugin over the node's network and writes the series make monitoring-check evaluates"))
	ns := c.namespace(t)
	c.swapTemplate(t, ns, "swap-16", "", 16*mi)
	c.runningClaimPod(t, ns, "scraped", "swap-16", 16*mi)

	var targets []*scrapeTarget
	for _, component := range []string{"kubelet-plugin", "controller"} {
		found := c.scrapeTargets(t, component)
		if len(found) == 0 {
			t.Fatalf("no %s pod behind the chart's metrics Service", component)
		}
		targets = append(targets, found...)
	}
	ctx := context.Background()
	for _, tg := range targets {
		var err error
		if tg.component == "kubelet-plugin" {
			tg.page, _, err = httpGet(ctx, "http://"+tg.labels["instance"]+"/metrics", "", maxScrape)
		} else {
			// By number: the API server's pod proxy panics on a named
			// port (pods/<pod>:metrics) in this cluster's kube-apiserver.
			_, port, _ := net.SplitHostPort(tg.labels["instance"])
			tg.page, err = c.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", tg.pod.Namespace, "pods", tg.pod.Name+":"+port, "proxy", "metrics").DoRaw(ctx)
		}
		if err != nil {
			t.Fatalf("scrape %s pod %s: %v", tg.component, tg.pod.Name, err)
		}
	}

	var out bytes.Buffer
	families := newFamilies()
	for _, tg := range targets {
		n, err := families.add(tg.page, tg.labels)
		if err != nil {
			t.Fatalf("%s pod %s: %v", tg.component, tg.pod.Name, err)
		}
		t.Logf("%s pod %s (job %s, node %s): %d samples", tg.component, tg.pod.Name, tg.labels["job"], tg.labels["node"], n)
		if n == 0 {
			t.Errorf("%s pod %s: the scrape returned no samples", tg.component, tg.pod.Name)
		}
		if tg.component != "kubelet-plugin" {
			continue
		}
		for _, want := range []string{"go_goroutines", "process_resident_memory_bytes", "rest_client_requests_total", "dra_swap_prepared_claims"} {
			if !families.has(want, tg.labels) {
				t.Errorf("kubelet plugin pod %s: no %s series", tg.pod.Name, want)
			}
		}
		if v := families.value("dra_swap_prepared_claims", tg.labels); v < 1 {
			t.Errorf("kubelet plugin pod %s: dra_swap_prepared_claims %v while the claim pod runs, want at least 1", tg.pod.Name, v)
		}
	}
	families.write(&out)
	path := os.Getenv("E2E_SCRAPE_OUT")
	if path == "" {
		return
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d bytes of series to %s", out.Len(), path)
}

// scrapeTargets are the component's pods that the chart's ServiceMonitor
// scrapes (through the release's metrics Service of that component, its
// port named metrics), with their target labels; for the kubelet plugin
// only the pod on this suite's node.
func (c *env) scrapeTargets(t *testing.T, component string) []*scrapeTarget {
	t.Helper()
	ctx := context.Background()
	svcs, err := c.client.CoreV1().Services(driverNamespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{
		"app.kubernetes.io/instance": driverRelease, "app.kubernetes.io/component": component}.String()})
	if err != nil {
		t.Fatal(err)
	}
	var targets []*scrapeTarget
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
			continue
		}
		var fields []string
		if component == "kubelet-plugin" {
			fields = append(fields, "spec.nodeName="+c.node)
		}
		for _, p := range c.podsOf(t, labels.Set(svc.Spec.Selector).String(), fields...) {
			if p.DeletionTimestamp != nil || !podReady(&p) {
				continue
			}
			container, port := metricsPort(&p)
			if port == 0 {
				t.Fatalf("pod %s has no container port named metrics", p.Name)
			}
			targets = append(targets, &scrapeTarget{component: component, pod: &p, labels: map[string]string{
				"job":       svc.Name,
				"namespace": p.Namespace,
				"service":   svc.Name,
				"pod":       p.Name,
				"container": container,
				"endpoint":  "metrics",
				"instance":  net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))),
				"node":      p.Spec.NodeName,
			}})
		}
	}
	return targets
}

// metricsPort is the container and port number of the pod's port named
// metrics.
func metricsPort(p *corev1.Pod) (string, int32) {
	for _, ctr := range p.Spec.Containers {
		for _, port := range ctr.Ports {
			if port.Name == "metrics" {
				return ctr.Name, port.ContainerPort
			}
		}
	}
	return "", 0
}

// httpGet reads url with a GET (an Accept header if accept is set) and
// returns the body, at most max bytes, and the response's header; a status
// other than 200 is an error.
func httpGet(ctx context.Context, url, accept string, max int) ([]byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(max)+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("get %s: %s: %.200s", url, resp.Status, body)
	}
	if len(body) > max {
		return nil, nil, fmt.Errorf("%s: more than %d bytes", url, max)
	}
	return body, resp.Header, nil
}

// families are the scraped series in the Prometheus text format, by
// metric family (each family's HELP and TYPE once, its samples from every
// target after them), with the target labels added to every sample.
type families struct {
	order []string
	meta  map[string][]string
	lines map[string][]string
	// samples are the parsed samples, by name, for the test's checks.
	samples map[string][]scrapedSample
}

type scrapedSample struct {
	labels map[string]string
	value  float64
}

func newFamilies() *families {
	return &families{meta: map[string][]string{}, lines: map[string][]string{}, samples: map[string][]scrapedSample{}}
}

// add adds one target's page and returns how many samples it had. A
// sample's own label that a target label would overwrite is renamed
// exported_<name>, as Prometheus does without honorLabels. Prometheus's
// up series says the scrape succeeded.
func (f *families) add(page []byte, target map[string]string) (int, error) {
	s := bufio.NewScanner(bytes.NewReader(page))
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	family, n := "", 0
	for lines := 0; s.Scan(); lines++ {
		if lines >= maxScrapeLines {
			return n, fmt.Errorf("more than %d lines", maxScrapeLines)
		}
		line := strings.TrimSpace(s.Text())
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			kind, rest, _ := strings.Cut(rest, " ")
			name, _, _ := strings.Cut(rest, " ")
			if kind != "HELP" && kind != "TYPE" {
				continue
			}
			family = name
			if !slices.Contains(f.meta[name], line) && len(f.meta[name]) < 2 {
				if _, seen := f.lines[name]; !seen {
					f.order = append(f.order, name)
					f.lines[name] = nil
				}
				f.meta[name] = append(f.meta[name], line)
			}
			continue
		}
		name, own, value, err := parseSample(line)
		if err != nil {
			return n, fmt.Errorf("line %d %q: %w", lines+1, line, err)
		}
		if family == "" || !strings.HasPrefix(name, family) {
			family = name
		}
		f.addSample(family, name, own, value, target)
		n++
	}
	if err := s.Err(); err != nil {
		return n, err
	}
	f.addSample("up", "up", nil, "1", target)
	return n, nil
}

// labelEscaper escapes a label value as the text format does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func (f *families) addSample(family, name string, own map[string]string, value string, target map[string]string) {
	all := map[string]string{}
	for k, v := range own {
		if _, clash := target[k]; clash {
			k = "exported_" + k
		}
		all[k] = v
	}
	for k, v := range target {
		all[k] = v
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, 0, len(keys))
	for _, k := range keys {
		pairs = append(pairs, k+`="`+labelEscaper.Replace(all[k])+`"`)
	}
	if _, seen := f.lines[family]; !seen {
		f.order = append(f.order, family)
	}
	f.lines[family] = append(f.lines[family], name+"{"+strings.Join(pairs, ",")+"} "+value)
	v, _ := strconv.ParseFloat(value, 64)
	f.samples[name] = append(f.samples[name], scrapedSample{labels: all, value: v})
}

// has says whether the target has a series of the name; value sums the
// target's samples of the name.
func (f *families) has(name string, target map[string]string) bool {
	return slices.ContainsFunc(f.samples[name], func(s scrapedSample) bool { return s.labels["pod"] == target["pod"] })
}

func (f *families) value(name string, target map[string]string) float64 {
	var sum float64
	for _, s := range f.samples[name] {
		if s.labels["pod"] == target["pod"] {
			sum += s.value
		}
	}
	return sum
}

func (f *families) write(w io.Writer) {
	for _, name := range f.order {
		for _, line := range f.meta[name] {
			fmt.Fprintln(w, line)
		}
		for _, line := range f.lines[name] {
			fmt.Fprintln(w, line)
		}
	}
}

// parseSample splits a sample line of the text format, name{labels} value
// [timestamp], into the name, its labels and the value (the timestamp is
// dropped: the evaluation sets its own).
func parseSample(line string) (name string, lbls map[string]string, value string, err error) {
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return "", nil, "", fmt.Errorf("no metric name")
	}
	name, rest := line[:i], line[i:]
	lbls = map[string]string{}
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if rest == "" {
				return "", nil, "", fmt.Errorf("unterminated labels")
			}
			if rest[0] == '}' {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq <= 0 {
				return "", nil, "", fmt.Errorf("label without a value")
			}
			key := strings.TrimSpace(rest[:eq])
			quoted, err := strconv.QuotedPrefix(strings.TrimLeft(rest[eq+1:], " "))
			if err != nil {
				return "", nil, "", fmt.Errorf("label %s: %w", key, err)
			}
			v, err := strconv.Unquote(quoted)
			if err != nil {
				return "", nil, "", fmt.Errorf("label %s: %w", key, err)
			}
			lbls[key] = v
			rest = strings.TrimLeft(rest[eq+1:], " ")[len(quoted):]
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return "", nil, "", fmt.Errorf("want a value and at most a timestamp after the labels")
	}
	return name, lbls, fields[0], nil
}
