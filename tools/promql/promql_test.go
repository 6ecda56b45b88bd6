// Package promql evaluates every expression of the chart's PrometheusRule
// and Grafana dashboard with Prometheus's own PromQL engine over series
// scraped from both components in the e2e cluster (test/e2e
// TestScrapeForRules, E2E_SCRAPE_OUT). It is a module of its own so that
// the driver's module never requires github.com/prometheus/prometheus.
// Run it with `make monitoring-check SCRAPED=<file>`.
package promql

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"go.yaml.in/yaml/v3"
)

// files are the chart's monitoring artifacts, relative to this package.
var (
	chartFiles    = filepath.Join("..", "..", "deployments", "helm", "dra-driver-swap", "files")
	rulesFile     = filepath.Join(chartFiles, "prometheusrule.yaml")
	dashboardFile = filepath.Join(chartFiles, "grafana-dashboard.json")
)

// optional are the metrics the dashboard may show without a series in the
// scraped data, and why.
var optional = map[string]string{
	"dra_swap_claim_swap_used_bytes":         "exported only with the plugin's --claim-usage-metrics (chart default off)",
	"dra_swap_node_memory_pressure_ratio":    "exported only where the node has pressure stall information (dra_swap_psi_available 1)",
	"dra_swap_offload_swap_used_bytes":       "one series per prepared claim with SwapConfig offload (cgroup v2 nodes only)",
	"dra_swap_offload_swap_peak_bytes":       "one series per prepared claim with SwapConfig offload, where the kernel has memory.swap.peak",
	"dra_swap_offload_reclaimed_bytes_total": "one series per prepared claim with SwapConfig offload (cgroup v2 nodes only)",
	"dra_swap_offload_stall_ratio":           "one series per prepared claim with SwapConfig offload, once its stall was measured",
	"dra_swap_offload_max_stall_ratio":       "one series per prepared claim with SwapConfig offload (cgroup v2 nodes only)",
	"dra_swap_offload_paused":                "one series per prepared claim with SwapConfig offload (cgroup v2 nodes only)",
}

// The scraped series are loaded as scraped at start and every interval
// until start+step, counters (and histogram and summary counts and sums)
// rising evenly to twice their value: the same activity once more in the
// next 5 minutes, so that rate() and increase() over any range of the
// rules and the dashboard have points, and a counter that did not move
// stays at rate 0. Gauges keep their value. The expressions are evaluated
// at start+step.
var start = time.Unix(1_700_000_000, 0).UTC()

const (
	step     = 5 * time.Minute
	interval = time.Minute
	// maxSeries bounds the series loaded from the file.
	maxSeries = 200_000
)

// query is one expression to evaluate: an alert's or a recording rule's,
// or a dashboard panel's.
type query struct {
	where string
	expr  string
	// alert is the alert's name, labels the labels its annotations name
	// ({{ $labels.x }}); empty for the dashboard's.
	alert  string
	labels []string
	// optional allows the metrics in the optional list to be missing.
	optional bool
}

