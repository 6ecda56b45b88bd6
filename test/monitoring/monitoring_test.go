package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dra-driver-swap/dra-driver-swap/pkg/controller"
	"github.com/dra-driver-swap/dra-driver-swap/pkg/plugin"
)

// dir holds the monitoring artifacts, relative to this package.
var dir = filepath.Join("..", "..", "deployments", "monitoring")

var (
	dashboardFile = filepath.Join(dir, "grafana-dashboard.json")
	rulesFile     = filepath.Join(dir, "prometheusrule.yaml")
)

// histograms are the exported histograms, whose _bucket, _sum and _count
// series the expressions may name. Add a new histogram here.
var histograms = []string{"dra_swap_claim_operation_duration_seconds"}

// optional are the metrics the dashboard need not show: they are exported
// only behind a flag.
var optional = []string{"dra_swap_claim_swap_used_bytes"}

// identifier is a PromQL identifier; metric names are the ones starting
// with dra_swap_.
var identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// exported maps every metric name the code can export to its component.
func exported(t *testing.T) map[string]string {
	t.Helper()
	known := map[string]string{}
	for _, n := range plugin.NewMetrics().Names() {
		known[n] = "kubelet plugin"
	}
	for _, n := range controller.MetricNames() {
		known[n] = "controller"
	}
	for _, h := range histograms {
		if _, ok := known[h]; !ok {
			t.Errorf("histogram %s listed in monitoring_test.go is not exported by the kubelet plugin or the controller", h)
		}
	}
	return known
}

