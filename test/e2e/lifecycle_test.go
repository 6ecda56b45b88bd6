package e2e

// The driver's life cycle as an admin drives it with helm: upgrade under
// load, uninstall and reinstall, the plugin's ResourceSlice permissions,
// and the cluster going on while the controller (and its webhooks) is
// down. These tests change the installation and restore it afterwards;
// they run after the tests in e2e_test.go (Go runs files in name order).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/test/e2e/cluster"
	"github.com/dra-driver-swap/dra-driver-swap/test/manifest"
)

// driverVersion is the image tag the cluster scripts install, and
// upgradeVersion the tag of the same code built with another version
// label (another digest), which hack/cluster/build.sh also builds.
func (c *env) driverVersion() string {
	if v := c.Env["DRIVER_VERSION"]; v != "" {
		return v
	}
	return "0.2.0"
}

func (c *env) upgradeVersion() string {
	if v := c.Env["DRIVER_UPGRADE_VERSION"]; v != "" {
		return v
	}
	return c.driverVersion() + "-upgrade"
}

// startTimes records when each pod of a namespace was first seen past
// Pending (its container started), on this machine's clock: the API's
// timestamps have whole seconds only. It lists the namespace's pods every
// 200 ms (a watch can end early on a slow node and would need restarting).
type startTimes struct {
	mu      sync.Mutex
	created map[string]time.Time
	started map[string]time.Time
}

func (c *env) watchStarts(t *testing.T, ns string) *startTimes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &startTimes{created: map[string]time.Time{}, started: map[string]time.Time{}}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if list, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
				now := time.Now()
				s.mu.Lock()
				for _, p := range list.Items {
					if _, seen := s.started[p.Name]; !seen && p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
						s.started[p.Name] = now
					}
				}
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *startTimes) create(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created[name] = time.Now()
}

func (s *startTimes) latency(name string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start, ok := s.started[name]
	if !ok {
		return 0, false
	}
	return start.Sub(s.created[name]), true
}

