package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

const (
	chartDir       = "../../deployments/helm/dra-driver-swap"
	staticManifest = "../../deployments/static/dra-driver-swap.yaml"
)

// helmBinary is $HELM (`make integration` builds it with hack/build-tools.sh).
func helmBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = "../../_output/bin/helm"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no helm binary at %s (%v): run `make helm` or set HELM", bin, err)
	}
	return bin
}

func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		return out.String(), errors.New(strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

// chartValueSets are the helm arguments of the value sets the chart tests
// render: the defaults and non-default values an admin might set.
func chartValueSets() map[string][]string {
	return map[string][]string{
		"default":      nil,
		"custom":       {"--values", "testdata/values-custom.yaml"},
		"secret-tls":   {"--values", "testdata/values-secret.yaml"},
		"no-pdb-no-le": {"--set", "controller.podDisruptionBudget.enabled=false,controller.leaderElection=false,controller.replicas=1"},
		"overrides":    {"--values", "testdata/values-overrides.yaml"},
	}
}

// TestChart checks the helm chart the way an admin meets it: lint, the
// rendered manifests for the default and for non-default values applied
// server-side (dry run) to a real kube-apiserver v1.37, the schema refusing
// bad values, and deployments/static being the chart's current output.
func TestChart(t *testing.T) {
	t.Parallel()
	s := framework.StartAPIServer(t)
	ctx := context.Background()
	valueSets := chartValueSets()

	t.Run("lint", func(t *testing.T) {
		for name, values := range valueSets {
			if out, err := runHelm(t, append([]string{"lint", "--strict", chartDir}, values...)...); err != nil {
				t.Errorf("helm lint --strict with %s values: %v\n%s", name, err, out)
			}
		}
	})

	t.Run("static manifest is the chart's output", func(t *testing.T) {
		out, err := runHelm(t, "template", "dra-driver-swap", chartDir, "--namespace", "dra-swap", "--no-hooks")
		if err != nil {
			t.Fatal(err)
		}
		static, err := os.ReadFile(staticManifest)
		if err != nil {
			t.Fatal(err)
		}
		var body []string
		for _, line := range strings.SplitAfter(string(static), "\n") {
			if !strings.HasPrefix(line, "# Generated") && !strings.HasPrefix(line, "# (release") {
				body = append(body, line)
			}
		}
		if strings.Join(body, "") != out {
			t.Errorf("%s is not the chart's output with default values: run `make manifests`", staticManifest)
		}
	})

	// The kinds that CRDs add (prometheus-operator, cert-manager): minimal
	// CRDs so that the API server accepts the chart's objects of them.
	for _, crd := range []struct{ group, kind, plural string }{
		{"monitoring.coreos.com", "ServiceMonitor", "servicemonitors"},
		{"monitoring.coreos.com", "PrometheusRule", "prometheusrules"},
		{"cert-manager.io", "Certificate", "certificates"},
	} {
		createCRD(t, s, crd.group, crd.kind, crd.plural)
	}
	resources, err := manifest.NewResources(s.Config)
	if err != nil {
		t.Fatal(err)
	}

	for name, values := range valueSets {
		t.Run("server-side dry run/"+name, func(t *testing.T) {
			// The release's namespace, and the chart's (namespaceOverride).
			ns, objNS := "chart-"+name, "chart-"+name
			if name == "overrides" {
				objNS = "swap-system"
			}
			for _, n := range []string{ns, objNS} {
				if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{
					"pod-security.kubernetes.io/enforce": "privileged",
				}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			args := append([]string{"template", "dra-driver-swap", chartDir, "--namespace", ns,
				"--api-versions", "monitoring.coreos.com/v1", "--api-versions", "cert-manager.io/v1"}, values...)
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			objs, err := manifest.Decode(out)
			if err != nil {
				t.Fatalf("the rendered chart: %v", err)
			}
			kinds := map[string]int{}
			for _, u := range objs {
				gvk := u.GroupVersionKind()
				kinds[gvk.Kind]++
				res, err := resources.For(u, objNS)
				if err != nil {
					t.Error(err)
					continue
				}
				if res.Namespaced && u.GetNamespace() != objNS {
					t.Errorf("%s %s is in namespace %q, want the chart's %q", gvk.Kind, u.GetName(), u.GetNamespace(), objNS)
				}
				r := res.Client
				data, err := u.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				// ServiceAccounts for real: a pod (the helm test's) is
				// refused without its account.
				var dryRun []string
				if gvk.Kind != "ServiceAccount" {
					dryRun = []string{metav1.DryRunAll}
				}
				force := true
				if _, err := r.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
					DryRun: dryRun, FieldManager: "chart-test", Force: &force,
				}); err != nil {
					t.Errorf("server-side apply (dry run) of %s %s: %v", gvk.Kind, u.GetName(), err)
				}
			}
			t.Logf("%s values: %d objects %v, all accepted", name, len(objs), kinds)
			// No mutating webhook: the labelers patch pods as the
			// controller. The NetworkPolicy is optional.
			want := map[string]int{"DaemonSet": 1, "Deployment": 1, "DeviceClass": 1, "MutatingWebhookConfiguration": 0,
				"ValidatingWebhookConfiguration": 1, "ValidatingAdmissionPolicy": 6, "ValidatingAdmissionPolicyBinding": 6,
				"ServiceAccount": 4, "ResourceQuota": 1, "ServiceMonitor": 0, "PrometheusRule": 0, "ConfigMap": 0,
				// The uninstall's node label cleanup (a post-delete hook, with
				// its own ServiceAccount).
				"Job": 1,
				// helm test (hooks: the pod, its claim template, its own
				// ServiceAccount and RBAC; the policy on its account is
				// no hook).
				"Pod": 1, "ResourceClaimTemplate": 1}
			// The controller's caBundle-only and own-secret-only policies
			// come with its grants on the webhook configuration and on
			// Secrets, in TLS mode self only.
			switch name {
			case "custom":
				// The controller's NetworkPolicy and the plugin's.
				want["DeviceClass"], want["ServiceMonitor"], want["Certificate"], want["NetworkPolicy"] = 3, 2, 1, 2
				want["PrometheusRule"], want["ConfigMap"] = 1, 1
				want["ValidatingAdmissionPolicy"], want["ValidatingAdmissionPolicyBinding"] = 4, 4
				want["Job"], want["ServiceAccount"] = 0, 3 // cleanupNodeLabelsOnUninstall false
			case "secret-tls":
				want["ValidatingAdmissionPolicy"], want["ValidatingAdmissionPolicyBinding"] = 4, 4
			case "no-pdb-no-le":
				want["PodDisruptionBudget"] = 0
			case "overrides":
				want["ServiceAccount"] = 3 // no plugin's: serviceAccount.create false
				want["ServiceMonitor"], want["PrometheusRule"], want["ConfigMap"] = 2, 1, 1
			}
			for kind, n := range want {
				if kinds[kind] != n {
					t.Errorf("%s values: %d %s objects, want %d", name, kinds[kind], kind, n)
				}
			}
		})
	}

	t.Run("schema rejects bad values", func(t *testing.T) {
		for _, c := range []struct {
			values string
			want   []string
		}{
			{"testdata/values-unknown-key.yaml", []string{"additional properties 'controlller' not allowed"}},
			{"testdata/values-wrong-type.yaml", []string{"/kubeletPlugin/metricsPort", "got string, want integer"}},
		} {
			_, err := runHelm(t, "template", "x", chartDir, "--values", c.values)
			if err == nil {
				t.Errorf("%s: rendered, want a schema error", c.values)
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not say %q", c.values, err, w)
				}
			}
			t.Logf("%s: %v", filepath.Base(c.values), err)
		}
		// Wrong values and unknown keys, the new keys' neighbours among
		// them: the schema accepts the keys chart users reach for
		// (testdata/values-overrides.yaml lints and renders above) and
		// still refuses every key it does not know.
		for _, c := range []struct{ set, want string }{
			{"controller.webhook.tls.mode=letsencrypt", "/controller/webhook/tls/mode"},
			{"kubeletPlugin.cdiDir=relative/dir", "/kubeletPlugin/cdiDir"},
			{"controller.podSelection=some", "/controller/podSelection"},
			{"image.digest=latest", "/image/digest"},
			{"image.digest=sha256:0123", "/image/digest"},
			{"image.sha=sha256:0123", "additional properties 'sha' not allowed"},
			{"namespaceOverride=Swap_System", "/namespaceOverride"},
			{"resourceQuota.enable=true", "additional properties 'enable' not allowed"},
			{"kubeletPlugin.serviceAccount.nmae=x", "additional properties 'nmae' not allowed"}, //nolint:misspell // a misspelt key the schema must refuse
			{"controller.serviceAccount.create=yes", "/controller/serviceAccount/create"},
			{"controller.podLabel.team=a", "additional properties 'podLabel' not allowed"},
			{"kubeletPlugin.podLabels.team=null", "/kubeletPlugin/podLabels/team"},
			{"controller.logFormat=yaml", "/controller/logFormat"},
			{"kubeletPlugin.securityContext.runAsUsr=1", "additional properties 'runAsUsr' not allowed"},
			{"controller.podSecurityContext.readOnlyRootFilesystem=true", "additional properties 'readOnlyRootFilesystem' not allowed"},
			{"kubeletPlugin.extraEnv[0].nmae=A", "additional properties 'nmae' not allowed"}, //nolint:misspell // a misspelt key the schema must refuse
			{"controller.extraVolumeMounts[0].name=x", "missing property 'mountPath'"},
			{"kubeletPlugin.topologySpreadConstraints[0].maxSkew=1", "additional properties 'topologySpreadConstraints' not allowed"},
			{"controller.topologySpreadConstraints[0].maxSkew=1", "missing properties 'topologyKey', 'whenUnsatisfiable'"},
			{"metrics.prometheusRule.enable=true", "additional properties 'enable' not allowed"},
			{"metrics.grafanaDashboard.labelValue=not a value", "/metrics/grafanaDashboard/labelValue"},
			{"metrics.grafanaDashboard.sidecarLabel=x", "additional properties 'sidecarLabel' not allowed"},
		} {
			_, err := runHelm(t, "template", "x", chartDir, "--set", c.set)
			if err == nil {
				t.Errorf("--set %s: rendered, want a schema error", c.set)
				continue
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("--set %s: error %q does not say %q", c.set, err, c.want)
			}
		}
	})
}

// createCRD installs a minimal namespaced CRD of group/kind with one served
// version v1 that keeps any fields.
func createCRD(t *testing.T, s *framework.APIServer, group, kind, plural string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group,
			"scope": "Namespaced",
			"names": map[string]any{"kind": kind, "plural": plural, "singular": strings.ToLower(kind), "listKind": kind + "List"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			}},
		},
	}}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(gvr).Create(context.Background(), crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CRD %s.%s: %v", plural, group, err)
	}
	// Wait until discovery serves it.
	disco, err := discovery.NewDiscoveryClientForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := disco.ServerResourcesForGroupVersion(group + "/v1"); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("CRD %s.%s is not served", plural, group)
}
