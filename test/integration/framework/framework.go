// Package framework runs a real etcd and kube-apiserver for integration
// tests.
//
// StartAPIServer starts both on free loopback ports with their state in
// t.TempDir() and stops them in t.Cleanup, so tests that each start their
// own server can run with t.Parallel(). Binaries:
//
//   - KUBE_APISERVER: kube-apiserver (default <repo root>/_output/bin/kube-apiserver,
//     built by `make k8s-binaries` or `hack/build-tools.sh kube-apiserver`);
//   - ETCD: etcd (default `etcd` on PATH; `hack/install-deps.sh etcd-server`).
//
// A missing binary fails the test: integration tests are never skipped.
package framework

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	modulePath = "github.com/dra-driver-swap/dra-driver-swap"

	// ServiceClusterIPRange is the apiserver's --service-cluster-ip-range.
	ServiceClusterIPRange = "10.0.0.0/24"
	serviceIP             = "10.0.0.1"

	// AdminUser is the user of APIServer.Config and APIServer.Client, in
	// the system:masters group.
	AdminUser = "admin"

	defaultStartupTimeout = 90 * time.Second
	logTailLines          = 60
	startAttempts         = 3
	stopGracePeriod       = 5 * time.Second
)

// DefaultFeatureGates are the kube-apiserver feature gates StartAPIServer
// sets. DRAConsumableCapacity is beta and on by default in 1.37; it is set
// anyway so the tests keep failing loudly rather than silently losing
// consumable capacity fields if that default ever changes.
var DefaultFeatureGates = map[string]bool{
	"DRAConsumableCapacity": true,
}

// APIServer is a running kube-apiserver with its own etcd.
type APIServer struct {
	// Config is a client configuration for AdminUser (system:masters).
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface
	// Dir holds everything of this server: pki/, etcd-data/, and the logs
	// etcd.log and kube-apiserver.log.
	Dir string
	// URL is the apiserver's address, https://127.0.0.1:PORT.
	URL string
	// EtcdURL is etcd's client address, http://127.0.0.1:PORT.
	EtcdURL string
	// CAFile is the CA certificate that signed the serving certificate and
	// every client certificate.
	CAFile string
	// Args are the kube-apiserver command-line arguments.
	Args []string
	// StartupDuration is how long the apiserver took to become ready.
	StartupDuration time.Duration

	ca         *certAuthority
	etcd       *process
	apiserver  *process
	mu         sync.Mutex
	logsDumped bool
}

// Option changes how StartAPIServer starts the apiserver.
type Option func(*options)

type options struct {
	extraArgs      []string
	featureGates   map[string]bool
	startupTimeout time.Duration
}

// WithExtraArgs appends kube-apiserver flags ("--name=value"). They come
// after the framework's own flags, so a single-valued flag given here wins.
func WithExtraArgs(args ...string) Option {
	return func(o *options) { o.extraArgs = append(o.extraArgs, args...) }
}

// WithFeatureGates sets kube-apiserver feature gates, on top of (and
// overriding) DefaultFeatureGates.
func WithFeatureGates(gates map[string]bool) Option {
	return func(o *options) { maps.Copy(o.featureGates, gates) }
}

// WithFeatureGate sets one kube-apiserver feature gate.
func WithFeatureGate(name string, enabled bool) Option {
	return func(o *options) { o.featureGates[name] = enabled }
}

// WithStartupTimeout replaces the default 90s limit for etcd and the
// apiserver to become ready.
func WithStartupTimeout(d time.Duration) Option {
	return func(o *options) { o.startupTimeout = d }
}

// StartAPIServer starts etcd and kube-apiserver on free loopback ports with
// their state under t.TempDir(), waits until /readyz is ok, the
// resource.k8s.io/v1 API is served and the default namespace exists, and
// registers t.Cleanup to stop both and, when the test failed, log the last
// lines of their logs. Any error fails the test with t.Fatalf.
func StartAPIServer(t testing.TB, opts ...Option) *APIServer {
	t.Helper()
	o := options{featureGates: maps.Clone(DefaultFeatureGates), startupTimeout: defaultStartupTimeout}
	for _, opt := range opts {
		opt(&o)
	}

	apiserverBin := kubeAPIServerBinary(t)
	etcdBin := etcdBinary(t)

	s := &APIServer{Dir: t.TempDir()}
	deadline := time.Now().Add(o.startupTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	pki := filepath.Join(s.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatalf("framework: %v", err)
	}
	files, err := s.writePKI(pki)
	if err != nil {
		t.Fatalf("framework: generate certificates: %v", err)
	}

	s.startEtcd(t, ctx, etcdBin)

	start := time.Now()
	s.startAPIServer(t, ctx, apiserverBin, files, o)
	s.StartupDuration = time.Since(start)
	// Registered last so that it runs first, before the processes stop.
	t.Cleanup(func() { s.dumpLogsIfFailed(t) })
	t.Logf("framework: kube-apiserver %s ready in %v (etcd %s, logs in %s)", s.URL, s.StartupDuration.Round(time.Millisecond), s.EtcdURL, s.Dir)
	return s
}

type pkiFiles struct {
	caCert, servingCert, servingKey, saKey string
}

func (s *APIServer) writePKI(dir string) (pkiFiles, error) {
	ca, err := newCA("dra-driver-swap-test-ca")
	if err != nil {
		return pkiFiles{}, err
	}
	s.ca = ca
	servingCert, servingKey, err := ca.servingCert()
	if err != nil {
		return pkiFiles{}, err
	}
	saKey, err := newServiceAccountKey()
	if err != nil {
		return pkiFiles{}, err
	}
	f := pkiFiles{
		caCert:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "service-account.key"),
	}
	for path, data := range map[string][]byte{
		f.caCert:      ca.certPEM,
		f.servingCert: servingCert,
		f.servingKey:  servingKey,
		f.saKey:       saKey,
	} {
		if err := writeFile(path, data, 0o600); err != nil {
			return pkiFiles{}, err
		}
	}
	s.CAFile = f.caCert
	return f, nil
}

func (s *APIServer) startEtcd(t testing.TB, ctx context.Context, bin string) {
	t.Helper()
	logPath := filepath.Join(s.Dir, "etcd.log")
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			t.Fatalf("framework: %v", err)
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		dataDir := filepath.Join(s.Dir, "etcd-data")
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatalf("framework: %v", err)
		}
		args := []string{
			"--name=default",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=default=" + peerURL,
			"--initial-cluster-state=new",
			"--logger=zap",
			"--log-outputs=stderr",
			"--log-level=warn",
		}
		p, err := startProcess("etcd", bin, logPath, args)
		if err != nil {
			t.Fatalf("framework: %v", err)
		}
		s.etcd = p
		err = waitForEtcd(ctx, p, clientURL)
		if err == nil {
			s.EtcdURL = clientURL
			t.Cleanup(func() { p.stop(stopGracePeriod) })
			return
		}
		if attempt < startAttempts && p.exited() && p.addrInUse() && ctx.Err() == nil {
			t.Logf("framework: etcd port taken, retrying: %v", err)
			continue
		}
		s.fatalWithLogs(t, p, "etcd did not become healthy: %v", err)
	}
}

func waitForEtcd(ctx context.Context, p *process, clientURL string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	var lastErr error
	for {
		if p.exited() {
			return p.exitError()
		}
		resp, err := client.Get(clientURL + "/health")
		if err == nil {
			body := make([]byte, 512)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body[:n]), `"health":"true"`) {
				return nil
			}
			err = fmt.Errorf("GET /health: %s: %s", resp.Status, body[:n])
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last error: %w", ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// apiserverArgs returns the kube-apiserver flags.
func (s *APIServer) apiserverArgs(port int, f pkiFiles, o options) []string {
	args := []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--storage-backend=etcd3",
		"--etcd-servers=" + s.EtcdURL,
		"--client-ca-file=" + f.caCert,
		"--tls-cert-file=" + f.servingCert,
		"--tls-private-key-file=" + f.servingKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f.saKey,
		"--service-account-signing-key-file=" + f.saKey,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--profiling=false",
	}
	if len(o.featureGates) > 0 {
		var gates []string
		for _, name := range slices.Sorted(maps.Keys(o.featureGates)) {
			gates = append(gates, fmt.Sprintf("%s=%t", name, o.featureGates[name]))
		}
		args = append(args, "--feature-gates="+strings.Join(gates, ","))
	}
	return append(args, o.extraArgs...)
}

