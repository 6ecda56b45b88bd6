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

	"github.com/dra-driver-swap/dra-driver-swap/internal/controller"
	"github.com/dra-driver-swap/dra-driver-swap/internal/kubeletplugin"
)

// dir holds the monitoring artifacts (the chart renders them with
// metrics.prometheusRule and metrics.grafanaDashboard), relative to this
// package.
var dir = filepath.Join("..", "..", "deployments", "helm", "dra-driver-swap", "files")

var (
	dashboardFile = filepath.Join(dir, "grafana-dashboard.json")
	rulesFile     = filepath.Join(dir, "prometheusrule.yaml")
	runbookFile   = filepath.Join("..", "..", "docs", "runbook.md")
)

// runbookURL is where every alert's runbook_url points, followed by
// #<the alert's section>.
const runbookURL = "https://github.com/dra-driver-swap/dra-driver-swap/blob/main/docs/runbook.md"

// histograms are the exported histograms, whose _bucket, _sum and _count
// series the expressions may name. Add a new histogram here.
var histograms = []string{"dra_swap_claim_operation_duration_seconds", "dra_swap_offload_pass_duration_seconds"}

// optional are the metrics the dashboard need not show: they are exported
// only behind a flag.
var optional = []string{"dra_swap_claim_swap_used_bytes"}

// external are the series the expressions may name that neither component
// exports, with where they come from.
var external = map[string]string{
	"up": "Prometheus's scrape health of each target",
}

// exported maps every metric name the code can export to its component.
func exported(t *testing.T) map[string]string {
	t.Helper()
	known := map[string]string{}
	for _, n := range kubeletplugin.NewMetrics().Names() {
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

var (
	// stringLiteral, matchers and ranges (label matchers, range and
	// subquery brackets) and grouping (label lists) hold no series name.
	stringLiteral = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	matchers      = regexp.MustCompile(`\{[^}]*\}`)
	ranges        = regexp.MustCompile(`\[[^\]]*\]`)
	grouping      = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// grafanaVariable is a Grafana template variable ($node, ${node}).
	grafanaVariable = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*(?::[a-z]+)?\}?`)
	// token is a number or duration (1e3, 0.99, 5m) or an identifier.
	token = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// keywords are PromQL's operators and modifiers that look like names.
	keywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on", "ignoring", "group_left", "group_right"}
)

// metricNames returns the series names a PromQL expression selects, in
// order, each once: every identifier that is not a function or
// aggregation (followed by "("), a keyword, a label name (in matchers or
// grouping lists), part of a number, duration or string, or a Grafana
// variable. Histogram series suffixes are stripped.
func metricNames(expr string) []string {
	for _, re := range []*regexp.Regexp{stringLiteral, matchers, ranges, grouping, grafanaVariable} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var names []string
	for _, loc := range token.FindAllStringIndex(expr, -1) {
		tok := expr[loc[0]:loc[1]]
		if tok[0] >= '0' && tok[0] <= '9' || slices.Contains(keywords, strings.ToLower(tok)) ||
			strings.HasPrefix(strings.TrimLeft(expr[loc[1]:], " \t\n"), "(") {
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

// grafanaQuery is the PromQL expression of a Grafana template variable's
// query: label_values(expr, label) and query_result(expr) hold one,
// label_values(label) and metrics(...) none.
func grafanaQuery(q string) string {
	q = strings.TrimSpace(q)
	if m := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`).FindStringSubmatch(q); m != nil {
		return m[1]
	}
	if m := regexp.MustCompile(`^query_result\((.*)\)$`).FindStringSubmatch(q); m != nil {
		return m[1]
	}
	if strings.HasPrefix(q, "label_values(") || strings.HasPrefix(q, "label_names(") || strings.HasPrefix(q, "metrics(") {
		return ""
	}
	return q
}

func TestMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`histogram_quantile(0.99, sum by (le) (rate(dra_swap_claim_operation_duration_seconds_bucket{key=~"dra.swap/x"}[5m])))`,
			[]string{"dra_swap_claim_operation_duration_seconds"}},
		{`dra_swap_node_swap_used_bytes:rate5m + dra_swap_prepared_claims_count + dra_swap_prepared_claims`,
			[]string{"dra_swap_node_swap_used_bytes:rate5m", "dra_swap_prepared_claims_count", "dra_swap_prepared_claims"}},
		{`max by (namespace, node) (up{job=~".+-kubeletplugin-metrics"}) == 0`, []string{"up"}},
		{`a > 1e3 and on(node) group_left(pod) b offset 5m or vector(0) unless c[1h:5m] > bool 0.5`, []string{"a", "b", "c"}},
		{`sum without (pod) (rate(x_total{node=~"$node"}[$__rate_interval])) / ${scale} + kube_pod_info{label="up("}`,
			[]string{"x_total", "kube_pod_info"}},
		{`count(dra_swap_node_swap_allocated_bytes > dra_swap_node_swap_offered_bytes) OR vector(0)`,
			[]string{"dra_swap_node_swap_allocated_bytes", "dra_swap_node_swap_offered_bytes"}},
	} {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%s) = %q, want %q", c.expr, got, c.want)
		}
	}
	for q, want := range map[string]string{
		"label_values(dra_swap_node_swap_offered_bytes, node)": "dra_swap_node_swap_offered_bytes",
		"label_values(node)":       "",
		"query_result(topk(5, x))": "topk(5, x)",
		"up":                       "up",
	} {
		if got := grafanaQuery(q); got != want {
			t.Errorf("grafanaQuery(%s) = %q, want %q", q, got, want)
		}
	}
}

