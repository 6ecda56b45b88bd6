package integration

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

// renderedChart is one `helm template` of the chart, decoded.
type renderedChart struct {
	objs       []*unstructured.Unstructured
	daemonSet  *appsv1.DaemonSet
	deployment *appsv1.Deployment
}

func renderChart(t *testing.T, namespace string, values ...string) renderedChart {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", "dra-driver-swap", chartDir, "--namespace", namespace}, values...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v", values, err)
	}
	objs, err := manifest.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	r := renderedChart{objs: objs}
	for _, u := range objs {
		switch u.GetKind() {
		case "DaemonSet":
			r.daemonSet = &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r.daemonSet); err != nil {
				t.Fatal(err)
			}
		case "Deployment":
			r.deployment = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r.deployment); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r.daemonSet == nil || r.deployment == nil {
		t.Fatal("no DaemonSet or Deployment rendered")
	}
	return r
}

func (r renderedChart) kind(kind string) []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	for _, u := range r.objs {
		if u.GetKind() == kind {
			objs = append(objs, u)
		}
	}
	return objs
}

// chartAppVersion is Chart.yaml's appVersion.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := sigsyaml.Unmarshal(data, &chart); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	return chart.AppVersion
}

// clusterScopedKinds are the chart's kinds that live in no namespace.
var clusterScopedKinds = []string{"ClusterRole", "ClusterRoleBinding", "DeviceClass",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"}

// TestChartLabels checks every object's labels: the app.kubernetes.io keys
// from one helper, the version from the chart's appVersion whatever the
// image's tag or digest, commonLabels and podLabels unable to replace the
// chart's keys, and the DaemonSet's, Deployment's and PDB's selectors
// fixed (a selector is immutable: another one breaks `helm upgrade` from
// a release that had it).
func TestChartLabels(t *testing.T) {
	t.Parallel()
	appVersion := chartAppVersion(t)
	selector := func(component string) map[string]string {
		return map[string]string{"app.kubernetes.io/name": "dra-driver-swap", "app.kubernetes.io/instance": "dra-driver-swap",
			"app.kubernetes.io/component": component}
	}
	for name, values := range map[string][]string{
		"default":   nil,
		"tag":       {"--set", "image.tag=1.2.3-rc.4"},
		"overrides": {"--values", "testdata/values-overrides.yaml"},
		"custom":    {"--values", "testdata/values-custom.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			r := renderChart(t, "dra-swap", values...)
			for _, u := range r.objs {
				l := u.GetLabels()
				for k, want := range map[string]string{
					"app.kubernetes.io/name": "dra-driver-swap", "app.kubernetes.io/instance": "dra-driver-swap",
					"app.kubernetes.io/version": appVersion, "app.kubernetes.io/managed-by": "Helm",
					"app.kubernetes.io/part-of": "dra-driver-swap", "helm.sh/chart": "dra-driver-swap-" + strings.ReplaceAll(appVersion, "+", "_"),
				} {
					if l[k] != want {
						t.Errorf("%s %s: label %s=%q, want %q", u.GetKind(), u.GetName(), k, l[k], want)
					}
				}
			}
			for _, c := range []struct {
				what      string
				component string
				selector  map[string]string
				pod       map[string]string
			}{
				{"DaemonSet", "kubelet-plugin", r.daemonSet.Spec.Selector.MatchLabels, r.daemonSet.Spec.Template.Labels},
				{"Deployment", "controller", r.deployment.Spec.Selector.MatchLabels, r.deployment.Spec.Template.Labels},
			} {
				if !maps.Equal(c.selector, selector(c.component)) {
					t.Errorf("%s selector %v, want the fixed %v", c.what, c.selector, selector(c.component))
				}
				for k, v := range c.selector {
					if c.pod[k] != v {
						t.Errorf("%s pod template label %s=%q, want the selector's %q", c.what, k, c.pod[k], v)
					}
				}
				if c.pod["app.kubernetes.io/version"] != appVersion {
					t.Errorf("%s pod template version label %q, want appVersion %q", c.what, c.pod["app.kubernetes.io/version"], appVersion)
				}
				if name == "overrides" && (c.pod["cost-center"] != "infra" || c.pod["team"] != "platform") {
					t.Errorf("%s pod template labels %v lack podLabels or commonLabels", c.what, c.pod)
				}
			}
			for _, pdb := range r.kind("PodDisruptionBudget") {
				got, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
				if !maps.Equal(got, selector("controller")) {
					t.Errorf("PodDisruptionBudget selector %v, want %v", got, selector("controller"))
				}
			}
		})
	}
}