// TestRulesAndDashboardOverScrapedSeries evaluates each expression as an
// instant query at the second point and fails when the engine fails, when
// an expression names a metric with no series in the scraped data, or a
// label that none of that metric's series has, and when an alert's
// annotations name a label that the series of its expression lack. It
// reports which alerts would fire (their for: aside).
func TestRulesAndDashboardOverScrapedSeries(t *testing.T) {
	path := os.Getenv("SCRAPED")
	if path == "" {
		t.Fatal("SCRAPED is not set: name a file of series in the Prometheus text format, written by the e2e test TestScrapeForRules (E2E_SCRAPE_OUT), e.g. make monitoring-check SCRAPED=tools/promql/testdata/scraped.prom")
	}
	db, index, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d series of %d metrics", path, index.series, len(index.names))

	p := parser.NewParser(parser.Options{})
	queries, err := ruleQueries(p)
	if err != nil {
		t.Fatal(err)
	}
	dashboard, err := dashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	queries = append(queries, dashboard...)

	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 10_000_000, Timeout: time.Minute, LookbackDelta: step})
	t.Cleanup(func() { _ = engine.Close() })
	at := start.Add(step)
	var firing []string
	for _, q := range queries {
		t.Run(q.where, func(t *testing.T) {
			expr, err := p.ParseExpr(q.expr)
			if err != nil {
				t.Fatalf("parse %q: %v", q.expr, err)
			}
			for _, problem := range index.check(expr, q.optional) {
				t.Errorf("%s: %s", q.expr, problem)
			}
			result, err := evaluate(t.Context(), engine, db, q.expr, at)
			if err != nil {
				t.Fatalf("evaluate %q: %v", q.expr, err)
			}
			if q.alert == "" {
				t.Logf("%s: %d series", q.expr, len(result))
				return
			}
			for _, s := range result {
				firing = append(firing, fmt.Sprintf("%s %s = %g", q.alert, s.Metric, s.F))
			}
			// The labels the annotations name, on the series that the
			// alert's condition compares (the result when it holds).
			value, what := result, "its result"
			if lhs := comparedSide(expr); lhs != nil {
				if value, err = evaluate(t.Context(), engine, db, lhs.String(), at); err != nil {
					t.Fatalf("evaluate %q: %v", lhs, err)
				}
				what = "the series it compares (" + lhs.String() + ")"
			}
			if len(value) == 0 {
				t.Logf("%s: %s has no series here: the labels its annotations name (%v) are unchecked", q.alert, what, q.labels)
			}
			for _, s := range value {
				for _, l := range q.labels {
					if !s.Metric.Has(l) {
						t.Errorf("%s: its annotations name $labels.%s, which %s lacks: %s", q.alert, l, what, s.Metric)
					}
				}
			}
		})
	}
	if len(firing) == 0 {
		t.Log("no alert would fire over the scraped series")
	}
	for _, f := range firing {
		t.Logf("would fire (for: aside): %s", f)
	}
}

// comparedSide is the left side of an expression that is a filtering
// comparison (a > b, a == 0), whose series the result keeps: nil for any
// other expression.
func comparedSide(expr parser.Expr) parser.Expr {
	for {
		paren, ok := expr.(*parser.ParenExpr)
		if !ok {
			break
		}
		expr = paren.Expr
	}
	b, ok := expr.(*parser.BinaryExpr)
	if !ok || !b.Op.IsComparisonOperator() || b.ReturnBool || b.LHS.Type() != parser.ValueTypeVector {
		return nil
	}
	return b.LHS
}

func evaluate(ctx context.Context, engine *promql.Engine, db storage.Queryable, expr string, at time.Time) (promql.Vector, error) {
	q, err := engine.NewInstantQuery(ctx, db, nil, expr, at)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, res.Err
	}
	switch v := res.Value.(type) {
	case promql.Vector:
		return v, nil
	case promql.Scalar:
		return promql.Vector{{F: v.V, T: v.T}}, nil
	default:
		return nil, fmt.Errorf("result of type %s, want a vector or scalar", res.Value.Type())
	}
}