// TestUnknownNames proves the check TestDashboard and TestPrometheusRule
// rely on: a series that no component exports, dra_swap_ or not, is
// reported; exported ones, histogram series and external ones are not.
func TestUnknownNames(t *testing.T) {
	known := map[string]string{"dra_swap_a": "kubelet plugin", "dra_swap_claim_operation_duration_seconds": "kubelet plugin"}
	exprs := []expression{
		{"rule \"ok\"", `max by (node) (dra_swap_a) == 0 or rate(dra_swap_claim_operation_duration_seconds_count[5m]) > 0 or up == 0`},
		{"rule \"renamed\"", `dra_swap_a_percent > 1`},
		{"rule \"foreign\"", `kube_daemonset_status_number_unavailable > 0`},
	}
	used, problems := unknownNames("rules.yaml", exprs, known)
	if len(problems) != 2 || !strings.Contains(problems[0], `rule "renamed" uses metric dra_swap_a_percent`) ||
		!strings.Contains(problems[1], `rule "foreign" uses metric kube_daemonset_status_number_unavailable`) {
		t.Errorf("problems %q, want the renamed and the foreign series", problems)
	}
	if !used["dra_swap_a"] || !used["dra_swap_claim_operation_duration_seconds"] {
		t.Errorf("used %v lacks the exported series", used)
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
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
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
		for _, e := range []string{grafanaQuery(q), grafanaQuery(v.Definition)} {
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
			if instanceLabel.MatchString(tg.Expr + " " + tg.LegendFormat) {
				t.Errorf("%s: panel %q target %s names the instance label (the pod's address); use node", dashboardFile, p.Title, tg.RefID)
			}
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

// instanceLabel is the instance label (the scraped pod's address), in an
// expression, a legend or an annotation's template.
var instanceLabel = regexp.MustCompile(`\binstance\b`)

func loadRules(t *testing.T) prometheusRule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatalf("read the rules: %v", err)
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(b, &pr); err != nil {
		t.Fatalf("%s is not a valid PrometheusRule YAML: %v", rulesFile, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", rulesFile, pr.APIVersion, pr.Kind)
	}
	return pr
}

// ruleExpressions checks every rule and returns its expressions.
func ruleExpressions(t *testing.T) []expression {
	t.Helper()
	path := rulesFile
	pr := loadRules(t)
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
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: alert %q has no %s annotation", rulesFile, r.Alert, a)
				}
			}
			// By node, not by the pod's address.
			if !strings.Contains(r.Annotations["summary"], "{{ $labels.node }}") {
				t.Errorf("%s: alert %q: the summary does not name {{ $labels.node }}", rulesFile, r.Alert)
			}
			if instanceLabel.MatchString(r.Expr + " " + r.Annotations["summary"] + " " + r.Annotations["description"]) {
				t.Errorf("%s: alert %q names the instance label (the pod's address); use node", rulesFile, r.Alert)
			}
		}
	}
	if len(seen) == 0 {
		t.Errorf("%s has no alerts", path)
	}
	return exprs
}

// unknownNames returns the series named by the expressions of file, and a
// problem for every one that the code does not export and that is not
// external.
func unknownNames(file string, exprs []expression, known map[string]string) (map[string]bool, []string) {
	used := map[string]bool{}
	var problems []string
	for _, e := range exprs {
		for _, n := range metricNames(e.expr) {
			used[n] = true
			if _, ok := known[n]; ok {
				continue
			}
			if _, ok := external[n]; ok {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s: %s uses metric %s, which neither the kubelet plugin (kubeletplugin.NewMetrics().Names()) nor the controller (controller.MetricNames()) exports, nor is it listed as external in monitoring_test.go",
				file, e.where, n))
		}
	}
	return used, problems
}

// checkNames fails for every series an expression of file names that does
// not exist, and returns the series named.
func checkNames(t *testing.T, file string, exprs []expression, known map[string]string) map[string]bool {
	t.Helper()
	used, problems := unknownNames(file, exprs, known)
	for _, p := range problems {
		t.Error(p)
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

// anchor is the anchor GitHub gives a Markdown heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestRunbook checks that every alert's runbook_url points at its own
// section of docs/runbook.md, which exists, and that every section there
// is an alert's.
func TestRunbook(t *testing.T) {
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			sections[anchor(h)] = h
		}
	}
	alerts := map[string]bool{}
	for _, g := range loadRules(t).Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			want := runbookURL + "#" + anchor(r.Alert)
			if got := r.Annotations["runbook_url"]; got != want {
				t.Errorf("%s: alert %q: runbook_url %q, want %q", rulesFile, r.Alert, got, want)
			}
			if sections[anchor(r.Alert)] != r.Alert {
				t.Errorf("%s has no section \"## %s\"", runbookFile, r.Alert)
			}
		}
	}
	for _, h := range sections {
		if !alerts[h] {
			t.Errorf("%s: section %q is no alert's", runbookFile, h)
		}
	}
}
