package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestChartMonitoring checks the chart's optional monitoring objects: none
// by default; the ServiceMonitors in the chart's namespace (namespaceOverride)
// with the node relabeling the alerts and the dashboard group by; the
// PrometheusRule with files/prometheusrule.yaml's spec, whose plugin-down
// alert's job matcher selects the plugin's metrics Service and not the
// controller's; the dashboard ConfigMap with files/grafana-dashboard.json
// and the sidecar's label, both configurable.
func TestChartMonitoring(t *testing.T) {
	t.Parallel()
	monitoringKinds := []string{"ServiceMonitor", "PrometheusRule", "ConfigMap"}
	t.Run("defaults", func(t *testing.T) {
		for _, u := range renderChart(t, "dra-swap").objs {
			if slices.Contains(monitoringKinds, u.GetKind()) {
				t.Errorf("%s %s rendered by default", u.GetKind(), u.GetName())
			}
		}
	})

	var fileRule struct {
		Spec map[string]any `json:"spec"`
	}
	readFile(t, filepath.Join(chartDir, "files", "prometheusrule.yaml"), &fileRule)
	var fileDashboard map[string]any
	readFile(t, filepath.Join(chartDir, "files", "grafana-dashboard.json"), &fileDashboard)

	for name, values := range map[string][]string{
		"namespaceOverride": {"--values", "testdata/values-overrides.yaml"},
		"fullnameOverride":  {"--values", "testdata/values-overrides.yaml", "--set", "fullnameOverride=swap"},
	} {
		t.Run(name, func(t *testing.T) {
			r := renderChart(t, "release-ns", values...)
			monitors := r.kind("ServiceMonitor")
			if len(monitors) != 2 {
				t.Fatalf("%d ServiceMonitors, want 2", len(monitors))
			}
			for _, sm := range monitors {
				if sm.GetNamespace() != "swap-system" {
					t.Errorf("ServiceMonitor %s in namespace %q, want swap-system", sm.GetName(), sm.GetNamespace())
				}
				if got, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames"); !slices.Equal(got, []string{"swap-system"}) {
					t.Errorf("ServiceMonitor %s selects namespaces %q, want [swap-system]", sm.GetName(), got)
				}
				endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
				if len(endpoints) != 1 {
					t.Fatalf("ServiceMonitor %s: %d endpoints, want 1", sm.GetName(), len(endpoints))
				}
				relabelings, _, _ := unstructured.NestedSlice(endpoints[0].(map[string]any), "relabelings")
				want := map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_node_name"}, "targetLabel": "node", "action": "replace"}
				if !slices.ContainsFunc(relabelings, func(r any) bool { return reflect.DeepEqual(r, want) }) {
					t.Errorf("ServiceMonitor %s relabelings %v lack %v", sm.GetName(), relabelings, want)
				}
			}

			rules := r.kind("PrometheusRule")
			if len(rules) != 1 {
				t.Fatalf("%d PrometheusRules, want 1", len(rules))
			}
			if rules[0].GetNamespace() != "swap-system" {
				t.Errorf("PrometheusRule in namespace %q, want swap-system", rules[0].GetNamespace())
			}
			if spec := rules[0].Object["spec"]; !reflect.DeepEqual(spec, fileRule.Spec) {
				t.Errorf("PrometheusRule spec is not files/prometheusrule.yaml's:\n%v\nwant\n%v", spec, fileRule.Spec)
			}
			// The plugin-down alert's job matcher (the ServiceMonitor's
			// job is the metrics Service's name) against the Services.
			job := pluginDownJob(t, fileRule.Spec)
			for _, svc := range r.kind("Service") {
				if !strings.HasSuffix(svc.GetName(), "-metrics") {
					continue
				}
				plugin := strings.Contains(svc.GetName(), "kubeletplugin")
				if job.MatchString(svc.GetName()) != plugin {
					t.Errorf("the plugin-down alert's job matcher %s matches Service %s: %v, want %v", job, svc.GetName(), !plugin, plugin)
				}
			}

			dashboards := r.kind("ConfigMap")
			if len(dashboards) != 1 {
				t.Fatalf("%d ConfigMaps, want the dashboard's", len(dashboards))
			}
			cm := dashboards[0]
			if cm.GetNamespace() != "swap-system" || cm.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap in namespace %q with labels %v, want swap-system and grafana_dashboard=1", cm.GetNamespace(), cm.GetLabels())
			}
			checkDashboardData(t, cm, fileDashboard)
		})
	}

	t.Run("dashboard label, namespace and annotations", func(t *testing.T) {
		r := renderChart(t, "dra-swap", "--values", "testdata/values-custom.yaml", "--set", "metrics.grafanaDashboard.namespace=monitoring")
		dashboards := r.kind("ConfigMap")
		if len(dashboards) != 1 {
			t.Fatalf("%d ConfigMaps, want the dashboard's", len(dashboards))
		}
		cm := dashboards[0]
		l := cm.GetLabels()
		if cm.GetNamespace() != "monitoring" || l["grafana-dashboard"] != "dra-swap" || l["team"] != "observability" ||
			l["grafana_dashboard"] != "" || cm.GetAnnotations()["grafana_folder"] != "DRA" {
			t.Errorf("dashboard ConfigMap %s/%s labels %v annotations %v, want namespace monitoring, grafana-dashboard=dra-swap, team=observability, folder DRA",
				cm.GetNamespace(), cm.GetName(), l, cm.GetAnnotations())
		}
		checkDashboardData(t, cm, fileDashboard)
		if rules := r.kind("PrometheusRule"); len(rules) != 1 || rules[0].GetLabels()["release"] != "prometheus" {
			t.Errorf("PrometheusRules %v, want one labeled release=prometheus", rules)
		}
	})
}

// readFile decodes a YAML or JSON file into v.
func readFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// pluginDownJob returns the job matcher of DRASwapKubeletPluginDown's
// expression, anchored as Prometheus anchors =~.
func pluginDownJob(t *testing.T, spec map[string]any) *regexp.Regexp {
	t.Helper()
	groups, _, _ := unstructured.NestedSlice(spec, "groups")
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			r := r.(map[string]any)
			if r["alert"] != "DRASwapKubeletPluginDown" {
				continue
			}
			m := regexp.MustCompile(`up\{job=~"([^"]+)"\}`).FindStringSubmatch(r["expr"].(string))
			if m == nil {
				t.Fatalf("DRASwapKubeletPluginDown's expression %q has no up{job=~\"...\"}", r["expr"])
			}
			return regexp.MustCompile("^(?:" + m[1] + ")$")
		}
	}
	t.Fatal("files/prometheusrule.yaml has no DRASwapKubeletPluginDown alert")
	return nil
}

// checkDashboardData checks that the ConfigMap holds the dashboard file, and
// nothing else.
func checkDashboardData(t *testing.T, cm *unstructured.Unstructured, want map[string]any) {
	t.Helper()
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if len(data) != 1 {
		t.Fatalf("dashboard ConfigMap data keys %d, want 1", len(data))
	}
	for key, text := range data {
		var got map[string]any
		if err := json.Unmarshal([]byte(text), &got); err != nil {
			t.Fatalf("dashboard ConfigMap %s: %v", key, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("dashboard ConfigMap %s is not files/grafana-dashboard.json", key)
		}
	}
}
