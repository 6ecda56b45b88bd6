package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/installcheck"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// helmTestName is the name of the helm test's objects (its pod,
// ServiceAccount, RBAC and claim template) in the chart's default
// rendering.
const helmTestName = "dra-driver-swap-test"

// helmTestObjects renders the chart with helmArgs and returns the helm
// test's pod and claim template, and every object of it by kind.
func helmTestObjects(t *testing.T, helmArgs ...string) (*corev1.Pod, *resourceapi.ResourceClaimTemplate, map[string][]*unstructured.Unstructured, renderedChart) {
	t.Helper()
	r := renderChart(t, chartNamespace, helmArgs...)
	byKind := map[string][]*unstructured.Unstructured{}
	var pod *corev1.Pod
	var tmpl *resourceapi.ResourceClaimTemplate
	for _, u := range r.objs {
		if u.GetLabels()["app.kubernetes.io/component"] != "helm-test" {
			continue
		}
		byKind[u.GetKind()] = append(byKind[u.GetKind()], u)
		switch u.GetKind() {
		case "Pod":
			pod = &corev1.Pod{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, pod); err != nil {
				t.Fatal(err)
			}
		case "ResourceClaimTemplate":
			tmpl = &resourceapi.ResourceClaimTemplate{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, tmpl); err != nil {
				t.Fatal(err)
			}
		}
	}
	return pod, tmpl, byKind, r
}

// helmTestConfig is the run the test pod's arguments describe, with the
// pod's Downward API environment set to pod (t.Setenv: the tests that call
// it are not parallel).
func helmTestConfig(t *testing.T, spec *corev1.Pod, pod *corev1.Pod, extra ...string) installcheck.Config {
	t.Helper()
	for k, v := range map[string]string{"POD_NAMESPACE": pod.Namespace, "POD_NAME": pod.Name, "POD_UID": string(pod.UID)} {
		t.Setenv(k, v)
	}
	c := spec.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{installcheck.Command}) || len(c.Args) == 0 || c.Args[0] != installcheck.Subcommand {
		t.Fatalf("the test pod runs %q %q, want %s %s", c.Command, c.Args, installcheck.Command, installcheck.Subcommand)
	}
	fs := pflag.NewFlagSet("check", pflag.ContinueOnError)
	flags := installcheck.AddFlags(fs)
	// The logging flags are commandline.Parse's.
	fs.StringP("v", "v", "", "")
	fs.String("logging-format", "", "")
	if err := fs.Parse(append(slices.Clone(c.Args[1:]), extra...)); err != nil {
		t.Fatalf("the test pod's arguments %q: %v", c.Args, err)
	}
	cfg, err := flags.Config()
	if err != nil {
		t.Fatalf("the test pod's arguments %q: %v", c.Args, err)
	}
	return cfg
}

// TestChartHelmTest checks what `helm test` runs: its objects are test
// hooks (the policy on its account is not), its pod's arguments make a
// valid run of the chart's image against the chart's claim template and
// the plugin's pods, the claim template asks for helmTest.swapRequest and
// tolerates what installcheck.ToleratedTaints says, and helmTest.enabled
// false renders none of it.
func TestChartHelmTest(t *testing.T) {
	pod, tmpl, byKind, r := helmTestObjects(t)
	if pod == nil || tmpl == nil {
		t.Fatalf("no helm test pod or claim template: %v", slices.Collect(maps.Keys(byKind)))
	}
	for kind, want := range map[string]int{"Pod": 1, "ResourceClaimTemplate": 1, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1,
		"ClusterRole": 1, "ClusterRoleBinding": 1, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1} {
		objs := byKind[kind]
		if len(objs) != want {
			t.Errorf("%d %s objects of the helm test, want %d", len(objs), kind, want)
		}
		for _, u := range objs {
			hook := u.GetAnnotations()["helm.sh/hook"]
			switch {
			case strings.HasPrefix(kind, "ValidatingAdmissionPolicy") && hook != "":
				t.Errorf("%s %s is a %s hook: it must be in place before the test's account has its grants", kind, u.GetName(), hook)
			case !strings.HasPrefix(kind, "ValidatingAdmissionPolicy") && hook != "test":
				t.Errorf("%s %s: helm.sh/hook %q, want test", kind, u.GetName(), hook)
			case hook == "test" && u.GetAnnotations()["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded":
				t.Errorf("%s %s: delete policy %q", kind, u.GetName(), u.GetAnnotations()["helm.sh/hook-delete-policy"])
			}
		}
	}

	fake := pod.DeepCopy()
	fake.Name, fake.UID = helmTestName, "0a4b3c2d-1111-2222-3333-444455556666"
	cfg := helmTestConfig(t, pod, fake)
	if cfg.Image != r.deployment.Spec.Template.Spec.Containers[0].Image || pod.Spec.Containers[0].Image != cfg.Image {
		t.Errorf("the test runs image %s with probes of %s, want the controller's %s", pod.Spec.Containers[0].Image, cfg.Image, r.deployment.Spec.Template.Spec.Containers[0].Image)
	}
	if cfg.ClaimTemplate != tmpl.Name || cfg.Namespace != chartNamespace || cfg.RunID != string(fake.UID) || cfg.MaxNodes != 20 || cfg.Timeout != 3*time.Minute {
		t.Errorf("run %+v, want claim template %s, namespace %s, the pod's UID as run, 20 nodes, 3m", cfg, tmpl.Name, chartNamespace)
	}
	sel, err := labels.Parse(cfg.PluginSelector)
	if err != nil || !sel.Matches(labels.Set(r.daemonSet.Spec.Template.Labels)) || sel.Matches(labels.Set(r.deployment.Spec.Template.Labels)) {
		t.Errorf("plugin selector %q (%v) does not select the plugin's pods alone", cfg.PluginSelector, err)
	}
	if pod.Spec.ServiceAccountName != helmTestName || pod.Spec.PriorityClassName != "" || pod.Spec.NodeSelector[corev1.LabelOSStable] != "linux" {
		t.Errorf("test pod: account %q, priority class %q, node selector %v", pod.Spec.ServiceAccountName, pod.Spec.PriorityClassName, pod.Spec.NodeSelector)
	}

	req := tmpl.Spec.Spec.Devices.Requests
	if len(req) != 1 || req[0].Exactly == nil || req[0].Exactly.DeviceClassName != v1alpha1.DriverName || req[0].Exactly.Capacity == nil {
		t.Fatalf("claim template requests %+v, want one of class %s with a capacity", req, v1alpha1.DriverName)
	}
	q := req[0].Exactly.Capacity.Requests[v1alpha1.CapacitySwap]
	if q.Value() != cfg.RequestBytes || cfg.RequestBytes != mi {
		t.Errorf("the template asks for %s, the check expects %d, want 1Mi for both", q.String(), cfg.RequestBytes)
	}
	var tolerated []string
	for _, tol := range req[0].Exactly.Tolerations {
		if tol.Operator != resourceapi.DeviceTolerationOpExists || tol.Effect != resourceapi.DeviceTaintEffectNoSchedule {
			t.Errorf("toleration %+v, want Exists NoSchedule", tol)
		}
		tolerated = append(tolerated, tol.Key)
	}
	if !slices.Equal(tolerated, installcheck.ToleratedTaints) {
		t.Errorf("the template tolerates %v, the check expects %v", tolerated, installcheck.ToleratedTaints)
	}

	// Values: the request, the selector and the bound reach the run.
	pod, tmpl, _, _ = helmTestObjects(t, "--set", "helmTest.swapRequest=3Mi,helmTest.maxNodes=5,helmTest.timeout=90s",
		"--set-string", "helmTest.nodeSelector=pool in (a\\, b)", "--set", "imagePullSecrets[0].name=regcred")
	cfg = helmTestConfig(t, pod, fake)
	q = tmpl.Spec.Spec.Devices.Requests[0].Exactly.Capacity.Requests[v1alpha1.CapacitySwap]
	if q.Value() != 3*mi || cfg.RequestBytes != 3*mi || cfg.MaxNodes != 5 || cfg.Timeout != 90*time.Second ||
		cfg.NodeSelector != "pool in (a, b)" || !slices.Equal(cfg.PullSecrets, []string{"regcred"}) {
		t.Errorf("with values: template %s, run %+v", q.String(), cfg)
	}
	if _, _, byKind, _ = helmTestObjects(t, "--set", "helmTest.enabled=false"); len(byKind) != 0 {
		t.Errorf("helmTest.enabled false still renders %v", slices.Collect(maps.Keys(byKind)))
	}
	for _, bad := range []struct{ set, want string }{
		{"helmTest.maxNodes=0", "/helmTest/maxNodes"},
		{"helmTest.timeout=3", "/helmTest/timeout"},
		{"helmTest.swapRequest=lots", "/helmTest/swapRequest"},
		{"helmTest.nodeSelectr=x", "additional properties 'nodeSelectr' not allowed"},
	} {
		if _, err := runHelm(t, "template", "x", chartDir, "--set", bad.set); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--set %s: %v, want a schema error saying %q", bad.set, err, bad.want)
		}
	}
}