// metricNames returns the dra_swap_ metrics expr names, histogram series
// suffixes stripped.
func metricNames(expr string) []string {
	var names []string
	for _, tok := range identifier.FindAllString(expr, -1) {
		if !strings.HasPrefix(tok, "dra_swap_") {
			continue
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(tok, suffix); ok && slices.Contains(histograms, base) {
				tok = base
				break
			}
		}
		if !slices.Contains(names, tok) {
			names = append(names, tok)
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (le) (rate(dra_swap_claim_operation_duration_seconds_bucket{key=~"dra.swap/x"}[5m])))` +
		` / dra_swap_node_swap_used_bytes:rate5m + dra_swap_prepared_claims_count + xdra_swap_no + dra_swap_prepared_claims`)
	want := []string{"dra_swap_claim_operation_duration_seconds", "dra_swap_node_swap_used_bytes:rate5m", "dra_swap_prepared_claims_count", "dra_swap_prepared_claims"}
	if !slices.Equal(got, want) {
		t.Errorf("metricNames = %q, want %q", got, want)
	}
}

type dashboard struct {
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Targets     []target `json:"targets"`
	// Panels are the panels of a collapsed row.
	Panels []panel `json:"panels"`
}

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

type variable struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Query is a string or, from Grafana 10, {"query": "..."}.
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
}

// query is the variable's query text.
func (v variable) query() (string, error) {
	if len(v.Query) == 0 {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v.Query, &s); err == nil {
		return s, nil
	}
	var q struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &q); err != nil {
		return "", fmt.Errorf("query is neither a string nor an object with a query: %w", err)
	}
	return q.Query, nil
}

// expression is a PromQL expression and where it is.
type expression struct {
	where string
	expr  string
}

// walk calls f for every panel, those of collapsed rows included.
func walk(panels []panel, f func(panel)) {
	for _, p := range panels {
		f(p)
		walk(p.Panels, f)
	}
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	path := dashboardFile
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the dashboard: %v", err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s is not a valid dashboard JSON: %v", path, err)
	}
	if dec.More() {
		t.Fatalf("%s has data after the dashboard object", path)
	}
	if d.Title == "" {
		t.Errorf("%s: the dashboard has no title", path)
	}
	if len(d.Panels) == 0 {
		t.Fatalf("%s: the dashboard has no panels", path)
	}
	return d
}

// dashboardExpressions checks every panel's title, description and
// targets and returns every expression of the dashboard.
func dashboardExpressions(t *testing.T, d dashboard) []expression {
	t.Helper()
	var exprs []expression
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := v.query()
		if err != nil {
			t.Errorf("%s: template variable %q: %v", dashboardFile, v.Name, err)
		}
		for _, e := range []string{q, v.Definition} {
			if e != "" {
				exprs = append(exprs, expression{fmt.Sprintf("template variable %q", v.Name), e})
			}
		}
	}
	n := 0
	walk(d.Panels, func(p panel) {
		n++
		if strings.TrimSpace(p.Title) == "" {
			t.Errorf("%s: panel %d (%s) has no title", dashboardFile, n, p.Type)
			p.Title = fmt.Sprintf("#%d", n)
		}
		if p.Type == "row" {
			return
		}
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("%s: panel %q has no description", dashboardFile, p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no targets", dashboardFile, p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s: panel %q target %s has no expression", dashboardFile, p.Title, tg.RefID)
				continue
			}
			exprs = append(exprs, expression{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
		}
	})
	return exprs
}

type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// duration is a Prometheus duration such as 10m or 1h30m.
var duration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

// ruleExpressions checks every rule and returns its expressions.
func ruleExpressions(t *testing.T) []expression {
	t.Helper()
	path := rulesFile
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the rules: %v", err)
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatalf("%s is not a valid PrometheusRule YAML: %v", path, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", path, pr.APIVersion, pr.Kind)
	}
	var exprs []expression
	seen := map[string]bool{}
	for _, g := range pr.Spec.Groups {
		if len(g.Rules) == 0 {
			t.Errorf("%s: group %q has no rules", rulesFile, g.Name)
		}
		for i, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			if name == "" {
				t.Errorf("%s: group %q rule %d is neither an alert nor a recording rule", rulesFile, g.Name, i)
				name = fmt.Sprintf("#%d", i)
			}
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: rule %q has no expr", rulesFile, name)
			} else {
				exprs = append(exprs, expression{fmt.Sprintf("rule %q", name), r.Expr})
			}
			if r.Alert == "" {
				continue
			}
			if seen[r.Alert] {
				t.Errorf("%s: alert %q is defined twice", rulesFile, r.Alert)
			}
			seen[r.Alert] = true
			if r.For != "" && !duration.MatchString(r.For) {
				t.Errorf("%s: alert %q: for %q is not a Prometheus duration", rulesFile, r.Alert, r.For)
			}
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: alert %q: label severity is %q, want critical, warning or info", rulesFile, r.Alert, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: alert %q has no %s annotation", rulesFile, r.Alert, a)
				}
			}
		}
	}
	if len(seen) == 0 {
		t.Errorf("%s has no alerts", path)
	}
	return exprs
}

// checkNames fails for every metric an expression of file names that the
// code does not export, and returns the metrics named.
func checkNames(t *testing.T, file string, exprs []expression, known map[string]string) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricNames(e.expr) {
			used[n] = true
			if _, ok := known[n]; !ok {
				t.Errorf("%s: %s uses metric %s, which neither the kubelet plugin (plugin.NewMetrics().Names()) nor the controller (controller.MetricNames()) exports",
					file, e.where, n)
			}
		}
	}
	return used
}

func TestDashboard(t *testing.T) {
	known := exported(t)
	used := checkNames(t, dashboardFile, dashboardExpressions(t, loadDashboard(t)), known)
	var missing []string
	for n := range known {
		if !used[n] && !slices.Contains(optional, n) {
			missing = append(missing, fmt.Sprintf("%s (%s)", n, known[n]))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s shows no panel for these exported metrics; add one (or list the metric as optional in monitoring_test.go):\n\t%s",
			dashboardFile, strings.Join(missing, "\n\t"))
	}
}

func TestPrometheusRule(t *testing.T) {
	checkNames(t, rulesFile, ruleExpressions(t), exported(t))
}