// TestUpgradeUnderLoad: `helm upgrade` to an image of the same code with
// another version label rolls the kubelet plugin (old and new pod run
// side by side, maxSurge 1) while new claim pods keep arriving. Every one
// of them gets its limit without waiting out a kubelet retry, a running
// pod keeps its limit, and its claim unprepares cleanly afterwards.
func TestUpgradeUnderLoad(t *testing.T) {
	c := loadCluster(t, needsOurCluster("upgrades the cluster's helm release to an image of the same code with another version label"))
	ns := c.namespace(t)
	c.swapTemplate(t, ns, "swap-96", "", 96*mi)
	const before = 96 * mi
	old := c.runningClaimPod(t, ns, "old", "swap-96", before)
	oldClaim := c.claimUID(t, old)
	plugin := c.pluginPods(t)[0]
	t.Logf("plugin pod %s runs %s", plugin.Name, plugin.Spec.Containers[0].Image)
	if !cluster.Emulated() {
		// Back to the release the suite installed (a downgrade, with
		// the same code). The emulated node skips it: a second rollout
		// there takes minutes, and the rest of the suite runs as well on
		// the upgraded release (the same code under another tag).
		t.Cleanup(func() { c.driverScript(t, "upgrade", c.driverVersion()) })
	}

	starts := c.watchStarts(t, ns)
	var (
		mu     sync.Mutex
		probes []string
		phases = map[string]string{} // probe -> "before", "during", "after"
		phase  = "before"
		errs   []error
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// A new claim pod every second, at most 40 of them (the test runs on
	// the host leg only).
	const maxProbes = 40
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; i < maxProbes; i++ {
			name := fmt.Sprintf("load-%03d", i)
			starts.create(name)
			_, err := c.client.CoreV1().Pods(ns).Create(context.Background(), c.WorkloadPod(ns, name, map[string]string{"swap": "swap-96"},
				ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}), metav1.CreateOptions{})
			mu.Lock()
			if err != nil {
				errs = append(errs, fmt.Errorf("create %s: %w", name, err))
			} else {
				probes = append(probes, name)
				phases[name] = phase
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	setPhase := func(p string) { mu.Lock(); phase = p; mu.Unlock() }

	time.Sleep(cluster.Scaled(3 * time.Second))
	setPhase("during")
	begin := time.Now()
	t.Logf("%s helm upgrade to %s", begin.Format(time.TimeOnly), c.upgradeVersion())
	c.driverScript(t, "upgrade", c.upgradeVersion())
	rollout := time.Since(begin)
	fresh := c.waitPluginReady(t, func(p *corev1.Pod) bool {
		return p.UID != plugin.UID && strings.HasSuffix(p.Spec.Containers[0].Image, ":"+c.upgradeVersion())
	})
	t.Logf("%s rollout done in %v: plugin pod %s runs %s", time.Now().Format(time.TimeOnly), rollout.Round(time.Millisecond), fresh.Name, fresh.Spec.Containers[0].Image)
	setPhase("after")
	time.Sleep(cluster.Scaled(3 * time.Second))
	close(stop)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}

	// Every probe ran with its limit, and none met a failed prepare (which
	// the kubelet retries with a backoff).
	byPhase := map[string][]time.Duration{}
	var worst time.Duration
	var worstPod string
	for _, name := range probes {
		p := c.waitPod(t, ns, name, "completion", podTimeout, finished)
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s: phase %s, reason %s", name, p.Status.Phase, terminatedReason(p, "worker"))
			continue
		}
		assertSwapLimit(t, c.report(t, p, "worker", "START"), 96*mi)
		if msg := c.podMessages(t, p); strings.Contains(msg, "FailedPrepareDynamicResources") {
			t.Errorf("%s (%s the upgrade) had a failed prepare:\n%s", name, phases[name], msg)
		}
		d, ok := starts.latency(name)
		if !ok {
			t.Errorf("%s: never seen started", name)
			continue
		}
		byPhase[phases[name]] = append(byPhase[phases[name]], d)
		if phases[name] == "during" && d > worst {
			worst, worstPod = d, name
		}
	}
	for _, ph := range []string{"before", "during", "after"} {
		t.Logf("create -> started, %s the upgrade: %s", ph, summarize(byPhase[ph]))
	}
	t.Logf("largest create -> started during the rollout: %v (%s); rollout (helm upgrade --wait) %v", worst.Round(time.Millisecond), worstPod, rollout.Round(time.Millisecond))
	if len(byPhase["during"]) == 0 {
		t.Error("no pod was created during the rollout")
	}

	// The old pod kept running with its limit; its claim, prepared by the
	// old plugin, is unprepared by the new one.
	old = c.waitPod(t, ns, old.Name, "still running", podTimeout, running)
	if old.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("old pod's container restarted")
	}
	if got := c.hostSwapLimit(t, old, "worker"); got != before {
		t.Errorf("old pod: host cgroup swap limit changed from %d to %d across the upgrade", before, got)
	}
	if err := c.client.CoreV1().Pods(ns).Delete(context.Background(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	c.waitUnprepared(t, oldClaim)
}

// waitUnprepared waits until a claim's CDI spec and checkpoint entry are
// gone.
func (c *env) waitUnprepared(t *testing.T, claimUID string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		return !c.specExists(claimUID) && !c.checkpointHas(t, claimUID), nil
	})
	if err != nil {
		t.Errorf("claim %s: CDI spec present %v, checkpoint entry present %v after its pod was deleted", claimUID, c.specExists(claimUID), c.checkpointHas(t, claimUID))
	}
}

