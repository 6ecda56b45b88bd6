package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

const (
	ns   = "kube-system"
	name = "webhook-tls"
)

func configurations() []runtime.Object {
	two := []admissionregistrationv1.MutatingWebhook{{Name: "a.dra.swap"}, {Name: "b.dra.swap"}}
	twoV := []admissionregistrationv1.ValidatingWebhook{{Name: "a.dra.swap"}, {Name: "b.dra.swap"}}
	return []runtime.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "dra-swap"}, Webhooks: two},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "dra-swap"}, Webhooks: twoV},
	}
}

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newManager(t *testing.T, c *clock, objects ...runtime.Object) (*Manager, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objects...)
	m, err := New(client, Options{
		SecretNamespace: ns, SecretName: name, DNSNames: []string{"localhost", "dra-swap-controller.kube-system.svc"},
		MutatingWebhookConfigurations:   []string{"dra-swap", "absent"},
		ValidatingWebhookConfigurations: []string{"dra-swap"},
		Now:                             c.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, client
}

// handshake serves TLS with m and connects trusting only bundle.
func handshake(t *testing.T, m *Manager, bundle []byte, now time.Time) error {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{GetCertificate: m.GetCertificate, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("bundle holds no certificate")
	}
	addr := strings.TrimPrefix(srv.URL, "https://")
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12, Time: func() time.Time { return now }})
	if err != nil {
		return err
	}
	return conn.Close()
}

func secretWrites(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "secrets" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			n++
		}
	}
	return n
}

func caBundles(t *testing.T, client *fake.Clientset) [][]byte {
	t.Helper()
	ctx := context.Background()
	m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "dra-swap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "dra-swap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

func TestEnsureLifecycle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, client := newManager(t, c, configurations()...)

	if _, err := m.GetCertificate(nil); err == nil || !strings.Contains(err.Error(), ns+"/"+name) {
		t.Fatalf("GetCertificate before Ensure: %v", err)
	}
	// Fresh: the Secret is created and the CA injected everywhere.
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	first := m.CABundle()
	for i, b := range caBundles(t, client) {
		if string(b) != string(first) {
			t.Fatalf("webhook %d caBundle differs from the CA", i)
		}
	}
	if err := handshake(t, m, first, c.now); err != nil {
		t.Fatalf("TLS handshake trusting the CA: %v", err)
	}
	s, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || s.Type != corev1.SecretTypeTLS {
		t.Fatalf("Secret: %v %v", s, err)
	}

	// Nothing due: no write.
	writes := secretWrites(client)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if secretWrites(client) != writes {
		t.Fatal("a second Ensure wrote the Secret")
	}

	// A second replica only loads, and serves the same certificate.
	other, _ := New(client, m.opts)
	if err := other.Load(ctx); err != nil {
		t.Fatal(err)
	}
	a, _ := m.GetCertificate(nil)
	b, _ := other.GetCertificate(nil)
	if string(a.Certificate[0]) != string(b.Certificate[0]) {
		t.Fatal("replicas serve different certificates")
	}

	// The serving certificate is due (1 year validity, renewed 30 days before).
	c.now = c.now.Add(340 * 24 * time.Hour)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	renewed, _ := m.GetCertificate(nil)
	if string(renewed.Certificate[0]) == string(a.Certificate[0]) {
		t.Fatal("the serving certificate was not renewed")
	}
	if string(m.CABundle()) != string(first) {
		t.Fatal("renewing the serving certificate changed the CA")
	}

	// The CA is due (5 years, renewed a certificate lifetime before).
	c.now = time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	bundle := m.CABundle()
	certs := parseCerts(bundle)
	if len(certs) != 2 || string(pemCert(certs[1].Raw)) != string(first) {
		t.Fatalf("after CA rotation the bundle holds %d CAs, want the new one then the old one", len(certs))
	}
	if err := handshake(t, m, pemCert(certs[0].Raw), c.now); err != nil {
		t.Fatalf("the new serving certificate is not trusted through the new CA: %v", err)
	}
	if err := handshake(t, m, first, c.now); err == nil {
		t.Fatal("the new serving certificate verifies against the old CA only")
	}
	for i, b := range caBundles(t, client) {
		if string(b) != string(bundle) {
			t.Fatalf("webhook %d caBundle was not updated after CA rotation", i)
		}
	}
	// Once the old CA has expired it leaves the bundle.
	c.now = time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// (The serving certificate was renewed meanwhile; the CA was not.)
	if n := len(parseCerts(m.CABundle())); n != 1 {
		t.Fatalf("bundle holds %d CAs after the old one expired, want 1", n)
	}
}

func TestEnsureRepairsBadSecret(t *testing.T) {
	tests := []struct {
		name string
		data map[string][]byte
	}{
		{name: "garbage", data: map[string][]byte{KeyCert: []byte("garbage"), KeyKey: []byte("x"), KeyCA: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), KeyCAKey: []byte("no")}},
		{name: "empty", data: nil},
		{name: "half", data: map[string][]byte{KeyCA: []byte("x")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS, Data: tc.data}
			other, _ := New(fake.NewClientset(bad), Options{SecretNamespace: ns, SecretName: name, DNSNames: []string{"localhost"}})
			if err := other.Load(ctx); err == nil {
				t.Fatal("Load accepted a bad Secret")
			}
			objs := append(configurations(), bad)
			m, _ := newManager(t, &clock{now: time.Now()}, objs...)
			if err := m.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			if err := handshake(t, m, m.CABundle(), time.Now()); err != nil {
				t.Fatalf("after repair: %v", err)
			}
		})
	}
}

func TestEnsureOtherNames(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := &clock{now: time.Now()}
	m, client := newManager(t, c, configurations()...)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	old, _ := m.GetCertificate(nil)
	// The Service is renamed: the certificate must name it.
	m2, err := New(client, Options{SecretNamespace: ns, SecretName: name, DNSNames: []string{"renamed.kube-system.svc"}, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	now, _ := m2.GetCertificate(nil)
	if string(now.Certificate[0]) == string(old.Certificate[0]) {
		t.Fatal("a certificate for other names was kept")
	}
}

func TestEnsureRetriesConflicts(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m, client := newManager(t, &clock{now: time.Now()}, configurations()...)
	// Another replica creates the Secret first.
	raced := false
	client.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		winner, _ := New(client, m.opts)
		data, _, err := winner.renew(nil)
		if err != nil {
			return true, nil, err
		}
		s := a.(k8stesting.CreateAction).GetObject().(*corev1.Secret).DeepCopy()
		s.Data = data
		if err := client.Tracker().Add(s); err != nil {
			return true, nil, err
		}
		return false, nil, nil // the real create now fails: AlreadyExists
	})
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data[KeyCA]) != string(m.CABundle()) {
		t.Fatal("the loser did not adopt the winner's CA")
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{SecretName: name, DNSNames: []string{"a"}},
		{SecretNamespace: ns, SecretName: name},
		{SecretNamespace: ns, SecretName: name, DNSNames: []string{"a"}, CertValidity: time.Hour, RenewBefore: 2 * time.Hour},
	} {
		if _, err := New(fake.NewClientset(), o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}
