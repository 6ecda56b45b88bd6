package controller

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/dra-driver-swap/dra-driver-swap/api/swap/v1alpha1"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/podlabels"
	"github.com/dra-driver-swap/dra-driver-swap/internal/controller/servingcert"
	swapwebhook "github.com/dra-driver-swap/dra-driver-swap/internal/controller/webhook"
)

// Config is the controller's configuration (from its flags).
type Config struct {
	Policy              podlabels.Policy
	RemoveWithoutDriver bool
	Workers             int

	LeaderElection          bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	// OwnerDeployment, a Deployment in OwnerNamespace (the controller's
	// own), owns the leader election Lease and the self-managed
	// certificate Secret, which must then be in OwnerNamespace: deleting
	// the Deployment deletes them. None when empty.
	OwnerDeployment string
	OwnerNamespace  string

	// Webhooks: served on WebhookHost:WebhookPort unless DisableWebhooks.
	DisableWebhooks bool
	WebhookHost     string
	WebhookPort     int
	// CertDir holds an admin-supplied tls.crt and tls.key (reloaded when
	// they change, as cert-manager rotates them). When empty, the
	// controller keeps its own CA and certificate as Cert says.
	CertDir string
	Cert    servingcert.Options
	// CertCheckInterval is how often the certificate is checked (1m).
	CertCheckInterval time.Duration

	// MetricsAddress and HealthAddress: "0" disables.
	MetricsAddress string
	HealthAddress  string

	// WebhookQPS and WebhookBurst limit the API calls the webhooks make
	// (the pod label patch at a claim's reservation or the binding; they
	// read only the cache) on a limiter of their own: they run inside the
	// scheduler's binding cycle, and behind the reconcilers' budget they
	// held swap pods' binding to that budget. Zero: restConfig's.
	WebhookQPS   float32
	WebhookBurst int

	// ShutdownDelay is how long the webhooks keep serving, not ready,
	// after ctx ends: the Service and the API servers' endpoint caches
	// drop a terminating replica some time after its deletion, and a
	// review sent to a replica that stopped listening is ignored
	// (failurePolicy Ignore), leaving its pod unlabelled at start.
	ShutdownDelay time.Duration
}

// webhookReadiness is a replica's webhook readiness beyond the server's
// own: the informers the handlers read have synced (a review answered
// from a cache still listing would miss what the API holds), and the
// replica is not draining.
type webhookReadiness struct {
	synced, draining atomic.Bool
}

func (r *webhookReadiness) check(*http.Request) error {
	switch {
	case r.draining.Load():
		return fmt.Errorf("shutting down")
	case !r.synced.Load():
		return fmt.Errorf("informer caches not synced yet")
	}
	return nil
}

// webhookRESTConfig is the webhooks' client configuration: restConfig's,
// with a rate limiter of its own (qps and burst; restConfig's when zero).
func webhookRESTConfig(restConfig *rest.Config, qps float32, burst int) *rest.Config {
	c := rest.CopyConfig(restConfig)
	c.RateLimiter = nil
	if qps > 0 {
		c.QPS = qps
	}
	if burst > 0 {
		c.Burst = burst
	}
	return c
}