func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no pods"
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("%d pods, median %v, max %v", len(s), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// chartObject is one object of the release's manifest.
type chartObject struct {
	gvk       string
	namespace string
	name      string
	resource  dynamic.ResourceInterface
}

func (o chartObject) String() string {
	if o.namespace == "" {
		return o.gvk + " " + o.name
	}
	return o.gvk + " " + o.namespace + "/" + o.name
}

// releaseObjects lists the objects helm made for the release.
func (c *env) releaseObjects(t *testing.T) []chartObject {
	t.Helper()
	objs, err := manifest.Decode(c.helm(t, "get", "manifest", driverRelease))
	if err != nil {
		t.Fatalf("the release manifest: %v", err)
	}
	if len(objs) == 0 {
		t.Fatal("the release manifest has no objects")
	}
	resources, err := manifest.NewResources(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var out []chartObject
	for _, u := range objs {
		r, err := resources.For(u, driverNamespace)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, chartObject{gvk: u.GetKind(), namespace: r.Namespace, name: u.GetName(), resource: r.Client})
	}
	return out
}

// TestUninstallAndReinstall: `helm uninstall` removes every object the
// chart made, the controller's own Lease and webhook Secret (owned by its
// Deployment), the labels the controller set on the Nodes (the chart's
// post-delete hook, whose own objects go once it succeeded) and, through
// the kubelet, the driver's ResourceSlices; running containers keep their
// limits; the hook binary and the CDI specs and checkpoint of running
// claims stay on the node, where a reinstall picks them up and unprepares
// them when their pods go.
func TestUninstallAndReinstall(t *testing.T) {
	c := loadCluster(t, needsOurCluster("uninstalls and reinstalls the cluster's helm release"))
	ns := c.namespace(t)
	ctx := context.Background()
	c.swapTemplate(t, ns, "swap-80", "", 80*mi)
	const before = 80 * mi
	keep := c.runningClaimPod(t, ns, "keeps-running", "swap-80", before)
	claim := c.claimUID(t, keep)

	objs := c.releaseObjects(t)
	var names []string
	for _, o := range objs {
		if _, err := o.resource.Get(ctx, o.name, metav1.GetOptions{}); err != nil {
			t.Errorf("before uninstall: %s: %v", o, err)
		}
		names = append(names, o.String())
	}
	t.Logf("the release made %d objects: %s", len(objs), strings.Join(names, ", "))
	// What the controller made for itself, and its labels on the Nodes.
	controllerName := driverRelease + "-controller"
	ownObjects := []struct {
		what string
		get  func(context.Context) error
	}{
		{"Lease " + controllerName, func(ctx context.Context) error {
			_, err := c.client.CoordinationV1().Leases(driverNamespace).Get(ctx, controllerName, metav1.GetOptions{})
			return err
		}},
		{"Secret " + controllerName + "-webhook-tls", func(ctx context.Context) error {
			_, err := c.client.CoreV1().Secrets(driverNamespace).Get(ctx, controllerName+"-webhook-tls", metav1.GetOptions{})
			return err
		}},
	}
	for _, o := range ownObjects {
		if err := o.get(ctx); err != nil {
			t.Errorf("before uninstall: the controller's %s: %v", o.what, err)
		}
	}
	driverLabels := func() map[string]string {
		nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]string{}
		for _, n := range nodes.Items {
			for _, k := range podlabels.NodeKeys() {
				if v, ok := n.Labels[k]; ok {
					found[n.Name+" "+k] = v
				}
			}
		}
		return found
	}
	if found := driverLabels(); len(found) == 0 {
		t.Errorf("before uninstall: no Node has any of the controller's labels %v", podlabels.NodeKeys())
	} else {
		t.Logf("before uninstall, the controller's Node labels: %v", found)
	}

	installed := true
	t.Cleanup(func() {
		if !installed {
			c.driverScript(t, "install")
		}
	})
	installed = false
	c.driverScript(t, "uninstall")
	var left []string
	for _, o := range objs {
		err := waitGone(ctx, time.Minute, func(ctx context.Context) error {
			_, err := o.resource.Get(ctx, o.name, metav1.GetOptions{})
			return err
		})
		if err != nil {
			left = append(left, o.String())
		}
	}
	// The Lease and the Secret go with the Deployment (the garbage
	// collector); the post-delete hook's objects once it succeeded.
	cleanup := driverRelease + "-label-cleanup"
	hookObjects := []struct {
		what string
		get  func(context.Context) error
	}{
		{"hook Job " + cleanup, func(ctx context.Context) error {
			_, err := c.client.BatchV1().Jobs(driverNamespace).Get(ctx, cleanup, metav1.GetOptions{})
			return err
		}},
		{"hook ServiceAccount " + cleanup, func(ctx context.Context) error {
			_, err := c.client.CoreV1().ServiceAccounts(driverNamespace).Get(ctx, cleanup, metav1.GetOptions{})
			return err
		}},
		{"hook ClusterRole " + cleanup, func(ctx context.Context) error {
			_, err := c.client.RbacV1().ClusterRoles().Get(ctx, cleanup, metav1.GetOptions{})
			return err
		}},
		{"hook ClusterRoleBinding " + cleanup, func(ctx context.Context) error {
			_, err := c.client.RbacV1().ClusterRoleBindings().Get(ctx, cleanup, metav1.GetOptions{})
			return err
		}},
	}
	for _, o := range append(ownObjects, hookObjects...) {
		if err := waitGone(ctx, time.Minute, o.get); err != nil {
			left = append(left, o.what)
		}
	}
	if len(left) > 0 {
		t.Errorf("after helm uninstall, still there: %s", strings.Join(left, ", "))
	} else {
		t.Logf("after helm uninstall: none of the %d objects, the controller's Lease and Secret or the hook's objects is left", len(objs))
	}
	// helm uninstall --wait returned after the hook Job succeeded.
	if found := driverLabels(); len(found) > 0 {
		t.Errorf("after helm uninstall, the controller's Node labels are still there: %v", found)
	}
	// The kubelet wipes a driver's ResourceSlices 30 s after its last
	// plugin unregistered.
	err := wait.PollUntilContextTimeout(ctx, time.Second, cluster.Scaled(2*time.Minute), true, func(ctx context.Context) (bool, error) {
		return c.swapDevice(t) == nil, nil
	})
	if err != nil {
		t.Errorf("the dra.swap ResourceSlice is still published after uninstall")
	}

	// What stays on the node: running containers and their limits, the
	// hook (a container of a running claim may still start), the claim's
	// CDI spec and checkpoint entry.
	keep = c.waitPod(t, ns, keep.Name, "still running", podTimeout, running)
	if got := c.hostSwapLimit(t, keep, "worker"); got != before {
		t.Errorf("running container's swap limit changed from %d to %d after uninstall", before, got)
	}
	hook := filepath.Join(c.dir, "bin", "dra-swap-hook")
	if fi, err := os.Stat(hook); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("hook binary %s after uninstall: %v (mode %v)", hook, err, fi)
	}
	if !c.specExists(claim) || !c.checkpointHas(t, claim) {
		t.Errorf("running claim %s after uninstall: CDI spec present %v, checkpoint entry present %v; want both", claim, c.specExists(claim), c.checkpointHas(t, claim))
	}

	c.driverScript(t, "install")
	installed = true
	c.waitOffer(t, "be published again", func(b int64) bool { return b > 0 })
	if err := c.client.CoreV1().Pods(ns).Delete(ctx, keep.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	c.waitUnprepared(t, claim)
	fresh := c.createPod(t, c.WorkloadPod(ns, "after-reinstall", map[string]string{"swap": "swap-80"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi"}))
	fresh = c.waitPod(t, ns, fresh.Name, "completion", podTimeout, finished)
	if fresh.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("after reinstall: phase %s, reason %s", fresh.Status.Phase, terminatedReason(fresh, "worker"))
	}
	assertSwapLimit(t, c.report(t, fresh, "worker", "START"), 80*mi)
}

// TestPluginSlicesOwnNodeOnly: with the kubelet plugin's own
// ServiceAccount token (bound to its pod, so it carries the node's name),
// writing a ResourceSlice of another node is refused by the chart's
// ValidatingAdmissionPolicy, writing one of its own node is allowed, and a
// token without a node is refused.
func TestPluginSlicesOwnNodeOnly(t *testing.T) {
	c := loadCluster(t)
	ctx := context.Background()
	plugin := c.pluginPods(t)[0]
	token := func(bound bool) kubernetes.Interface {
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
		if bound {
			req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: plugin.Name, UID: plugin.UID}
		}
		tr, err := c.client.CoreV1().ServiceAccounts(c.DriverNamespace).CreateToken(ctx, plugin.Spec.ServiceAccountName, req, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(c.Config)
		cfg.BearerToken = tr.Status.Token
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return client
	}
	slice := func(node string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-own-node-"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   "dra.swap",
				Pool:     resourceapi.ResourcePool{Name: "e2e-" + rand.String(5), ResourceSliceCount: 1},
				NodeName: ptr.To(node),
			},
		}
	}
	asPlugin := token(true)
	_, err := asPlugin.ResourceV1().ResourceSlices().Create(ctx, slice("some-other-node"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "some-other-node") {
		t.Errorf("the plugin creating another node's ResourceSlice: got %v, want a refusal naming that node", err)
	} else {
		t.Logf("another node's slice refused: %v", err)
	}
	// Its own node's pool is named after the node; the real plugin
	// publishes there, so these writes are dry runs (admission still
	// decides them), leaving the published slice alone.
	dryRun := []string{metav1.DryRunAll}
	ownPool := slice(c.node)
	ownPool.Spec.Pool.Name = c.node
	if _, err := asPlugin.ResourceV1().ResourceSlices().Create(ctx, ownPool, metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Fatalf("the plugin creating its own node's ResourceSlice: %v", err)
	}
	if _, err := asPlugin.ResourceV1().ResourceSlices().Create(ctx, slice(c.node), metav1.CreateOptions{DryRun: dryRun}); err == nil || !strings.Contains(err.Error(), "pool") {
		t.Errorf("the plugin creating a slice of its node in a pool not named after the node: got %v, want a refusal naming the pool", err)
	}
	published, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=dra.swap,spec.nodeName=" + c.node})
	if err != nil || len(published.Items) == 0 {
		t.Fatalf("the plugin's published slice: %v (%d found)", err, len(published.Items))
	}
	if err := asPlugin.ResourceV1().ResourceSlices().Delete(ctx, published.Items[0].Name, metav1.DeleteOptions{DryRun: dryRun}); err != nil {
		t.Errorf("the plugin deleting its own node's ResourceSlice: %v", err)
	}
	_, err = token(false).ResourceV1().ResourceSlices().Create(ctx, slice(c.node), metav1.CreateOptions{})
	if err == nil || !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("a token of the plugin's ServiceAccount without a node: got %v, want a refusal", err)
	} else {
		t.Logf("token without a node refused: %v", err)
	}
}