func (s *APIServer) startAPIServer(t testing.TB, ctx context.Context, bin string, f pkiFiles, o options) {
	t.Helper()
	logPath := filepath.Join(s.Dir, "kube-apiserver.log")
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			t.Fatalf("framework: %v", err)
		}
		s.URL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
		s.Args = s.apiserverArgs(ports[0], f, o)
		if err := s.newAdminClient(); err != nil {
			t.Fatalf("framework: %v", err)
		}
		p, err := startProcess("kube-apiserver", bin, logPath, s.Args)
		if err != nil {
			t.Fatalf("framework: %v", err)
		}
		s.apiserver = p
		err = s.waitForAPIServer(ctx)
		if err == nil {
			t.Cleanup(func() { p.stop(stopGracePeriod) })
			return
		}
		if attempt < startAttempts && p.exited() && p.addrInUse() && ctx.Err() == nil {
			t.Logf("framework: kube-apiserver port taken, retrying: %v", err)
			continue
		}
		s.fatalWithLogs(t, p, "kube-apiserver did not become ready: %v", err)
	}
}

func (s *APIServer) newAdminClient() error {
	certPEM, keyPEM, err := s.ca.clientCert(AdminUser, "system:masters")
	if err != nil {
		return err
	}
	s.Config = s.restConfig(certPEM, keyPEM)
	s.Client, err = kubernetes.NewForConfig(s.Config)
	return err
}

func (s *APIServer) restConfig(certPEM, keyPEM []byte) *rest.Config {
	return &rest.Config{
		Host: s.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   s.ca.certPEM,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
		// Tests create objects in bursts; client-side throttling would
		// only slow them down.
		QPS:   1000,
		Burst: 2000,
	}
}

// waitForAPIServer waits until /readyz is ok, resource.k8s.io/v1 serves
// DeviceClasses, ResourceClaims and ResourceSlices, and the default
// namespace exists.
func (s *APIServer) waitForAPIServer(ctx context.Context) error {
	steps := []struct {
		name  string
		check func(context.Context) error
	}{
		{"/readyz", s.checkReadyz},
		{"resource.k8s.io/v1", s.checkResourceAPI},
		{"namespace default", s.checkDefaultNamespace},
	}
	for _, step := range steps {
		var lastErr error
		for {
			if s.apiserver.exited() {
				return s.apiserver.exitError()
			}
			reqCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := step.check(reqCtx)
			cancel()
			if err == nil {
				break
			}
			lastErr = err
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w; last error: %w", step.name, ctx.Err(), lastErr)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func (s *APIServer) checkReadyz(ctx context.Context) error {
	body, err := s.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
	if err != nil {
		// The body of a failed /readyz lists the failing checks.
		if len(body) > 0 {
			return fmt.Errorf("%w: %s", err, failedChecks(string(body)))
		}
		return err
	}
	return nil
}

// failedChecks picks the "[-]..." lines out of a verbose /readyz body.
func failedChecks(body string) string {
	var failed []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "[-]") {
			failed = append(failed, line)
		}
	}
	if len(failed) == 0 {
		return body
	}
	return strings.Join(failed, "; ")
}

func (s *APIServer) checkResourceAPI(context.Context) error {
	list, err := s.Client.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1")
	if err != nil {
		return err
	}
	want := []string{"deviceclasses", "resourceclaims", "resourceslices"}
	for _, r := range list.APIResources {
		want = slices.DeleteFunc(want, func(name string) bool { return name == r.Name })
	}
	if len(want) > 0 {
		return fmt.Errorf("resource.k8s.io/v1 does not serve %v", want)
	}
	return nil
}

func (s *APIServer) checkDefaultNamespace(ctx context.Context) error {
	_, err := s.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
	return err
}

// ConfigForUser returns a client configuration that authenticates as user in
// groups with a client certificate signed by the cluster CA. The user has no
// permissions beyond what RBAC grants to it and its groups (every
// authenticated user is in system:authenticated).
func (s *APIServer) ConfigForUser(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	certPEM, keyPEM, err := s.ca.clientCert(user, groups...)
	if err != nil {
		t.Fatalf("framework: client certificate for %q: %v", user, err)
	}
	return s.restConfig(certPEM, keyPEM)
}

// ClientForUser returns a clientset for ConfigForUser(t, user, groups...).
func (s *APIServer) ClientForUser(t testing.TB, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(s.ConfigForUser(t, user, groups...))
	if err != nil {
		t.Fatalf("framework: clientset for %q: %v", user, err)
	}
	return client
}