// TestChartValues checks what each of the keys chart users reach for does
// (testdata/values-overrides.yaml sets them all) and the defaults they
// replace: namespaceOverride, serviceAccount.{create,name,annotations},
// image.digest, resourceQuota, security context overrides merged over the
// safe defaults, extraEnv, extraVolumes/extraVolumeMounts,
// topologySpreadConstraints, logFormat and podAnnotations.
func TestChartValues(t *testing.T) {
	t.Parallel()
	appVersion := chartAppVersion(t)
	t.Run("defaults", func(t *testing.T) {
		r := renderChart(t, "dra-swap")
		for _, pod := range []corev1.PodSpec{r.daemonSet.Spec.Template.Spec, r.deployment.Spec.Template.Spec} {
			c := pod.Containers[0]
			if want := "registry.example/dra-driver-swap:" + appVersion; c.Image != want {
				t.Errorf("%s image %q, want %q", c.Name, c.Image, want)
			}
			if !slices.Contains(c.Args, "--logging-format=text") {
				t.Errorf("%s args %q lack --logging-format=text", c.Name, c.Args)
			}
		}
		quotas := r.kind("ResourceQuota")
		if len(quotas) != 1 {
			t.Fatalf("%d ResourceQuotas, want 1", len(quotas))
		}
		q := &corev1.ResourceQuota{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(quotas[0].Object, q); err != nil {
			t.Fatal(err)
		}
		if q.Namespace != "dra-swap" || q.Spec.Hard.Pods().Value() != 1000000 || q.Spec.ScopeSelector == nil ||
			len(q.Spec.ScopeSelector.MatchExpressions) != 1 {
			t.Fatalf("ResourceQuota %+v", q)
		}
		e := q.Spec.ScopeSelector.MatchExpressions[0]
		if e.ScopeName != corev1.ResourceQuotaScopePriorityClass || e.Operator != corev1.ScopeSelectorOpIn ||
			!slices.Equal(e.Values, []string{"system-node-critical", "system-cluster-critical"}) {
			t.Errorf("ResourceQuota scope %+v, want PriorityClass In [system-node-critical system-cluster-critical]", e)
		}
		for _, pc := range []string{r.daemonSet.Spec.Template.Spec.PriorityClassName, r.deployment.Spec.Template.Spec.PriorityClassName} {
			if !slices.Contains(e.Values, pc) {
				t.Errorf("priority class %s is not admitted by the ResourceQuota", pc)
			}
		}
		if n := len(renderChart(t, "dra-swap", "--set", "resourceQuota.enabled=false").kind("ResourceQuota")); n != 0 {
			t.Errorf("resourceQuota.enabled=false: %d ResourceQuotas", n)
		}
	})

	t.Run("overrides", func(t *testing.T) {
		// The release's namespace appears nowhere: every namespaced
		// object and every reference to the namespace (RBAC subjects,
		// the admission policies' usernames, the webhooks' Service, the
		// controller's Lease, Secret and certificate names) uses
		// namespaceOverride.
		out, err := runHelm(t, "template", "dra-driver-swap", chartDir, "--namespace", "release-ns", "--values", "testdata/values-overrides.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if i := strings.Index(out, "release-ns"); i >= 0 {
			t.Errorf("the release's namespace is still named: ...%s...", out[max(0, i-200):min(len(out), i+50)])
		}
		r := renderChart(t, "release-ns", "--values", "testdata/values-overrides.yaml")
		for _, u := range r.objs {
			want := "swap-system"
			if slices.Contains(clusterScopedKinds, u.GetKind()) {
				want = ""
			}
			if u.GetNamespace() != want {
				t.Errorf("%s %s in namespace %q, want %q", u.GetKind(), u.GetName(), u.GetNamespace(), want)
			}
		}

		// ServiceAccounts: the plugin's is not made (create false), the
		// controller's has its name and annotations; the pods, bindings
		// and policies use both names.
		var accounts []string
		for _, sa := range r.kind("ServiceAccount") {
			if sa.GetName() == "dra-driver-swap-label-cleanup" || sa.GetName() == helmTestName {
				continue // the uninstall hook's and the helm test's own
			}
			accounts = append(accounts, sa.GetName())
			if sa.GetAnnotations()["iam.example.com/role"] != "swap-controller" {
				t.Errorf("ServiceAccount %s annotations %v", sa.GetName(), sa.GetAnnotations())
			}
		}
		if !slices.Equal(accounts, []string{"platform-swap-controller"}) {
			t.Errorf("ServiceAccounts %v, want only [platform-swap-controller]", accounts)
		}
		if sa := r.daemonSet.Spec.Template.Spec.ServiceAccountName; sa != "platform-swap-plugin" {
			t.Errorf("plugin pods run as %q, want platform-swap-plugin", sa)
		}
		if sa := r.deployment.Spec.Template.Spec.ServiceAccountName; sa != "platform-swap-controller" {
			t.Errorf("controller pods run as %q, want platform-swap-controller", sa)
		}
		for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
			for _, b := range r.kind(kind) {
				subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
				for _, s := range subjects {
					s := s.(map[string]any)
					want := "platform-swap-controller"
					switch {
					case strings.HasSuffix(b.GetName(), "-kubeletplugin"):
						want = "platform-swap-plugin"
					case strings.HasSuffix(b.GetName(), "-label-cleanup"), b.GetName() == helmTestName:
						want = b.GetName()
					}
					if s["name"] != want || s["namespace"] != "swap-system" {
						t.Errorf("%s %s subject %v, want ServiceAccount swap-system/%s", kind, b.GetName(), s, want)
					}
				}
			}
		}
		policies := r.kind("ValidatingAdmissionPolicy")
		if len(policies) != 6 {
			t.Errorf("%d ValidatingAdmissionPolicies, want 6", len(policies))
		}
		for _, p := range policies {
			conds, _, _ := unstructured.NestedSlice(p.Object, "spec", "matchConditions")
			var exprs []string
			for _, c := range conds {
				exprs = append(exprs, c.(map[string]any)["expression"].(string))
			}
			want := `"system:serviceaccount:swap-system:platform-swap-controller"`
			switch {
			case strings.Contains(p.GetName(), "-kubeletplugin-"):
				want = `"system:serviceaccount:swap-system:platform-swap-plugin"`
			case strings.HasPrefix(p.GetName(), helmTestName+"-"):
				want = `"system:serviceaccount:swap-system:` + helmTestName + `"`
			}
			if !strings.Contains(strings.Join(exprs, "\n"), "request.userInfo.username == "+want) {
				t.Errorf("policy %s matches %q, want the user %s", p.GetName(), exprs, want)
			}
		}

		// Image pinned by digest, the tag ignored.
		const image = "registry.internal.example/dra-driver-swap@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		for _, pod := range []corev1.PodSpec{r.daemonSet.Spec.Template.Spec, r.deployment.Spec.Template.Spec} {
			if c := pod.Containers[0]; c.Image != image {
				t.Errorf("%s image %q, want %q", c.Name, c.Image, image)
			}
		}

		quotas := r.kind("ResourceQuota")
		if len(quotas) != 1 {
			t.Fatalf("%d ResourceQuotas, want 1", len(quotas))
		}
		if pods, _, _ := unstructured.NestedString(quotas[0].Object, "spec", "hard", "pods"); pods != "5000" {
			t.Errorf("ResourceQuota pods %q, want 5000", pods)
		}

		// The plugin: security contexts merged over the defaults.
		ds := r.daemonSet.Spec.Template.Spec
		if sc := ds.SecurityContext; sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			sc.SELinuxOptions == nil || sc.SELinuxOptions.Type != "spc_t" {
			t.Errorf("plugin pod securityContext %+v, want RuntimeDefault seccomp and seLinuxOptions spc_t", sc)
		}
		pc := ds.Containers[0]
		if sc := pc.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged ||
			sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.Capabilities == nil ||
			!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"SYS_RESOURCE"}) ||
			sc.SELinuxOptions == nil || sc.SELinuxOptions.Type != "spc_t" {
			t.Errorf("plugin container securityContext %+v, want the defaults with SYS_RESOURCE added and seLinuxOptions", sc)
		}
		checkExtras(t, pc, ds, "GODEBUG", "ca-certs", "/etc/ssl/platform")
		if r.daemonSet.Spec.Template.Annotations["example.com/scrape"] != "true" {
			t.Errorf("plugin pod annotations %v", r.daemonSet.Spec.Template.Annotations)
		}

		// The controller.
		dp := r.deployment.Spec.Template.Spec
		if sc := dp.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 10001 ||
			sc.FSGroup == nil || *sc.FSGroup != 10001 || sc.SeccompProfile == nil {
			t.Errorf("controller pod securityContext %+v, want runAsNonRoot and seccomp kept, uid and fsGroup 10001", sc)
		}
		cc := dp.Containers[0]
		if sc := cc.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || *sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
			!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("controller container securityContext %+v, want readOnlyRootFilesystem false over the other defaults", sc)
		}
		checkExtras(t, cc, dp, "HTTPS_PROXY", "scratch", "/scratch")
		tsc := dp.TopologySpreadConstraints
		if len(tsc) != 2 || tsc[0].TopologyKey != "topology.kubernetes.io/zone" || tsc[0].LabelSelector == nil ||
			!maps.Equal(tsc[0].LabelSelector.MatchLabels, r.deployment.Spec.Selector.MatchLabels) ||
			tsc[1].LabelSelector == nil || !maps.Equal(tsc[1].LabelSelector.MatchLabels, map[string]string{"app.kubernetes.io/component": "controller"}) {
			t.Errorf("topologySpreadConstraints %+v, want the zone one with the controller's selector, the hostname one with its own", tsc)
		}
		for _, c := range []corev1.Container{pc, cc} {
			if !slices.Contains(c.Args, "--logging-format=json") {
				t.Errorf("%s args %q lack --logging-format=json", c.Name, c.Args)
			}
		}
	})
}

// checkExtras checks that a container has the extra env variable and mounts
// the extra volume, which its pod has, and keeps the chart's own.
func checkExtras(t *testing.T, c corev1.Container, pod corev1.PodSpec, env, volume, mountPath string) {
	t.Helper()
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == env }) || len(c.Env) < 2 {
		t.Errorf("%s env %v lacks %s or the chart's", c.Name, c.Env, env)
	}
	if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == volume }) {
		t.Errorf("%s pod volumes lack %s", c.Name, volume)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume && m.MountPath == mountPath }) {
		t.Errorf("%s volumeMounts %v lack %s at %s", c.Name, c.VolumeMounts, volume, mountPath)
	}
}

// TestChartRefusesRunTimeFailures: settings that would render and then
// fail at run time fail at `helm install` (helm template here) with a
// message that names the setting and the fix, and their valid neighbours
// render: podSelection namespaces without a selector (the controller
// exits), a pressure clear value at or above its threshold (the plugin
// refuses to start), TLS mode secret without caBundle (the API server
// cannot verify the webhooks), and a PodDisruptionBudget that keeps every
// controller replica (every node drain that reaches one blocks).
func TestChartRefusesRunTimeFailures(t *testing.T) {
	t.Parallel()
	secret := "controller.webhook.tls.mode=secret,controller.webhook.tls.secretName=webhook-cert"
	for _, c := range []struct {
		set  string
		want string // "" renders
		json bool   // --set-json: --set makes 12.5 a string, which the schema refuses
	}{
		{set: "controller.podSelection=namespaces", want: "controller.podSelection namespaces needs controller.namespaceSelector"},
		{set: "controller.podSelection=namespaces,controller.namespaceSelector=  ", want: "controller.podSelection namespaces needs controller.namespaceSelector"},
		{set: "controller.podSelection=namespaces,controller.namespaceSelector=swap-labels=enabled"},
		{set: "kubeletPlugin.pressure.someClear=30", want: "kubeletPlugin.pressure.someClear 30 must be below kubeletPlugin.pressure.someThreshold 30"},
		{set: "kubeletPlugin.pressure.fullClear=12.5", want: "kubeletPlugin.pressure.fullClear 12.5 must be below kubeletPlugin.pressure.fullThreshold 10", json: true},
		{set: "kubeletPlugin.pressure.swapFullClearPercent=95", want: "kubeletPlugin.pressure.swapFullClearPercent 95 must be below kubeletPlugin.pressure.swapFullPercent 90"},
		{set: "kubeletPlugin.pressure.someClear=29.9", json: true},
		// The plugin validates the thresholds only while it samples.
		{set: "kubeletPlugin.pressure.someClear=30,kubeletPlugin.pressure.interval=0s"},
		{set: secret, want: "controller.webhook.tls.mode secret needs controller.webhook.tls.caBundle"},
		{set: secret + ",controller.webhook.tls.caBundle=Q0EK"},
		{set: "controller.replicas=1", want: "controller.podDisruptionBudget.minAvailable 1 with controller.replicas 1 lets no controller pod be evicted"},
		{set: "controller.replicas=3,controller.podDisruptionBudget.minAvailable=3", want: "minAvailable 3 with controller.replicas 3"},
		{set: "controller.replicas=2,controller.podDisruptionBudget.minAvailable=100%", want: "minAvailable 100% with controller.replicas 2"},
		{set: "controller.replicas=2,controller.podDisruptionBudget.minAvailable=51%", want: "minAvailable 51% with controller.replicas 2"},
		{set: "controller.replicas=2,controller.podDisruptionBudget.minAvailable=50%"},
		{set: "controller.replicas=1,controller.podDisruptionBudget.enabled=false"},
		{set: "controller.replicas=0"},
	} {
		flag := "--set"
		if c.json {
			flag = "--set-json"
		}
		out, err := runHelm(t, "template", "x", chartDir, flag, c.set)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("--set %s: %v, want it rendered", c.set, err)
		case c.want == "":
		case err == nil:
			t.Errorf("--set %s: rendered (%d bytes), want an error saying %q", c.set, len(out), c.want)
		case !strings.Contains(err.Error(), c.want):
			t.Errorf("--set %s: error %q does not say %q", c.set, err, c.want)
		default:
			t.Logf("--set %s: %v", c.set, err)
		}
	}
}

// TestChartLinuxOnly: the plugin's DaemonSet tolerates every taint, so
// without a node selector it would land on Windows nodes; it, the
// controller and the uninstall hook select kubernetes.io/os linux, and a
// nodeSelector value is merged over it.
func TestChartLinuxOnly(t *testing.T) {
	t.Parallel()
	linux := map[string]string{corev1.LabelOSStable: "linux"}
	r := renderChart(t, "dra-swap")
	jobs := r.kind("Job")
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs, want the uninstall hook", len(jobs))
	}
	job, _, _ := unstructured.NestedStringMap(jobs[0].Object, "spec", "template", "spec", "nodeSelector")
	for what, got := range map[string]map[string]string{
		"DaemonSet":  r.daemonSet.Spec.Template.Spec.NodeSelector,
		"Deployment": r.deployment.Spec.Template.Spec.NodeSelector,
		"Job":        job,
	} {
		if !maps.Equal(got, linux) {
			t.Errorf("%s nodeSelector %v, want %v", what, got, linux)
		}
	}
	r = renderChart(t, "dra-swap", "--values", "testdata/values-custom.yaml", "--set", "controller.nodeSelector.pool=system")
	if got, want := r.daemonSet.Spec.Template.Spec.NodeSelector, map[string]string{corev1.LabelOSStable: "linux", "swap.example.com/enabled": "true"}; !maps.Equal(got, want) {
		t.Errorf("DaemonSet nodeSelector %v, want %v", got, want)
	}
	if got, want := r.deployment.Spec.Template.Spec.NodeSelector, map[string]string{corev1.LabelOSStable: "linux", "pool": "system"}; !maps.Equal(got, want) {
		t.Errorf("Deployment nodeSelector %v, want %v", got, want)
	}
}
