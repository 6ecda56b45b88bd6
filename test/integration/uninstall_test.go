package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/servingcert"
	"github.com/dra-driver-swap/dra-driver-swap/test/integration/framework"
)

// labelCleanupSA is the chart's post-delete hook's ServiceAccount.
const labelCleanupSA = "dra-driver-swap-label-cleanup"

// TestUninstall proves, with the chart's RBAC and admission policies and
// the components' own tokens, what makes helm uninstall leave nothing of
// the release: the post-delete hook's token may read and patch Nodes and
// nothing else, and with it the cleanup removes the controller's Node
// labels and no other; the controller, with its token, makes its Lease
// and webhook Secret owned by its Deployment (adopting a Lease an older
// controller made), which the garbage collector deletes with it (the e2e
// TestUninstallAndReinstall sees that happen).
func TestUninstall(t *testing.T) {
	t.Parallel()
	s := framework.StartAPIServer(t)
	ctx := context.Background()
	installChartPolicies(t, s)
	nodeLabels := map[string]map[string]string{
		"node-a": {v1alpha1.LabelSwapBehavior: "LimitedSwap", v1alpha1.LabelCapacity: "4Gi", podlabels.Zone: "z1", "team": "a"},
		"node-b": {v1alpha1.LabelCapacity: "1Gi", "dra.swap/other": "kept"},
		"node-c": {"team": "c"},
	}
	for name, l := range nodeLabels {
		if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("the hook's grants", func(t *testing.T) {
		hook := podTokenClient(t, s, "label-cleanup", labelCleanupSA, "node-a")
		// Its whole grant (get, list and patch Nodes) is
		// TestComponentGrants' "uninstall hook" allowlist.
		if _, err := hook.CoreV1().Secrets(chartNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the hook listing Secrets: got %v, want forbidden", err)
		}

		// What the hook runs, with the hook's token.
		_, lctx := ktesting.NewTestContext(t)
		n, err := controller.RemoveNodeLabels(lctx, hook, 100)
		if err != nil {
			t.Fatalf("the cleanup with the hook's token: %v", err)
		}
		if n != 2 {
			t.Errorf("the cleanup patched %d Nodes, want 2", n)
		}
		for name, before := range nodeLabels {
			node, err := s.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := maps.Clone(before)
			for _, k := range podlabels.NodeKeys() {
				delete(want, k)
			}
			if !maps.Equal(node.Labels, want) {
				t.Errorf("Node %s after the cleanup: labels %v, want %v", name, node.Labels, want)
			}
		}
	})

	t.Run("the controller's Lease and Secret are owned by its Deployment", func(t *testing.T) {
		deployment, err := s.Client.AppsV1().Deployments(chartNamespace).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: controllerSA},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "c"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "c"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/dra-driver-swap:1"}}},
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A Lease an older controller made, without an owner.
		if _, err := s.Client.CoordinationV1().Leases(chartNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: controllerSA},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		logger, cctx := ktesting.NewTestContext(t)
		ctrl.SetLogger(logger)
		cctx, cancel := context.WithCancel(cctx)
		stopped := make(chan struct{})
		var runErr error
		go func() {
			defer close(stopped)
			runErr = controller.Run(cctx, tokenConfig(t, s, chartNamespace, controllerSA), controller.Config{
				Policy: podlabels.Policy{Selection: podlabels.SelectSwapClaims}, Workers: 1,
				LeaderElection: true, LeaderElectionNamespace: chartNamespace, LeaderElectionID: controllerSA,
				OwnerDeployment: controllerSA, OwnerNamespace: chartNamespace,
				WebhookHost: "127.0.0.1", WebhookPort: freePort(t),
				Cert: servingcert.Options{
					SecretNamespace: chartNamespace, SecretName: "dra-driver-swap-controller-webhook-tls",
					DNSNames: []string{"localhost"}, ValidatingWebhookConfigurations: []string{"dra-driver-swap"},
				},
				CertCheckInterval: time.Second, MetricsAddress: "0", HealthAddress: "0",
			})
		}()
		defer func() {
			cancel()
			<-stopped
			if runErr != nil {
				t.Errorf("controller: %v", runErr)
			}
		}()
		want := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: controllerSA, UID: deployment.UID}}
		owners := map[string]func(context.Context) (metav1.Object, error){
			"Lease": func(ctx context.Context) (metav1.Object, error) {
				return s.Client.CoordinationV1().Leases(chartNamespace).Get(ctx, controllerSA, metav1.GetOptions{})
			},
			"Secret": func(ctx context.Context) (metav1.Object, error) {
				return s.Client.CoreV1().Secrets(chartNamespace).Get(ctx, "dra-driver-swap-controller-webhook-tls", metav1.GetOptions{})
			},
		}
		for what, get := range owners {
			var got []metav1.OwnerReference
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				select {
				case <-stopped:
					return false, fmt.Errorf("controller stopped: %w", runErr)
				default:
				}
				o, err := get(ctx)
				if err != nil {
					return false, nil
				}
				got = o.GetOwnerReferences()
				return slices.Equal(got, want), nil
			})
			if err != nil {
				t.Errorf("the controller's %s: owners %v, want %v (%v)", what, got, want, err)
			}
		}
	})
}