// Run runs the controller until ctx ends.
func Run(ctx context.Context, restConfig *rest.Config, cfg Config) error {
	logger := klog.FromContext(ctx)
	if err := cfg.Policy.Validate(); err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	selfCert := !cfg.DisableWebhooks && cfg.CertDir == ""
	var lock resourcelock.Interface
	if cfg.OwnerDeployment != "" {
		// An owner must be in its dependents' namespace.
		if cfg.LeaderElection && cfg.LeaderElectionNamespace != cfg.OwnerNamespace {
			return fmt.Errorf("the leader election Lease's namespace %q is not its owner Deployment %s's %q", cfg.LeaderElectionNamespace, cfg.OwnerDeployment, cfg.OwnerNamespace)
		}
		if selfCert && cfg.Cert.SecretNamespace != cfg.OwnerNamespace {
			return fmt.Errorf("the webhook certificate Secret's namespace %q is not its owner Deployment %s's %q", cfg.Cert.SecretNamespace, cfg.OwnerDeployment, cfg.OwnerNamespace)
		}
		owner, err := deploymentOwner(ctx, client, cfg.OwnerNamespace, cfg.OwnerDeployment)
		if err != nil {
			return err
		}
		cfg.Cert.OwnerReferences = []metav1.OwnerReference{owner}
		if cfg.LeaderElection {
			if lock, err = ownedLeaseLock(client, cfg.LeaderElectionNamespace, cfg.LeaderElectionID, owner); err != nil {
				return err
			}
		}
	}
	var certs *servingcert.Manager
	var ready webhookReadiness
	if selfCert {
		if certs, err = servingcert.New(client, cfg.Cert); err != nil {
			return fmt.Errorf("webhook certificate: %w", err)
		}
	}
	leaseDuration, renewDeadline, retryPeriod := 15*time.Second, 10*time.Second, 2*time.Second
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: clientgoscheme.Scheme,
		Logger: logger,
		Cache:  CacheOptions(),
		// One controller per process in production; tests and benchmarks
		// run several, which controller-runtime's global name check forbids.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		// The metrics, probes and webhooks are served below, on servers
		// of internal/httpserver, not controller-runtime's.
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionNamespace:       cfg.LeaderElectionNamespace,
		LeaderElectionID:              cfg.LeaderElectionID,
		LeaderElectionReleaseOnCancel: true,
		// nil: controller-runtime's Lease lock on the namespace and ID above.
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &leaseDuration,
		RenewDeadline:                       &renewDeadline,
		RetryPeriod:                         &retryPeriod,
	})
	if err != nil {
		return fmt.Errorf("create controller manager: %w", err)
	}
	metrics, err := NewMetrics(crmetrics.Registry)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if err := Indexes(ctx, mgr); err != nil {
		return err
	}
	if err := Setup(mgr, Options{Policy: cfg.Policy, RemoveWithoutDriver: cfg.RemoveWithoutDriver, Workers: cfg.Workers, Metrics: metrics}); err != nil {
		return err
	}
	healthChecks := map[string]healthz.Checker{"ping": healthz.Ping}
	readyChecks := map[string]healthz.Checker{}
	if !cfg.DisableWebhooks {
		c := mgr.GetClient()
		nodes := Nodes{Reader: c}
		// The pod label patches, on the webhooks' own limiter. The
		// handlers read only the cache (no review costs an API read), and
		// patches holds what reviews can make them write.
		direct, err := ctrlclient.New(webhookRESTConfig(restConfig, cfg.WebhookQPS, cfg.WebhookBurst), ctrlclient.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return fmt.Errorf("create the webhooks' client: %w", err)
		}
		patches := swapwebhook.NewPatchBudget(swapwebhook.RecentPatches, swapwebhook.RelabelQPS, swapwebhook.RelabelBurst)
		// Any pod that reaches the Service can post a review: one
		// Admission bounds the reviews every handler works on together,
		// and each handler bounds what one review costs. controller-
		// runtime's server is used only for its mux, which counts the
		// requests in its metrics.
		reviews := swapwebhook.NewAdmission(0, 0)
		mux := webhook.NewServer(webhook.Options{})
		// The chart renders the binding webhook only with podSelection all
		// or namespaces; only then is its path served.
		if cfg.Policy.Selection != podlabels.SelectSwapClaims {
			mux.Register(swapwebhook.BindingPath, reviews.Handler(&swapwebhook.BindingLabeler{
				Pods: c, Claims: c, Client: direct, Nodes: nodes, Policy: cfg.Policy, CacheWait: swapwebhook.DefaultCacheWait,
				Patches: patches, Patched: metrics.podPatched, Deferred: metrics.labelsDeferred,
				Selector: Pods{Reader: c, Policy: cfg.Policy},
			}))
		}
		mux.Register(swapwebhook.ReservationPath, reviews.Handler(&swapwebhook.ReservationLabeler{
			Claims: c, Pods: c, Client: direct, Nodes: nodes, Policy: cfg.Policy, CacheWait: swapwebhook.DefaultCacheWait,
			Patches: patches, Patched: metrics.podPatched, Deferred: metrics.labelsDeferred,
		}))
		mux.Register(swapwebhook.ConfigPath, reviews.Handler(&swapwebhook.ConfigValidator{
			Decoder: v1alpha1.NewDecoder(), Classes: c, Offers: nodes, Support: nodes,
		}))
		srv := &webhookServer{addr: webhookAddress(cfg.WebhookHost, cfg.WebhookPort), handler: mux.WebhookMux(), certDir: cfg.CertDir}
		if certs != nil {
			srv.certificate = certs.GetCertificate
		}
		if err := mgr.Add(srv); err != nil {
			return err
		}
		readyChecks["webhook"] = webhookReady(certs, srv.started)
		// Register the informers the handlers read, so the manager starts
		// and syncs them before its other runnables instead of at the
		// first review.
		read := []ctrlclient.Object{&corev1.Pod{}, &corev1.Node{}, &resourceapi.ResourceSlice{}, &resourceapi.ResourceClaim{}, &resourceapi.DeviceClass{}}
		if cfg.Policy.Selection == podlabels.SelectNamespaces {
			read = append(read, &corev1.Namespace{})
		}
		for _, obj := range read {
			if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
				return fmt.Errorf("informer for the webhooks' %T: %w", obj, err)
			}
		}
		// Runnables that need no leader start once the caches synced.
		if err := mgr.Add(runnable{leader: false, run: func(context.Context) { ready.synced.Store(true) }}); err != nil {
			return err
		}
		readyChecks["webhook-caches"] = ready.check
		if certs != nil {
			interval := cfg.CertCheckInterval
			if interval <= 0 {
				interval = time.Minute
			}
			// Every replica loads the certificate; the leader also creates
			// and rotates it and injects the CA into the configurations.
			if err := mgr.Add(runnable{leader: false, run: func(ctx context.Context) { certs.Run(ctx, interval, false) }}); err != nil {
				return err
			}
			if err := mgr.Add(runnable{leader: true, run: func(ctx context.Context) { certs.Run(ctx, interval, true) }}); err != nil {
				return err
			}
		}
	}
	if serving(cfg.MetricsAddress) {
		if err := mgr.Add(&httpServer{addr: cfg.MetricsAddress, handler: metricsHandler(crmetrics.Registry)}); err != nil {
			return err
		}
	}
	if serving(cfg.HealthAddress) {
		if err := mgr.Add(&httpServer{addr: cfg.HealthAddress, handler: probesHandler(healthChecks, readyChecks)}); err != nil {
			return err
		}
	}
	logger.Info("Starting dra.swap controller", "selection", cfg.Policy.Selection, "allowlist", cfg.Policy.Allowlist,
		"webhooks", !cfg.DisableWebhooks, "leaderElection", cfg.LeaderElection)
	delay := cfg.ShutdownDelay
	if cfg.DisableWebhooks {
		delay = 0
	}
	return mgr.Start(draining(ctx, delay, &ready.draining))
}