// Kubeconfig writes a kubeconfig for AdminUser, with the certificates
// embedded, to Dir/admin.kubeconfig and returns its path.
func (s *APIServer) Kubeconfig(t testing.TB) string {
	t.Helper()
	return s.writeKubeconfig(t, filepath.Join(s.Dir, "admin.kubeconfig"), s.Config)
}

// KubeconfigForUser writes a kubeconfig for ConfigForUser(t, user,
// groups...) to Dir/USER.kubeconfig and returns its path.
func (s *APIServer) KubeconfigForUser(t testing.TB, user string, groups ...string) string {
	t.Helper()
	name := strings.NewReplacer("/", "_", ":", "_").Replace(user)
	return s.writeKubeconfig(t, filepath.Join(s.Dir, name+".kubeconfig"), s.ConfigForUser(t, user, groups...))
}

func (s *APIServer) writeKubeconfig(t testing.TB, path string, cfg *rest.Config) string {
	t.Helper()
	const name = "integration"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("framework: write kubeconfig: %v", err)
	}
	return path
}

// LogTails returns the last n lines of the etcd and kube-apiserver logs.
func (s *APIServer) LogTails(n int) string {
	var b strings.Builder
	for _, p := range []*process{s.etcd, s.apiserver} {
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "\n----- last %d lines of %s -----\n%s\n", n, p.logPath, p.tail(n))
	}
	return b.String()
}

// fatalWithLogs takes the log tails, stops p (which did not start) and fails
// the test with both. Processes that did start are stopped by their Cleanup.
func (s *APIServer) fatalWithLogs(t testing.TB, p *process, format string, args ...any) {
	t.Helper()
	tails := s.LogTails(logTailLines)
	p.stop(stopGracePeriod)
	s.mu.Lock()
	s.logsDumped = true
	s.mu.Unlock()
	t.Fatalf("framework: "+format+"%s", append(args, tails)...)
}

func (s *APIServer) dumpLogsIfFailed(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !t.Failed() || s.logsDumped {
		return
	}
	s.logsDumped = true
	t.Logf("framework: test failed; server logs:%s", s.LogTails(logTailLines))
}

// kubeAPIServerBinary returns $KUBE_APISERVER or the repository's
// _output/bin/kube-apiserver, failing the test if it is missing.
func kubeAPIServerBinary(t testing.TB) string {
	t.Helper()
	const howto = "build it with `make k8s-binaries` (part of `make integration`) or `hack/build-tools.sh kube-apiserver`, or point KUBE_APISERVER at a kube-apiserver binary"
	path := os.Getenv("KUBE_APISERVER")
	if path == "" {
		root, err := repoRoot()
		if err != nil {
			t.Fatalf("framework: KUBE_APISERVER is not set and %v; %s", err, howto)
		}
		path = filepath.Join(root, "_output", "bin", "kube-apiserver")
	}
	if err := checkExecutable(path); err != nil {
		t.Fatalf("framework: kube-apiserver binary: %v; %s", err, howto)
	}
	return path
}

// etcdBinary returns $ETCD or etcd from PATH, failing the test if missing.
func etcdBinary(t testing.TB) string {
	t.Helper()
	const howto = "install it with `make deps` or `hack/install-deps.sh etcd-server` (Debian), or point ETCD at an etcd binary"
	if path := os.Getenv("ETCD"); path != "" {
		if err := checkExecutable(path); err != nil {
			t.Fatalf("framework: etcd binary: %v; %s", err, howto)
		}
		return path
	}
	path, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("framework: etcd binary: %v; %s", err, howto)
	}
	return path
}

func checkExecutable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// repoRoot finds the directory of the go.mod of this module, walking up from
// the working directory (go test runs in the package directory) and, failing
// that, from this source file.
func repoRoot() (string, error) {
	rootOnce.Do(func() {
		var starts []string
		if wd, err := os.Getwd(); err == nil {
			starts = append(starts, wd)
		}
		if _, file, _, ok := runtime.Caller(0); ok {
			starts = append(starts, filepath.Dir(file))
		}
		for _, dir := range starts {
			if root, ok := findModuleRoot(dir); ok {
				rootDir = root
				return
			}
		}
		rootErr = errors.New("no go.mod of module " + modulePath + " found above " + strings.Join(starts, " or "))
	})
	return rootDir, rootErr
}

func findModuleRoot(dir string) (string, bool) {
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && moduleOf(data) == modulePath {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func moduleOf(goMod []byte) string {
	sc := bufio.NewScanner(strings.NewReader(string(goMod)))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`)
		}
	}
	return ""
}