// templateLabel is a label an annotation template names.
var templateLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// ruleQueries are the PrometheusRule's expressions. rulefmt parses and
// validates the groups as Prometheus loads a rule file (expressions,
// templates, names).
func ruleQueries(p parser.Parser) ([]query, error) {
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		return nil, err
	}
	var rule struct {
		Spec yaml.Node `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		return nil, fmt.Errorf("%s: %w", rulesFile, err)
	}
	spec, err := yaml.Marshal(&rule.Spec)
	if err != nil {
		return nil, fmt.Errorf("%s: spec: %w", rulesFile, err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", rulesFile, errors.Join(errs...))
	}
	var out []query
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			q := query{where: "rule/" + g.Name + "/" + name, expr: r.Expr, alert: r.Alert}
			for _, text := range r.Annotations {
				for _, m := range templateLabel.FindAllStringSubmatch(text, -1) {
					if !slices.Contains(q.labels, m[1]) {
						q.labels = append(q.labels, m[1])
					}
				}
			}
			sort.Strings(q.labels)
			out = append(out, q)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no rules", rulesFile)
	}
	return out, nil
}

// grafanaVariables are the dashboard's template variables and Grafana's
// own, replaced by what selects everything or a range.
var grafanaVariables = regexp.MustCompile(`\$\{?(__rate_interval|__interval|__range|[a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}?`)

// dashboardQueries are the expressions of the dashboard's panels and of its
// template variables' queries, with the variables replaced: .* for the
// dashboard's, 5m for Grafana's intervals.
func dashboardQueries() ([]query, error) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", dashboardFile, err)
	}
	var out []query
	add := func(where, expr string) {
		expr = grafanaVariables.ReplaceAllStringFunc(expr, func(v string) string {
			if strings.Contains(v, "__") {
				return "5m"
			}
			return ".*"
		})
		out = append(out, query{where: where, expr: expr, optional: true})
	}
	var walk func(where string, v any, depth int) error
	walk = func(where string, v any, depth int) error {
		if depth > 32 {
			return fmt.Errorf("%s: nested deeper than 32 at %s", dashboardFile, where)
		}
		switch v := v.(type) {
		case map[string]any:
			title, _ := v["title"].(string)
			if title == "" {
				title, _ = v["name"].(string)
			}
			if title != "" {
				where += "/" + strings.ReplaceAll(title, " ", "_")
			}
			if expr, ok := v["expr"].(string); ok {
				add(where, expr)
			}
			if v["type"] == "query" {
				if q, ok := v["definition"].(string); ok {
					if expr, ok := variableQuery(q); ok {
						add(where, expr)
					}
				}
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if err := walk(where, v[k], depth+1); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range v {
				if err := walk(where, e, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("dashboard", doc, 0); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no expressions", dashboardFile)
	}
	return out, nil
}

// variableQuery is the PromQL expression of a Grafana query variable:
// label_values(expr, label) and query_result(expr) hold one,
// label_values(label) and metrics(...) none.
func variableQuery(q string) (string, bool) {
	q = strings.TrimSpace(q)
	if m := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`).FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	if m := regexp.MustCompile(`^query_result\((.*)\)$`).FindStringSubmatch(q); m != nil {
		return m[1], true
	}
	return "", false
}

// seriesIndex is what the scraped data holds: every metric name with the
// label names its series have.
type seriesIndex struct {
	names  map[string]map[string]bool
	series int
}

// check names the problems of an expression's selectors: a metric with no
// series (unless optional allows it), a matcher on a label that none of the
// metric's series has (and that does not match the empty value).
func (x seriesIndex) check(expr parser.Expr, allowOptional bool) []string {
	var problems []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			problems = append(problems, fmt.Sprintf("selector %s names no metric", vs))
			return nil
		}
		have, ok := x.names[name]
		if !ok {
			if why, isOptional := optional[name]; isOptional && allowOptional {
				return nil // logged by the caller's result count
			} else if isOptional {
				problems = append(problems, fmt.Sprintf("metric %s has no series in the scraped data (%s)", name, why))
			} else {
				problems = append(problems, fmt.Sprintf("metric %s has no series in the scraped data", name))
			}
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName && !have[m.Name] && !m.Matches("") {
				problems = append(problems, fmt.Sprintf("selector %s: no series of %s has the label %s", vs, name, m.Name))
			}
		}
		return nil
	})
	return problems
}