// draining returns a context that ends delay after ctx does, with
// draining set from ctx's end: the manager, its webhooks and its Lease
// run on until then, while the readiness check takes the replica out of
// the Service.
func draining(ctx context.Context, delay time.Duration, draining *atomic.Bool) context.Context {
	if delay <= 0 {
		return ctx
	}
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-ctx.Done()
		draining.Store(true)
		klog.FromContext(ctx).Info("Shutting down: serving webhooks until the Service drops this replica", "delay", delay)
		time.Sleep(delay)
		cancel()
	}()
	return run
}

// webhookReady is ready once a serving certificate is loaded and the
// webhook server accepts TLS connections.
func webhookReady(certs *servingcert.Manager, started healthz.Checker) healthz.Checker {
	return func(req *http.Request) error {
		if certs != nil {
			if _, err := certs.GetCertificate(nil); err != nil {
				return err
			}
		}
		if err := started(req); err != nil {
			return fmt.Errorf("webhook server: %w", err)
		}
		return nil
	}
}

// runnable adapts a function to manager.Runnable, on the leader only or
// on every replica.
type runnable struct {
	leader bool
	run    func(ctx context.Context)
}

var _ manager.LeaderElectionRunnable = runnable{}

func (r runnable) Start(ctx context.Context) error {
	r.run(ctx)
	return nil
}

func (r runnable) NeedLeaderElection() bool { return r.leader }