// TestControllerDown: with the controller scaled to 0 (no webhook
// endpoint), pods with and without swap claims still bind and run, also
// a pod whose template carries a SwapConfig (the template was admitted
// while the controller ran; the claim controller's copy of it does not
// wait for the webhook); a claim carrying dra.swap config that a user
// creates is refused (the validator fails closed) while one without is
// not; once the controller is back, the reconciler labels the pod bound
// without the webhook, and invalid config is refused with the reason.
func TestControllerDown(t *testing.T) {
	c := loadCluster(t, needsOurCluster("scales the driver's controller to 0, which a cluster in use must not see"))
	ns := c.namespace(t)
	ctx := context.Background()
	_, dep := c.driverWorkloads(t)
	replicas := ptr.Deref(dep.Spec.Replicas, 1)
	tmpl := cluster.SwapTemplate(ns, "swap-64", "", 64*mi)
	tmpl.Spec.Spec.Devices.Config = configClaim(ns, "", validSwapConfig).Spec.Devices.Config
	if _, err := c.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a template with a valid SwapConfig, controller up: %v", err)
	}
	t.Cleanup(func() { c.scaleController(t, replicas) })
	c.scaleController(t, 0)

	with := c.createPod(t, c.WorkloadPod(ns, "with-claim", map[string]string{"swap": "swap-64"},
		ctr{Name: "worker", Claims: []string{"swap"}, AllocMiB: 1, MemLimit: "64Mi", Hold: 600}))
	without := c.createPod(t, c.WorkloadPod(ns, "without-claim", nil, ctr{Name: "worker", AllocMiB: 1, MemLimit: "64Mi"}))
	with = c.waitPod(t, ns, with.Name, "running", podTimeout, running)
	assertSwapLimit(t, c.report(t, with, "worker", "START"), 64*mi)
	without = c.waitPod(t, ns, without.Name, "completion", podTimeout, finished)
	if without.Status.Phase != corev1.PodSucceeded {
		t.Errorf("pod without a claim: phase %s", without.Status.Phase)
	}
	t.Logf("with the controller down, pod labels at bind time: %v", with.Labels)

	claim := func(name, config string) *resourceapi.ResourceClaim { return configClaim(ns, name, config) }
	valid := validSwapConfig
	if _, err := c.client.ResourceV1().ResourceClaims(ns).Create(ctx, claim("config-while-down", valid), metav1.CreateOptions{}); err == nil {
		t.Errorf("a claim with dra.swap config was accepted while the validating webhook was down; its failurePolicy is Fail")
	} else {
		t.Logf("claim with dra.swap config while the controller is down: %v", err)
	}

	c.scaleController(t, replicas)
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.client.CoreV1().Pods(ns).Get(ctx, with.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		with = p
		return p.Labels["kubernetes.io/hostname"] != "" && p.Labels["node.kubernetes.io/swap-behavior"] != "", nil
	})
	if err != nil {
		t.Errorf("the reconciler did not label the pod bound while the controller was down: labels %v", with.Labels)
	}
	_, err = c.client.ResourceV1().ResourceClaims(ns).Create(ctx, claim("invalid", `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig","swapHighPercent":150}`), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "must be between 1 and 100") {
		t.Errorf("invalid SwapConfig with the controller back: got %v, want a refusal naming the reason", err)
	}
	if _, err := c.client.ResourceV1().ResourceClaims(ns).Create(ctx, claim("valid", valid), metav1.CreateOptions{}); err != nil {
		t.Errorf("valid SwapConfig with the controller back: %v", err)
	}
}

// validSwapConfig is the smallest valid dra.swap opaque configuration.
const validSwapConfig = `{"apiVersion":"dra.swap/v1alpha1","kind":"SwapConfig"}`

// configClaim is a 64Mi swap claim carrying config as dra.swap opaque
// configuration, which the controller's validating webhook checks.
func configClaim(ns, name, config string) *resourceapi.ResourceClaim {
	tmpl := cluster.SwapTemplate(ns, name, "", 64*mi)
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: tmpl.Spec.Spec}
	cl.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "dra.swap", Parameters: runtime.RawExtension{Raw: []byte(config)}},
	}}}
	return cl
}