// load reads the file's series into memory, each with samples from start
// to start+step, and returns what it holds.
func load(path string) (*memStorage, seriesIndex, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, seriesIndex{}, err
	}
	textParser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := textParser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, seriesIndex{}, fmt.Errorf("%s: %w", path, err)
	}
	x := seriesIndex{names: map[string]map[string]bool{}}
	db := &memStorage{}
	add := func(name string, base []*dto.LabelPair, extra labels.Label, v float64, counter bool) error {
		if x.series++; x.series > maxSeries {
			return fmt.Errorf("%s: more than %d series", path, maxSeries)
		}
		b := labels.NewScratchBuilder(len(base) + 2)
		b.Add(labels.MetricName, name)
		if x.names[name] == nil {
			x.names[name] = map[string]bool{}
		}
		for _, l := range base {
			b.Add(l.GetName(), l.GetValue())
			x.names[name][l.GetName()] = true
		}
		if extra.Name != "" {
			b.Add(extra.Name, extra.Value)
			x.names[name][extra.Name] = true
		}
		b.Sort()
		var samples []chunks.Sample
		for d := time.Duration(0); d <= step; d += interval {
			f := v
			if counter {
				f = v + v*float64(d)/float64(step)
			}
			samples = append(samples, floatSample{t: start.Add(d).UnixMilli(), f: f})
		}
		db.series = append(db.series, storage.NewListSeries(b.Labels(), samples))
		return nil
	}
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := families[n]
		for _, m := range f.GetMetric() {
			var err error
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				err = add(n, m.GetLabel(), labels.Label{}, m.GetCounter().GetValue(), true)
			case dto.MetricType_GAUGE:
				err = add(n, m.GetLabel(), labels.Label{}, m.GetGauge().GetValue(), false)
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				err = errors.Join(
					add(n+"_count", m.GetLabel(), labels.Label{}, float64(h.GetSampleCount()), true),
					add(n+"_sum", m.GetLabel(), labels.Label{}, h.GetSampleSum(), true))
				infinite := false
				for _, b := range h.GetBucket() {
					infinite = infinite || math.IsInf(b.GetUpperBound(), 1)
					err = errors.Join(err, add(n+"_bucket", m.GetLabel(), labels.Label{Name: "le", Value: model.FloatString(b.GetUpperBound()).String()}, float64(b.GetCumulativeCount()), true))
				}
				if !infinite {
					err = errors.Join(err, add(n+"_bucket", m.GetLabel(), labels.Label{Name: "le", Value: "+Inf"}, float64(h.GetSampleCount()), true))
				}
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				err = errors.Join(
					add(n+"_count", m.GetLabel(), labels.Label{}, float64(s.GetSampleCount()), true),
					add(n+"_sum", m.GetLabel(), labels.Label{}, s.GetSampleSum(), true))
				for _, q := range s.GetQuantile() {
					err = errors.Join(err, add(n, m.GetLabel(), labels.Label{Name: "quantile", Value: model.FloatString(q.GetQuantile()).String()}, q.GetValue(), false))
				}
			default:
				err = add(n, m.GetLabel(), labels.Label{}, m.GetUntyped().GetValue(), false)
			}
			if err != nil {
				return nil, seriesIndex{}, err
			}
		}
	}
	if x.series == 0 {
		return nil, seriesIndex{}, fmt.Errorf("%s: no series", path)
	}
	slices.SortFunc(db.series, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	return db, x, nil
}

// memStorage is the loaded series in memory, for the engine: Prometheus's
// TSDB would bring its remote storage clients (cloud SDKs) into the build.
type memStorage struct {
	series []storage.Series
}

func (s *memStorage) Querier(int64, int64) (storage.Querier, error) { return s, nil }

func (s *memStorage) matching(matchers []*labels.Matcher) []storage.Series {
	var out []storage.Series
	for _, series := range s.series {
		ls := series.Labels()
		if !slices.ContainsFunc(matchers, func(m *labels.Matcher) bool { return !m.Matches(ls.Get(m.Name)) }) {
			out = append(out, series)
		}
	}
	return out
}

// Select returns the matching series, sorted (they are kept sorted).
func (s *memStorage) Select(_ context.Context, _ bool, _ *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
	return &seriesSet{series: s.matching(matchers), i: -1}
}

func (s *memStorage) LabelValues(_ context.Context, name string, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var out []string
	for _, series := range s.matching(matchers) {
		if v := series.Labels().Get(name); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out, nil, nil
}

func (s *memStorage) LabelNames(_ context.Context, _ *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var out []string
	for _, series := range s.matching(matchers) {
		series.Labels().Range(func(l labels.Label) {
			if !slices.Contains(out, l.Name) {
				out = append(out, l.Name)
			}
		})
	}
	sort.Strings(out)
	return out, nil, nil
}

func (s *memStorage) Close() error { return nil }

type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.i] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// floatSample is one float sample of a loaded series.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }
