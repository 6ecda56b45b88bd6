package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

const (
	ns         = "kube-system"
	secretName = "webhook-tls"
	configName = "dra-swap"
	day        = 24 * time.Hour
	year       = 365 * day
)

// start is when the tests' histories begin.
func start() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// clock is a settable clock for Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// webhookConfigurations returns a mutating and a validating
// configuration, two webhooks each, without caBundle.
func webhookConfigurations() []runtime.Object {
	return []runtime.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: configName},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "a.dra.swap"}, {Name: "b.dra.swap"}},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: configName},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "a.dra.swap"}, {Name: "b.dra.swap"}},
		},
	}
}

func testOptions(now func() time.Time) Options {
	return Options{
		SecretNamespace:                 ns,
		SecretName:                      secretName,
		DNSNames:                        []string{"localhost", "dra-swap-controller.kube-system.svc"},
		MutatingWebhookConfigurations:   []string{configName},
		ValidatingWebhookConfigurations: []string{configName},
		Now:                             now,
	}
}

func newManager(t *testing.T, client *fake.Clientset, opts Options) *Manager {
	t.Helper()
	m, err := New(client, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// testContext returns a context whose logger writes to t and keeps what
// it logs, and a function returning that.
func testContext(t *testing.T) (context.Context, func() string) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	return klog.NewContext(t.Context(), logger), func() string {
		return logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	}
}

// secretData returns the Secret's data, nil when it does not exist.
func secretData(t *testing.T, client *fake.Clientset) map[string][]byte {
	t.Helper()
	s, err := client.CoreV1().Secrets(ns).Get(context.Background(), secretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("read Secret: %v", err)
	}
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type %q, want %q", s.Type, corev1.SecretTypeTLS)
	}
	return s.Data
}

// writes counts the recorded create and update actions on resource.
func writes(client *fake.Clientset, resource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetResource().Resource == resource && (a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "patch") {
			n++
		}
	}
	return n
}

// caBundles returns the caBundle of every webhook of the configurations
// that exist.
func caBundles(t *testing.T, client *fake.Clientset) [][]byte {
	t.Helper()
	ctx := context.Background()
	var out [][]byte
	mc, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
	if err == nil {
		for _, w := range mc.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	vc, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
	if err == nil {
		for _, w := range vc.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return out
}

func leafOf(t *testing.T, data map[string][]byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data[KeyCert])
	if block == nil {
		t.Fatalf("%s holds no PEM", KeyCert)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("parse %s: %v", KeyCert, err)
	}
	return c
}

func casOf(t *testing.T, data map[string][]byte) []*x509.Certificate {
	t.Helper()
	cas, err := parseBundle(data[KeyCA])
	if err != nil {
		t.Fatal(err)
	}
	return cas
}

// handshake serves HTTPS with m.GetCertificate and makes a request that
// trusts only the PEM certificates in roots, verifying at now, to
// "localhost".
func handshake(t *testing.T, m *Manager, roots []byte, now time.Time) error {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	srv.TLS = &tls.Config{GetCertificate: m.GetCertificate, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // failed handshakes are expected
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(roots) {
		t.Fatal("the trusted bundle holds no certificate")
	}
	transport := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:    pool,
		ServerName: "localhost",
		MinVersion: tls.VersionTLS12,
		Time:       func() time.Time { return now },
	}}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Get(srv.URL)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if string(body) != "ok" {
		t.Fatalf("response %q, want ok", body)
	}
	return nil
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// checkConsistent checks what every Ensure must leave behind: a Secret
// that a follower can load, the same bundle loaded and in every webhook,
// and a serving certificate that verifies through it.
func checkConsistent(t *testing.T, ctx context.Context, client *fake.Clientset, m *Manager, now time.Time) {
	t.Helper()
	data := secretData(t, client)
	if string(m.CABundle()) != string(data[KeyCA]) {
		t.Error("the loaded CA bundle is not the Secret's")
	}
	loaded, err := m.GetCertificate(nil)
	if err != nil {
		t.Fatalf("GetCertificate after Ensure: %v", err)
	}
	if !loaded.Leaf.Equal(leafOf(t, data)) {
		t.Error("the loaded serving certificate is not the Secret's")
	}
	for i, b := range caBundles(t, client) {
		if string(b) != string(data[KeyCA]) {
			t.Errorf("webhook %d: caBundle is not the Secret's %s", i, KeyCA)
		}
	}
	follower := newManager(t, client, testOptions(func() time.Time { return now }))
	if err := follower.Load(ctx); err != nil {
		t.Errorf("a follower cannot load what Ensure wrote: %v", err)
	}
	if err := handshake(t, m, m.CABundle(), now); err != nil {
		t.Errorf("TLS handshake trusting the CA bundle: %v", err)
	}
}

func TestEnsure(t *testing.T) {
	type result struct {
		client        *fake.Clientset
		m             *Manager
		now           time.Time
		before, after map[string][]byte
		logs          string
	}
	tests := []struct {
		name string
		// noConfigurations: the webhook configurations do not exist.
		noConfigurations bool
		// history: Ensure ran at these times after start before.
		history []time.Duration
		// prepare changes the objects after the history.
		prepare func(t *testing.T, client *fake.Clientset)
		// at: the Ensure under test runs at this time after start.
		at    time.Duration
		check func(t *testing.T, r result)
	}{
		{
			name: "fresh: Secret created and CA injected",
			check: func(t *testing.T, r result) {
				if n := writes(r.client, "secrets"); n != 1 {
					t.Errorf("%d Secret writes, want 1 create", n)
				}
				if n := writes(r.client, "mutatingwebhookconfigurations") + writes(r.client, "validatingwebhookconfigurations"); n != 2 {
					t.Errorf("%d webhook configuration writes, want 2", n)
				}
				if n := len(caBundles(t, r.client)); n != 4 {
					t.Errorf("%d webhooks, want 4", n)
				}
				cas := casOf(t, r.after)
				if len(cas) != 1 || !cas[0].IsCA || !cas[0].NotAfter.Equal(r.now.Add(DefaultCAValidity)) {
					t.Errorf("CAs %d, want one valid for %v", len(cas), DefaultCAValidity)
				}
				leaf := leafOf(t, r.after)
				if !slices.Equal(leaf.DNSNames, testOptions(nil).DNSNames) {
					t.Errorf("serving certificate names %q", leaf.DNSNames)
				}
				if !leaf.NotAfter.Equal(r.now.Add(DefaultCertValidity)) {
					t.Errorf("serving certificate valid until %v, want %v", leaf.NotAfter, r.now.Add(DefaultCertValidity))
				}
			},
		},
		{
			name:    "up to date: nothing written",
			history: []time.Duration{0},
			at:      time.Hour,
			check: func(t *testing.T, r result) {
				if len(r.client.Actions()) == 0 {
					t.Fatal("no API calls recorded")
				}
				for _, a := range r.client.Actions() {
					if a.GetVerb() != "get" {
						t.Errorf("unexpected %s %s", a.GetVerb(), a.GetResource().Resource)
					}
				}
				if !maps.EqualFunc(r.before, r.after, func(a, b []byte) bool { return string(a) == string(b) }) {
					t.Error("the Secret changed")
				}
			},
		},
		{
			name:    "serving certificate not due yet",
			history: []time.Duration{0},
			at:      DefaultCertValidity - DefaultRenewBefore - day,
			check: func(t *testing.T, r result) {
				if n := writes(r.client, "secrets"); n != 0 {
					t.Errorf("%d Secret writes, want none", n)
				}
			},
		},
		{
			name:    "serving certificate due: renewed, same CA",
			history: []time.Duration{0},
			at:      DefaultCertValidity - DefaultRenewBefore + day,
			check: func(t *testing.T, r result) {
				if string(r.after[KeyCert]) == string(r.before[KeyCert]) || string(r.after[KeyKey]) == string(r.before[KeyKey]) {
					t.Error("the serving certificate was not renewed")
				}
				if string(r.after[KeyCA]) != string(r.before[KeyCA]) || string(r.after[KeyCAKey]) != string(r.before[KeyCAKey]) {
					t.Error("renewing the serving certificate changed the CA")
				}
				if n := writes(r.client, "mutatingwebhookconfigurations") + writes(r.client, "validatingwebhookconfigurations"); n != 0 {
					t.Errorf("%d webhook configuration writes, want none", n)
				}
				if !strings.Contains(r.logs, "new serving certificate: it expires") {
					t.Errorf("the reason is not logged:\n%s", r.logs)
				}
			},
		},
		{
			name: "CA due: new CA before the old one, serving certificate kept until injected",
			// At 4y-1d the CA is not due yet and the serving certificate
			// is renewed; at 4y+1d the CA is due, that certificate is not.
			history: []time.Duration{0, 4*year - day},
			at:      4*year + day,
			check: func(t *testing.T, r result) {
				oldCA := casOf(t, r.before)[0]
				cas := casOf(t, r.after)
				if len(cas) != 2 || cas[0].Equal(oldCA) || !cas[1].Equal(oldCA) {
					t.Fatalf("bundle holds %d CAs, want the new one, then the old one", len(cas))
				}
				if string(r.after[KeyCAKey]) == string(r.before[KeyCAKey]) {
					t.Error("ca.key was not replaced")
				}
				if string(r.after[KeyCert]) != string(r.before[KeyCert]) {
					t.Error("the serving certificate was replaced before the webhooks trust the new CA")
				}
				// Clients (API servers) that still have the old bundle
				// keep working.
				if err := handshake(t, r.m, r.before[KeyCA], r.now); err != nil {
					t.Errorf("a client trusting only the old bundle: %v", err)
				}
				if !strings.Contains(r.logs, "new CA: CA") || !strings.Contains(r.logs, "expires") {
					t.Errorf("the reason is not logged:\n%s", r.logs)
				}
			},
		},
		{
			name:    "CA rotated and injected: serving certificate signed by the new CA",
			history: []time.Duration{0, 4*year - day, 4*year + day},
			at:      4*year + day + time.Minute,
			check: func(t *testing.T, r result) {
				if string(r.after[KeyCA]) != string(r.before[KeyCA]) || string(r.after[KeyCAKey]) != string(r.before[KeyCAKey]) {
					t.Error("the CA changed again")
				}
				cas := casOf(t, r.after)
				if len(cas) != 2 {
					t.Fatalf("bundle holds %d CAs, want 2", len(cas))
				}
				leaf := leafOf(t, r.after)
				if leaf.CheckSignatureFrom(cas[0]) != nil {
					t.Error("the serving certificate is not signed by the new CA")
				}
				if err := handshake(t, r.m, pemOf(cas[0]), r.now); err != nil {
					t.Errorf("a client trusting only the new CA: %v", err)
				}
				if err := handshake(t, r.m, pemOf(cas[1]), r.now); err == nil {
					t.Error("a client trusting only the old CA accepts the new serving certificate")
				}
			},
		},
		{
			name:    "CA rotated but a webhook still lacks it: serving certificate kept",
			history: []time.Duration{0, 4*year - day, 4*year + day},
			prepare: func(t *testing.T, client *fake.Clientset) {
				ctx := context.Background()
				c, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				// Helm reapplied the chart: the caBundle is empty again.
				c.Webhooks[1].ClientConfig.CABundle = nil
				if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			at: 4*year + day + time.Minute,
			check: func(t *testing.T, r result) {
				if string(r.after[KeyCert]) != string(r.before[KeyCert]) {
					t.Error("the serving certificate was replaced while a webhook does not trust the new CA")
				}
				if n := writes(r.client, "validatingwebhookconfigurations"); n != 1 {
					t.Errorf("%d ValidatingWebhookConfiguration writes, want 1", n)
				}
			},
		},
		{
			name:    "CA and serving certificate both due: both replaced at once",
			history: []time.Duration{0},
			at:      4*year + day,
			check: func(t *testing.T, r result) {
				oldCA := casOf(t, r.before)[0]
				cas := casOf(t, r.after)
				if len(cas) != 2 || !cas[1].Equal(oldCA) {
					t.Fatalf("bundle holds %d CAs, want the new one, then the old one", len(cas))
				}
				if leafOf(t, r.after).CheckSignatureFrom(cas[0]) != nil {
					t.Error("the serving certificate is not signed by the new CA")
				}
				if err := handshake(t, r.m, pemOf(cas[0]), r.now); err != nil {
					t.Errorf("a client trusting the new CA: %v", err)
				}
			},
		},
		{
			name:    "expired CA leaves the bundle",
			history: []time.Duration{0, 4*year - day, 4*year + day, 4*year + day + time.Minute},
			at:      5*year + day,
			check: func(t *testing.T, r result) {
				cas := casOf(t, r.after)
				if len(cas) != 1 || !cas[0].Equal(casOf(t, r.before)[0]) {
					t.Errorf("bundle holds %d CAs, want only the current one", len(cas))
				}
			},
		},
		{
			name:             "missing webhook configurations are skipped",
			noConfigurations: true,
			check: func(t *testing.T, r result) {
				if r.after == nil {
					t.Fatal("no Secret")
				}
				if !strings.Contains(r.logs, "Webhook configuration not found") {
					t.Errorf("the missing configurations are not logged:\n%s", r.logs)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, logs := testContext(t)
			var objects []runtime.Object
			if !tc.noConfigurations {
				objects = webhookConfigurations()
			}
			client := fake.NewClientset(objects...)
			c := &clock{}
			m := newManager(t, client, testOptions(c.Now))
			for _, at := range tc.history {
				c.Set(start().Add(at))
				if err := m.Ensure(ctx); err != nil {
					t.Fatalf("Ensure at %v: %v", at, err)
				}
			}
			if tc.prepare != nil {
				tc.prepare(t, client)
			}
			before := secretData(t, client)
			client.ClearActions()
			now := start().Add(tc.at)
			c.Set(now)
			logged := len(logs())
			if err := m.Ensure(ctx); err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			r := result{client: client, m: m, now: now, before: before, after: secretData(t, client), logs: logs()[logged:]}
			tc.check(t, r)
			checkConsistent(t, ctx, client, m, now)
		})
	}
}

// TestEnsureRepairs: Ensure replaces what is malformed; Load refuses it.
func TestEnsureRepairs(t *testing.T) {
	// good is a valid Secret made at start; otherNames holds a serving
	// certificate for other names from the same CA; foreign is an
	// unrelated valid Secret with another CA.
	newSecret := func(t *testing.T, data map[string][]byte, opts Options) map[string][]byte {
		t.Helper()
		client := fake.NewClientset()
		if data != nil {
			if err := client.Tracker().Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}, Type: corev1.SecretTypeTLS, Data: data}); err != nil {
				t.Fatal(err)
			}
		}
		ctx, _ := testContext(t)
		if err := newManager(t, client, opts).Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		return secretData(t, client)
	}
	now := func() time.Time { return start() }
	good := newSecret(t, nil, testOptions(now))
	otherOpts := testOptions(now)
	otherOpts.DNSNames = []string{"other.example.com"}
	otherNames := newSecret(t, maps.Clone(good), otherOpts)
	foreign := newSecret(t, nil, testOptions(now))
	garbage := []byte("garbage")

	tests := []struct {
		name    string
		corrupt func(data map[string][]byte)
		// at: Load and Ensure run at this time after start.
		at time.Duration
		// loadErr is part of Load's error, "" when Load succeeds.
		loadErr string
		// logged is part of what Ensure logs.
		logged string
		// keepCA: Ensure keeps the CA.
		keepCA bool
	}{
		{
			name: "garbage everywhere",
			corrupt: func(data map[string][]byte) {
				for k := range data {
					data[k] = garbage
				}
			},
			loadErr: "ca.crt holds data that is not PEM",
			logged:  "ca.crt holds no valid CA certificate",
		},
		{
			name:    "empty Secret",
			corrupt: func(data map[string][]byte) { clear(data) },
			loadErr: "ca.crt holds no certificate",
			logged:  "ca.crt holds no valid CA certificate",
		},
		{
			name: "truncated certificates",
			corrupt: func(data map[string][]byte) {
				bad := []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
				data[KeyCA], data[KeyCert] = bad, bad
			},
			loadErr: "ca.crt certificate 0",
			logged:  "ca.crt holds no valid CA certificate",
		},
		{
			name:    "a private key in the CA bundle",
			corrupt: func(data map[string][]byte) { data[KeyCA] = append(data[KeyCA], data[KeyKey]...) },
			loadErr: `PEM block of type "PRIVATE KEY"`,
			logged:  "dropped expired or unreadable certificates from ca.crt",
			keepCA:  true,
		},
		{
			name:    "serving key does not match the certificate",
			corrupt: func(data map[string][]byte) { data[KeyKey] = foreign[KeyKey] },
			loadErr: "private key does not match public key",
			logged:  "private key does not match public key",
			keepCA:  true,
		},
		{
			name: "serving certificate for other names",
			corrupt: func(data map[string][]byte) {
				data[KeyCert], data[KeyKey] = otherNames[KeyCert], otherNames[KeyKey]
			},
			loadErr: `not valid for "localhost"`,
			logged:  `not valid for \"localhost\"`, // quoted in the log
			keepCA:  true,
		},
		{
			name: "serving certificate signed by no CA in the bundle",
			corrupt: func(data map[string][]byte) {
				data[KeyCert], data[KeyKey] = foreign[KeyCert], foreign[KeyKey]
			},
			loadErr: "does not verify against the CAs in ca.crt",
			logged:  "does not verify against the CAs in ca.crt",
			keepCA:  true,
		},
		{
			name:    "expired serving certificate",
			corrupt: func(map[string][]byte) {},
			at:      2 * year,
			loadErr: "expired",
			logged:  "expired",
			keepCA:  true,
		},
		{
			// The serving certificate is still good, so a follower loads
			// it; the leader needs a CA it can sign with.
			name:    "CA key belongs to no CA in the bundle",
			corrupt: func(data map[string][]byte) { data[KeyCAKey] = foreign[KeyCAKey] },
			logged:  "ca.key does not belong to any CA in ca.crt",
		},
		{
			name:    "CA key garbage",
			corrupt: func(data map[string][]byte) { data[KeyCAKey] = garbage },
			logged:  "ca.key: no PEM private key",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, logs := testContext(t)
			data := maps.Clone(good)
			tc.corrupt(data)
			objects := append(webhookConfigurations(), &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName},
				Type:       corev1.SecretTypeTLS,
				Data:       data,
			})
			client := fake.NewClientset(objects...)
			now := start().Add(tc.at)
			opts := testOptions(func() time.Time { return now })

			follower := newManager(t, client, opts)
			err := follower.Load(ctx)
			switch {
			case tc.loadErr == "" && err != nil:
				t.Errorf("Load: %v", err)
			case tc.loadErr != "" && err == nil:
				t.Errorf("Load accepted the Secret, want an error with %q", tc.loadErr)
			case tc.loadErr != "":
				if !strings.Contains(err.Error(), tc.loadErr) || !strings.Contains(err.Error(), ns+"/"+secretName) {
					t.Errorf("Load: %v, want an error naming %s/%s with %q", err, ns, secretName, tc.loadErr)
				}
				if _, err := follower.GetCertificate(nil); err == nil {
					t.Error("a refused Secret was loaded")
				}
			}

			m := newManager(t, client, opts)
			if err := m.Ensure(ctx); err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			if !strings.Contains(logs(), tc.logged) {
				t.Errorf("Ensure did not log %q:\n%s", tc.logged, logs())
			}
			if n := writes(client, "secrets"); n != 1 {
				t.Errorf("%d Secret writes, want 1", n)
			}
			after := secretData(t, client)
			if kept := casOf(t, after)[0].Equal(casOf(t, good)[0]); kept != tc.keepCA {
				t.Errorf("CA kept: %v, want %v", kept, tc.keepCA)
			}
			checkConsistent(t, ctx, client, m, now)
		})
	}
}

func TestLoad(t *testing.T) {
	ctx, _ := testContext(t)
	seeded := fake.NewClientset()
	if err := newManager(t, seeded, testOptions(start)).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	good := secretData(t, seeded)

	tests := []struct {
		name    string
		secret  bool
		wantErr string
	}{
		{name: "missing Secret", wantErr: "read webhook certificate Secret " + ns + "/" + secretName},
		{name: "valid Secret", secret: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objects []runtime.Object
			if tc.secret {
				objects = append(objects, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}, Type: corev1.SecretTypeTLS, Data: good})
			}
			client := fake.NewClientset(objects...)
			m := newManager(t, client, testOptions(start))
			if _, err := m.GetCertificate(nil); err == nil || !strings.Contains(err.Error(), ns+"/"+secretName) {
				t.Errorf("GetCertificate before Load: %v, want an error naming the Secret", err)
			}
			err := m.Load(ctx)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !apierrors.IsNotFound(err) {
					t.Fatalf("Load: %v, want a NotFound error with %q", err, tc.wantErr)
				}
				if m.CABundle() != nil {
					t.Error("a CA bundle is loaded")
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			cert, err := m.GetCertificate(nil)
			if err != nil || !cert.Leaf.Equal(leafOf(t, good)) {
				t.Errorf("GetCertificate: %v, want the Secret's certificate", err)
			}
			if string(m.CABundle()) != string(good[KeyCA]) {
				t.Error("CABundle is not the Secret's ca.crt")
			}
			for _, a := range client.Actions() {
				if a.GetVerb() != "get" {
					t.Errorf("Load did %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}
}

// TestLoadKeepsCertificate: a Secret that turns bad does not unload what
// was loaded.
func TestLoadKeepsCertificate(t *testing.T) {
	ctx, _ := testContext(t)
	client := fake.NewClientset()
	m := newManager(t, client, testOptions(start))
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	want, _ := m.GetCertificate(nil)
	s, err := client.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data[KeyCert] = []byte("garbage")
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Load(ctx); err == nil {
		t.Fatal("Load accepted garbage")
	}
	if got, err := m.GetCertificate(nil); err != nil || got != want {
		t.Errorf("GetCertificate after a failed Load: %v, want the certificate loaded before", err)
	}
}

// enforceResourceVersions makes the fake client refuse Secret updates
// based on an outdated version, as the API server does.
func enforceResourceVersions(client *fake.Clientset) {
	version := 0 // guarded by the fake's lock, which reactors run under
	client.PrependReactor("*", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() != "create" && a.GetVerb() != "update" {
			return false, nil, nil
		}
		s := a.(interface{ GetObject() runtime.Object }).GetObject().(*corev1.Secret)
		if a.GetVerb() == "update" {
			stored, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("secrets"), s.Namespace, s.Name)
			if err != nil {
				return true, nil, err
			}
			if stored.(*corev1.Secret).ResourceVersion != s.ResourceVersion {
				return true, nil, apierrors.NewConflict(corev1.Resource("secrets"), s.Name, nil)
			}
		}
		version++
		s.ResourceVersion = strconv.Itoa(version)
		return false, nil, nil // the tracker stores it
	})
}

// TestEnsureConcurrentReplicas: replicas racing to create or renew end
// up with the one certificate that won.
func TestEnsureConcurrentReplicas(t *testing.T) {
	tests := []struct {
		name    string
		history []time.Duration
		at      time.Duration
	}{
		{name: "create", at: 0},
		{name: "renew the serving certificate", history: []time.Duration{0}, at: DefaultCertValidity - DefaultRenewBefore + day},
		{name: "rotate the CA", history: []time.Duration{0}, at: 4*year + day},
	}
	const replicas = 4
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, _ := testContext(t)
			client := fake.NewClientset(webhookConfigurations()...)
			enforceResourceVersions(client)
			c := &clock{}
			for _, at := range tc.history {
				c.Set(start().Add(at))
				if err := newManager(t, client, testOptions(c.Now)).Ensure(ctx); err != nil {
					t.Fatal(err)
				}
			}
			now := start().Add(tc.at)
			c.Set(now)
			client.ClearActions()
			ms := make([]*Manager, replicas)
			errs := make([]error, replicas)
			var wg sync.WaitGroup
			for i := range ms {
				ms[i] = newManager(t, client, testOptions(c.Now))
				wg.Go(func() { errs[i] = ms[i].Ensure(ctx) })
			}
			wg.Wait()
			data := secretData(t, client)
			for i, m := range ms {
				if errs[i] != nil {
					t.Fatalf("replica %d: %v", i, errs[i])
				}
				if string(m.CABundle()) != string(data[KeyCA]) {
					t.Errorf("replica %d loaded a CA bundle that lost the race", i)
				}
				if cert, _ := m.GetCertificate(nil); !cert.Leaf.Equal(leafOf(t, data)) {
					t.Errorf("replica %d loaded a serving certificate that lost the race", i)
				}
			}
			if n := writes(client, "secrets"); n < 1 || n > replicas {
				t.Errorf("%d Secret writes", n)
			}
			checkConsistent(t, ctx, client, ms[0], now)
		})
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name   string
		leader bool
		// secret: the Secret exists before Run.
		secret bool
		// wantCert: a certificate is loaded eventually.
		wantCert bool
	}{
		{name: "leader creates", leader: true, wantCert: true},
		{name: "follower loads", secret: true, wantCert: true},
		{name: "follower waits for the Secret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, logs := testContext(t)
			client := fake.NewClientset(webhookConfigurations()...)
			if tc.secret {
				if err := newManager(t, client, testOptions(nil)).Ensure(ctx); err != nil {
					t.Fatal(err)
				}
			}
			client.ClearActions()
			m := newManager(t, client, testOptions(nil))
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				m.Run(ctx, 10*time.Millisecond, tc.leader)
			}()
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := m.GetCertificate(nil)
				if err == nil || time.Now().After(deadline) {
					break
				}
				if !tc.wantCert && strings.Contains(logs(), "Webhook serving certificate not up to date") {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after the context ended")
			}
			_, err := m.GetCertificate(nil)
			if loaded := err == nil; loaded != tc.wantCert {
				t.Errorf("certificate loaded: %v, want %v (%v)", loaded, tc.wantCert, err)
			}
			if !tc.wantCert && !strings.Contains(logs(), "not found") {
				t.Errorf("the missing Secret is not logged:\n%s", logs())
			}
			if !tc.leader && writes(client, "secrets") != 0 {
				t.Error("a follower wrote the Secret")
			}
		})
	}
}

