package installcheck

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
)

const testNS = "dra-swap"

func slice(node, driver string, d *resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: []resourceapi.Device{*d}},
	}
}

func plugin(node string) *corev1.Pod {
	p := pluginPod(true, "")
	p.Name, p.Namespace, p.Spec.NodeName = "plugin-"+node, testNS, node
	p.Labels = map[string]string{LabelComponent: "kubelet-plugin"}
	return p
}

// kubelet stands in for the scheduler and the kubelets: a probe created
// for a node gets, at once, the status outcome[node][kind] says and the
// events events[node][kind] lists; a node without an outcome leaves it
// Pending.
type kubelet struct {
	mu      sync.Mutex
	outcome map[string]map[string]*corev1.Pod
	events  map[string]map[string][]corev1.Event
	created []*corev1.Pod
	deleted []string
}

func (k *kubelet) install(t *testing.T, c *fake.Clientset) {
	c.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		p := action.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		if p.GenerateName == "" {
			return false, nil, nil
		}
		p.Name = fmt.Sprintf("%s%d", p.GenerateName, len(k.created))
		p.UID = types.UID("uid-" + p.Name)
		node, kind := p.Annotations[AnnotationNode], p.Annotations[AnnotationKind]
		if o := k.outcome[node][kind]; o != nil {
			p.Spec.NodeName, p.Status = node, o.Status
		}
		k.created = append(k.created, p.DeepCopy())
		if err := c.Tracker().Create(corev1.SchemeGroupVersion.WithResource("pods"), p, p.Namespace); err != nil {
			return true, nil, err
		}
		for i, e := range k.events[node][kind] {
			e.Name, e.Namespace = fmt.Sprintf("%s.%d", p.Name, i), p.Namespace
			e.InvolvedObject = corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
			if err := c.Tracker().Create(corev1.SchemeGroupVersion.WithResource("events"), &e, p.Namespace); err != nil {
				t.Error(err)
			}
		}
		return true, p, nil
	})
	c.PrependReactor("delete", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.deleted = append(k.deleted, action.(k8stesting.DeleteAction).GetName())
		return false, nil, nil
	})
}

func testConfig() Config {
	return Config{Namespace: testNS, TestPodName: "dra-driver-swap-test", TestPodUID: "test-uid", RunID: "test-uid",
		Image: "registry.example/dra-driver-swap:0.1.0", PullPolicy: corev1.PullIfNotPresent, PullSecrets: []string{"regcred"},
		ClaimTemplate: "dra-driver-swap-test", RequestBytes: mi, PluginSelector: LabelComponent + "=kubelet-plugin",
		MaxNodes: 20, Timeout: 200 * time.Millisecond, Poll: 10 * time.Millisecond}
}

func TestRun(t *testing.T) {
	limited := swapDevice(v1alpha1.SwapBehaviorLimitedSwap, 0, 2, taint(v1alpha1.TaintKubeletSwapBehavior, v1alpha1.SwapBehaviorLimitedSwap))
	objects := []runtime.Object{
		slice("a-good", v1alpha1.DriverName, swapDevice(v1alpha1.SwapBehaviorNoSwap, 1024*mi, 2)),
		slice("b-limited", v1alpha1.DriverName, limited),
		slice("c-other-driver", "gpu.example.com", swapDevice(v1alpha1.SwapBehaviorNoSwap, 1024*mi, 2)),
		slice("d-hook", v1alpha1.DriverName, swapDevice(v1alpha1.SwapBehaviorNoSwap, 1024*mi, 1)),
		slice("e-slow", v1alpha1.DriverName, swapDevice(v1alpha1.SwapBehaviorNoSwap, 1024*mi, 2)),
		plugin("a-good"), plugin("b-limited"), plugin("d-hook"), plugin("e-slow"), plugin("f-no-slice"),
	}
	k := &kubelet{
		outcome: map[string]map[string]*corev1.Pod{
			"a-good":    {KindClaim: finished(v2Report(mi, "1048576")), KindNoClaim: finished(v2Report(0, ""))},
			"b-limited": {KindNoClaim: finished(v2Report(3*mi, ""))},
			"d-hook":    {KindClaim: startError(hookMissing), KindNoClaim: finished(v1Report(0, ""))},
			"e-slow":    {KindNoClaim: finished(v2Report(0, ""))},
		},
		events: map[string]map[string][]corev1.Event{
			"e-slow": {KindClaim: {event("FailedPrepareDynamicResources", "transient", 1)}},
		},
	}
	client := fake.NewClientset(objects...)
	k.install(t, client)
	_, ctx := ktesting.NewTestContext(t)
	res, err := Run(ctx, client, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := res.Write(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("output:\n%s", out.String())

	want := map[string]Cause{"a-good": "", "b-limited": CauseSwapBehavior, "d-hook": CauseHookNotRun, "e-slow": CausePrepareFailed, "f-no-slice": CauseNoSlice}
	if len(res.Verdicts) != len(want) {
		t.Fatalf("%d verdicts, want %d", len(res.Verdicts), len(want))
	}
	for _, v := range res.Verdicts {
		w, ok := want[v.Node]
		switch {
		case !ok:
			t.Errorf("node %s checked, want it not (a slice of another driver)", v.Node)
		case w == "" && !v.Passed():
			t.Errorf("node %s: %+v, want a pass", v.Node, v.Problems)
		case w != "" && (v.Passed() || v.Problems[0].Cause != w):
			t.Errorf("node %s: %+v, want %s", v.Node, v.Problems, w)
		}
	}
	if res.Passed() || !strings.Contains(out.String(), "FAILED: 4 of 5 node(s)") || !strings.Contains(out.String(), "PASS a-good: with a 1Mi claim") {
		t.Errorf("output does not say that 4 of 5 failed and a-good passed")
	}

	// A claim probe where the device can be allocated, one without a
	// claim where there is a slice; each pinned, owned, labelled.
	k.mu.Lock()
	defer k.mu.Unlock()
	created := map[string]int{}
	for _, p := range k.created {
		created[p.Annotations[AnnotationNode]+" "+p.Annotations[AnnotationKind]]++
		if p.Labels[LabelRun] != "test-uid" || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "test-uid" {
			t.Errorf("probe %s: labels %v, owners %v; want the run's label and the test pod as owner", p.Name, p.Labels, p.OwnerReferences)
		}
		if len(p.Spec.ImagePullSecrets) != 1 || p.Spec.Containers[0].Image != "registry.example/dra-driver-swap:0.1.0" {
			t.Errorf("probe %s: image %s, pull secrets %v", p.Name, p.Spec.Containers[0].Image, p.Spec.ImagePullSecrets)
		}
	}
	wantCreated := map[string]int{"a-good claim": 1, "a-good no-claim": 1, "b-limited no-claim": 1, "d-hook claim": 1, "d-hook no-claim": 1, "e-slow claim": 1, "e-slow no-claim": 1}
	if fmt.Sprint(created) != fmt.Sprint(wantCreated) {
		t.Errorf("probes created %v, want %v", created, wantCreated)
	}
	if len(k.deleted) != len(k.created) {
		t.Errorf("deleted %v, want every probe created (%d)", k.deleted, len(k.created))
	}
	pods, err := client.CoreV1().Pods(testNS).List(context.Background(), metav1.ListOptions{LabelSelector: LabelRun})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("probes left after the run: %d (%v)", len(pods.Items), err)
	}
}

func TestRunSelectsAndBounds(t *testing.T) {
	good := swapDevice(v1alpha1.SwapBehaviorNoSwap, 1024*mi, 2)
	node := func(name string, l map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	}
	objects := []runtime.Object{
		slice("n1", v1alpha1.DriverName, good), slice("n2", v1alpha1.DriverName, good), slice("n3", v1alpha1.DriverName, good),
		node("n1", map[string]string{"pool": "swap"}), node("n2", nil), node("n3", map[string]string{"pool": "swap"}), node("n4", map[string]string{"pool": "swap"}),
	}
	outcome := map[string]map[string]*corev1.Pod{}
	for _, n := range []string{"n1", "n2", "n3"} {
		outcome[n] = map[string]*corev1.Pod{KindClaim: finished(v2Report(mi, "1048576")), KindNoClaim: finished(v2Report(0, ""))}
	}
	_, ctx := ktesting.NewTestContext(t)
	checked := func(res Result) []string {
		var names []string
		for _, v := range res.Verdicts {
			names = append(names, v.Node)
		}
		return names
	}

	// The first MaxNodes by name; the rest are listed as not checked.
	client := fake.NewClientset(objects...)
	(&kubelet{outcome: outcome}).install(t, client)
	cfg := testConfig()
	cfg.MaxNodes = 2
	res, err := Run(ctx, client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(checked(res), res.NotChecked); got != "[n1 n2] [n3]" || !res.Passed() {
		t.Errorf("checked and not checked %s (passed %v), want [n1 n2] [n3], passed", got, res.Passed())
	}
	var out bytes.Buffer
	_ = res.Write(&out)
	if !strings.Contains(out.String(), "not checked (more than helmTest.maxNodes 2): n3") {
		t.Errorf("output does not name the node not checked:\n%s", out.String())
	}

	// A node selector: the nodes it selects, with a slice or not.
	client = fake.NewClientset(objects...)
	(&kubelet{outcome: outcome}).install(t, client)
	cfg = testConfig()
	cfg.NodeSelector = "pool=swap"
	res, err = Run(ctx, client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(checked(res)); got != "[n1 n3 n4]" {
		t.Errorf("checked %s, want [n1 n3 n4]", got)
	}
	if v := res.Verdicts[2]; v.Passed() || v.Problems[0].Cause != CauseNoSlice {
		t.Errorf("n4 without a slice: %+v, want %s", v, CauseNoSlice)
	}

	// A probe that never settles: the run ends at the timeout and says so.
	client = fake.NewClientset(objects...)
	(&kubelet{outcome: map[string]map[string]*corev1.Pod{"n1": {KindNoClaim: finished(v2Report(0, ""))}}}).install(t, client)
	cfg = testConfig()
	cfg.NodeSelector = "kubernetes.io/hostname=none"
	if _, err := Run(ctx, client, cfg); err == nil || !strings.Contains(err.Error(), "no node matches the node selector") {
		t.Errorf("a selector of no node: %v, want an error saying so", err)
	}
	cfg.NodeSelector = ""
	cfg.MaxNodes = 1
	start := time.Now()
	res, err = Run(ctx, client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v := res.Verdicts[0]; v.Passed() || v.Problems[0].Cause != CauseTimeout || !strings.Contains(v.Problems[0].Message, "did not finish in 200ms") {
		t.Errorf("a probe that never finished: %+v, want %s", v, CauseTimeout)
	}
	t.Logf("the run that timed out took %v", time.Since(start).Round(time.Millisecond))

	// Probes that cannot be read: an error, not a timeout.
	client = fake.NewClientset(objects...)
	(&kubelet{outcome: outcome}).install(t, client)
	client.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf("events are forbidden")
	})
	if _, err := Run(ctx, client, testConfig()); err == nil || !strings.Contains(err.Error(), "reading the probes for 200ms") || !strings.Contains(err.Error(), "events are forbidden") {
		t.Errorf("probes that cannot be read: %v, want an error saying so", err)
	}

	// Nothing to check at all.
	if _, err := Run(ctx, fake.NewClientset(), testConfig()); err == nil || !strings.Contains(err.Error(), "no node to check") {
		t.Errorf("a cluster without the driver: %v, want an error saying so", err)
	}
	// A configuration that cannot run.
	bad := testConfig()
	bad.MaxNodes, bad.Image = 0, ""
	if _, err := Run(ctx, fake.NewClientset(), bad); err == nil || !strings.Contains(err.Error(), "no image") || !strings.Contains(err.Error(), "max nodes 0") {
		t.Errorf("a bad configuration: %v, want both errors", err)
	}
}

func TestBrief(t *testing.T) {
	var res Result
	for i := range 500 {
		res.Verdicts = append(res.Verdicts, Verdict{Node: fmt.Sprintf("node-%03d", i), Problems: []Problem{{CauseNoSlice, strings.Repeat("x", 100)}}})
	}
	b := res.Brief(4096)
	if len(b) > 4096 || !strings.HasPrefix(b, "FAILED: 500 of 500 node(s)\nFAIL node-000: no ResourceSlice\n") || !strings.Contains(b, "more") {
		t.Errorf("brief of %d bytes: %q…", len(b), b[:200])
	}
}