// helmTestEnv is a kube-apiserver with the chart's namespace, accounts,
// RBAC and policies, nodes, the driver's slices (made before the policies
// that keep anyone but the plugin from writing them), the test's claim
// template and a test pod whose bound token is the test's.
type helmTestEnv struct {
	s      *framework.APIServer
	spec   *corev1.Pod
	pod    *corev1.Pod
	client kubernetes.Interface
}

func startHelmTestEnv(t *testing.T, devices map[string]*resourceapi.Device, nodes ...string) *helmTestEnv {
	t.Helper()
	s := framework.StartAPIServer(t)
	ctx := context.Background()
	for _, n := range nodes {
		if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(devices)) {
		rs := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: n + "-dra.swap"},
			Spec: resourceapi.ResourceSliceSpec{Driver: v1alpha1.DriverName, NodeName: ptr.To(n),
				Pool: resourceapi.ResourcePool{Name: n, ResourceSliceCount: 1}, Devices: []resourceapi.Device{*devices[n]}},
		}
		if _, err := s.Client.ResourceV1().ResourceSlices().Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	installChartPolicies(t, s)
	applyChart(t, s, map[string]bool{"ResourceClaimTemplate": true})
	spec, _, _, _ := helmTestObjects(t)
	pod := spec.DeepCopy()
	pod.Spec.NodeName = nodes[0]
	pod, err := s.Client.CoreV1().Pods(chartNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &helmTestEnv{s: s, spec: spec, pod: pod, client: tokenClient(t, s, chartNamespace, helmTestName, pod)}
}

// device is a node's swap device as the plugin publishes it: usable with
// offer bytes (1Mi steps), or with none.
func device(behavior string, offer int64, taints ...resourceapi.DeviceTaint) *resourceapi.Device {
	d := &resourceapi.Device{
		Name:                     v1alpha1.DeviceName,
		AllowMultipleAllocations: ptr.To(true),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			v1alpha1.AttrSwapBehavior: {StringValue: ptr.To(behavior)},
			v1alpha1.AttrUsable:       {BoolValue: ptr.To(offer > 0)},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{v1alpha1.CapacitySwap: {Value: *resource.NewQuantity(offer, resource.BinarySI)}},
		Taints:   taints,
	}
	if offer > 0 {
		c := d.Capacity[v1alpha1.CapacitySwap]
		c.RequestPolicy = &resourceapi.CapacityRequestPolicy{Default: resource.NewQuantity(mi, resource.BinarySI), ValidRange: &resourceapi.CapacityRequestPolicyRange{
			Min: resource.NewQuantity(mi, resource.BinarySI), Step: resource.NewQuantity(mi, resource.BinarySI), Max: resource.NewQuantity(offer, resource.BinarySI)}}
		d.Capacity[v1alpha1.CapacitySwap] = c
	}
	return d
}

// TestHelmTestRun runs the check with the test pod's own token against a
// real kube-apiserver with the chart's RBAC and policies, proving that the
// account may do all the run needs (list the slices and the plugin's
// pods, create the probes, read them and their events, delete them) and
// that the policy admits the probes it makes. No kubelet runs: the test
// plays the kubelets, giving each probe the report its node's would.
func TestHelmTestRun(t *testing.T) {
	limited := device(v1alpha1.SwapBehaviorLimitedSwap, 0, resourceapi.DeviceTaint{Key: v1alpha1.TaintKubeletSwapBehavior, Value: v1alpha1.SwapBehaviorLimitedSwap, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	e := startHelmTestEnv(t, map[string]*resourceapi.Device{"node-a": device(v1alpha1.SwapBehaviorNoSwap, 1024*mi), "node-b": limited}, "node-a", "node-b", "node-c")
	ctx := context.Background()
	cfg := helmTestConfig(t, e.spec, e.pod, "--timeout=60s", "--poll-interval=200ms")
	// The plugin's pod on node-c, which publishes nothing.
	plugin := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "dra-driver-swap-kubeletplugin-c"}, Spec: corev1.PodSpec{NodeName: "node-c",
		Containers: []corev1.Container{{Name: "plugin", Image: "registry.invalid/dra-driver-swap:1"}}}}
	plugin.Labels, _ = labels.ConvertSelectorToLabelsMap(cfg.PluginSelector)
	if _, err := e.s.Client.CoreV1().Pods(chartNamespace).Create(ctx, plugin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	reports := map[string]installcheck.Report{
		"node-a " + installcheck.KindClaim:   {CgroupVersion: 2, SwapLimitBytes: mi, EnvSet: true, Env: "1048576", Files: map[string]string{"memory.swap.max": "1048576"}},
		"node-a " + installcheck.KindNoClaim: {CgroupVersion: 2, Files: map[string]string{"memory.swap.max": "0"}},
		"node-b " + installcheck.KindNoClaim: {CgroupVersion: 2, SwapLimitBytes: 3 * mi, Files: map[string]string{"memory.swap.max": "3145728"}},
	}
	kubeletCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var seen sync.Map
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = wait.PollUntilContextCancel(kubeletCtx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			pods, err := e.s.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: installcheck.LabelRun + "=" + cfg.RunID})
			if err != nil {
				return false, nil
			}
			for _, p := range pods.Items {
				key := p.Annotations[installcheck.AnnotationNode] + " " + p.Annotations[installcheck.AnnotationKind]
				r, ok := reports[key]
				if _, done := seen.LoadOrStore(p.Name, key); done || !ok {
					continue
				}
				p.Status.Phase = corev1.PodSucceeded
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: installcheck.ProbeContainer, Image: p.Spec.Containers[0].Image,
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", Message: string(r.Encode())}}}}
				if _, err := e.s.Client.CoreV1().Pods(chartNamespace).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
					t.Errorf("the kubelet's status of probe %s: %v", p.Name, err)
				}
			}
			return false, nil
		})
	}()
	_, lctx := ktesting.NewTestContext(t)
	res, err := installcheck.Run(lctx, e.client, cfg)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("the check with the test's token: %v", err)
	}
	var out strings.Builder
	_ = res.Write(&out)
	t.Logf("the check's output:\n%s", out.String())
	want := map[string]installcheck.Cause{"node-a": "", "node-b": installcheck.CauseSwapBehavior, "node-c": installcheck.CauseNoSlice}
	if len(res.Verdicts) != len(want) {
		t.Fatalf("%d verdicts, want %d", len(res.Verdicts), len(want))
	}
	for _, v := range res.Verdicts {
		if w := want[v.Node]; w == "" && !v.Passed() || w != "" && (v.Passed() || v.Problems[0].Cause != w) {
			t.Errorf("node %s: %+v, want %q", v.Node, v.Problems, w)
		}
	}
	var made []string
	seen.Range(func(k, v any) bool { made = append(made, v.(string)); return true })
	slices.Sort(made)
	if got := fmt.Sprint(made); got != "[node-a claim node-a no-claim node-b no-claim]" {
		t.Errorf("probes made %s, want a pair on node-a and one without a claim on node-b", got)
	}
	// The run deleted its probes with its own token.
	pods, err := e.s.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: installcheck.LabelRun})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("probe %s is still there after the run", p.Name)
		}
	}
}

// TestHelmTestPolicy proves, with the test pod's bound token, that the
// chart's policy lets the helm test's account create the probes
// installcheck.ProbePod makes and nothing else a pod could use to escape
// (another account or its token, host paths, host namespaces, privileges,
// Secrets, another image or command, a node of its choice, a system
// priority class, another claim), and delete probes only.
func TestHelmTestPolicy(t *testing.T) {
	e := startHelmTestEnv(t, nil, "node-a")
	ctx := context.Background()
	cfg := helmTestConfig(t, e.spec, e.pod)
	pods := e.client.CoreV1().Pods(chartNamespace)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	probe := func(change func(*corev1.Pod)) *corev1.Pod {
		p := installcheck.ProbePod(cfg, "node-a", true)
		change(p)
		return p
	}
	// The policy takes a moment to load: wait until it refuses.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Create(ctx, probe(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), dryRun)
		return err != nil, nil
	}); err != nil {
		t.Fatal("the chart's policy never refused a probe on the host network")
	}
	for _, withClaim := range []bool{true, false} {
		if _, err := pods.Create(ctx, installcheck.ProbePod(cfg, "node-a", withClaim), dryRun); err != nil {
			t.Errorf("the test's account creating the probe (claim %v): %v", withClaim, err)
		}
	}
	hostPath := corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}
	for _, c := range []struct {
		what   string
		change func(*corev1.Pod)
		want   string
	}{
		{"the plugin's account", func(p *corev1.Pod) { p.Spec.ServiceAccountName = pluginSA }, "default ServiceAccount"},
		{"a token", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }, "without its token"},
		{"a host path", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{hostPath}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "root", MountPath: "/host"}}
		}, "no volumes"},
		{"the host's PID namespace", func(p *corev1.Pod) { p.Spec.HostPID = true }, "no host namespace"},
		{"privileged", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Privileged, p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true), nil
		}, "privileges"},
		{"a capability", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		}, "added capabilities"},
		{"privilege escalation", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil }, "privilege escalation"},
		{"another image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.invalid/shell:1" }, "driver's image"},
		{"another command", func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"--leader-elect=false"} }, "check --probe"},
		{"a Secret's value", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "dra-driver-swap-controller-webhook-tls"}, Key: "tls.key"}}}}
		}, "Secrets"},
		{"an init container", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{*p.Spec.Containers[0].DeepCopy()}
			p.Spec.InitContainers[0].Name = "init"
		}, "no init"},
		{"a node name", func(p *corev1.Pod) { p.Spec.NodeName = "node-a" }, "no nodeName"},
		{"a system priority class", func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-node-critical" }, "no system priority class"},
		{"another claim template", func(p *corev1.Pod) { p.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("other") }, "only claims"},
		{"another claim", func(p *corev1.Pod) {
			p.Spec.ResourceClaims[0].ResourceClaimTemplateName, p.Spec.ResourceClaims[0].ResourceClaimName = nil, ptr.To("someone-elses")
		}, "only claims"},
		{"no probe label", func(p *corev1.Pod) { delete(p.Labels, installcheck.LabelComponent) }, "only probe pods"},
	} {
		_, err := pods.Create(ctx, probe(c.change), dryRun)
		refused(t, "the test's account creating a probe with "+c.what, err, c.want)
	}

	// Deletes: probes only.
	victim, err := e.s.Client.CoreV1().Pods(chartNamespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "dra-driver-swap-kubeletplugin-a"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "plugin", Image: "registry.invalid/dra-driver-swap:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refused(t, "the test's account deleting the plugin's pod", pods.Delete(ctx, victim.Name, metav1.DeleteOptions{}), "delete only its probe pods")
	created, err := pods.Create(ctx, installcheck.ProbePod(cfg, "node-a", false), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("the test's account deleting its probe: %v", err)
	}
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the test's account deleting every pod: %v, want forbidden", err)
	}
}