func TestNew(t *testing.T) {
	valid := func(change func(*Options)) Options {
		o := testOptions(nil)
		change(&o)
		return o
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "no namespace", opts: valid(func(o *Options) { o.SecretNamespace = "" }), wantErr: "namespace and a name"},
		{name: "no name", opts: valid(func(o *Options) { o.SecretName = "" }), wantErr: "namespace and a name"},
		{name: "no DNS names", opts: valid(func(o *Options) { o.DNSNames = nil }), wantErr: "at least one DNS name"},
		{name: "empty DNS name", opts: valid(func(o *Options) { o.DNSNames = append(o.DNSNames, "") }), wantErr: "DNS name 2 is empty"},
		{name: "empty configuration name", opts: valid(func(o *Options) { o.ValidatingWebhookConfigurations = []string{""} }), wantErr: "configuration name is empty"},
		{name: "renewal longer than the certificate", opts: valid(func(o *Options) { o.CertValidity, o.RenewBefore = time.Hour, 2*time.Hour }), wantErr: "no room for renewal"},
		{name: "certificate longer than the CA", opts: valid(func(o *Options) { o.CAValidity = 300 * day }), wantErr: "no room for renewal"},
		{name: "defaults", opts: testOptions(nil)},
		{name: "short periods", opts: valid(func(o *Options) { o.CAValidity, o.CertValidity, o.RenewBefore = 3*time.Hour, time.Hour, time.Minute })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(fake.NewClientset(), tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			for _, d := range []time.Duration{m.opts.CAValidity, m.opts.CertValidity, m.opts.RenewBefore} {
				if d <= 0 {
					t.Errorf("a validity period is not defaulted: %+v", m.opts)
				}
			}
			if m.opts.Now == nil {
				t.Error("Now is not defaulted")
			}
			tc.opts.DNSNames[0] = "changed"
			if m.opts.DNSNames[0] == "changed" {
				t.Error("the Manager shares DNSNames with the caller")
			}
		})
	}
	if _, err := New(nil, testOptions(nil)); err == nil {
		t.Error("New accepted a nil client")
	}
}

// TestEnsureOwnerReferences: the Secret Ensure creates is owned by
// Options.OwnerReferences; one made without them (by a controller that
// had no owner) gets them added at the next Ensure with its certificate
// and its other owners kept, and then nothing more is written.
func TestEnsureOwnerReferences(t *testing.T) {
	ctx, _ := testContext(t)
	c := &clock{now: start()}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "dra-swap-controller", UID: "uid-1"}
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "other", UID: "uid-0"}
	withOwner := testOptions(c.Now)
	withOwner.OwnerReferences = []metav1.OwnerReference{owner}
	owners := func(client *fake.Clientset) []metav1.OwnerReference {
		s, err := client.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.OwnerReferences
	}

	t.Run("created owned", func(t *testing.T) {
		client := fake.NewClientset(webhookConfigurations()...)
		if err := newManager(t, client, withOwner).Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		if got := owners(client); !slices.Equal(got, []metav1.OwnerReference{owner}) {
			t.Errorf("owners %v, want %v", got, owner)
		}
	})

	t.Run("existing Secret adopted", func(t *testing.T) {
		client := fake.NewClientset(webhookConfigurations()...)
		if err := newManager(t, client, testOptions(c.Now)).Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := client.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.OwnerReferences) != 0 {
			t.Fatalf("a Manager without owners wrote owners %v", s.OwnerReferences)
		}
		s.OwnerReferences = []metav1.OwnerReference{other}
		if _, err := client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		before := secretData(t, client)
		m := newManager(t, client, withOwner)
		for i := range 2 {
			client.ClearActions()
			if err := m.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			if n, want := writes(client, "secrets"), 1-i; n != want {
				t.Errorf("Ensure %d: %d Secret writes, want %d", i+1, n, want)
			}
		}
		if got := owners(client); !slices.Equal(got, []metav1.OwnerReference{other, owner}) {
			t.Errorf("owners %v, want %v and %v", got, other, owner)
		}
		if after := secretData(t, client); !maps.EqualFunc(before, after, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Error("adding the owner changed the certificate")
		}
	})
}
