// Package servingcert keeps the webhook server's TLS certificate: a
// self-signed CA and a serving certificate stored in one Secret, so every
// replica serves the same certificate, with the CA injected into the
// webhook configurations' caBundle. The leader creates and rotates them;
// the other replicas only load them. A rotated CA is appended to the
// bundle, not swapped in, so the API server trusts both while replicas
// move to the new certificate.
package servingcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Secret keys.
const (
	KeyCert   = corev1.TLSCertKey       // tls.crt: the serving certificate
	KeyKey    = corev1.TLSPrivateKeyKey // tls.key
	KeyCA     = "ca.crt"                // the CA bundle (newest first)
	KeyCAKey  = "ca.key"                // the newest CA's key
	ownerName = "dra-swap-controller"
)

// Options configure a Manager.
type Options struct {
	SecretNamespace, SecretName string
	// DNSNames are the serving certificate's names.
	DNSNames []string
	// Webhook configurations whose every caBundle is kept current.
	MutatingWebhookConfigurations   []string
	ValidatingWebhookConfigurations []string
	// CAValidity (5 years), CertValidity (1 year) and RenewBefore (30
	// days): the serving certificate is renewed RenewBefore its end, the
	// CA max(RenewBefore, CertValidity) before its end.
	CAValidity, CertValidity, RenewBefore time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Manager keeps the certificate. It is safe for concurrent use.
type Manager struct {
	client kubernetes.Interface
	opts   Options

	mu     sync.RWMutex
	cert   *tls.Certificate
	bundle []byte
}

// New checks the options and fills in defaults.
func New(client kubernetes.Interface, opts Options) (*Manager, error) {
	if opts.SecretNamespace == "" || opts.SecretName == "" {
		return nil, errors.New("the certificate Secret needs a namespace and a name")
	}
	if len(opts.DNSNames) == 0 {
		return nil, errors.New("the serving certificate needs at least one DNS name")
	}
	if opts.CAValidity <= 0 {
		opts.CAValidity = 5 * 365 * 24 * time.Hour
	}
	if opts.CertValidity <= 0 {
		opts.CertValidity = 365 * 24 * time.Hour
	}
	if opts.RenewBefore <= 0 {
		opts.RenewBefore = 30 * 24 * time.Hour
	}
	if opts.RenewBefore >= opts.CertValidity || max(opts.RenewBefore, opts.CertValidity) >= opts.CAValidity {
		return nil, fmt.Errorf("validity periods do not leave room for renewal: CA %v, certificate %v, renew %v before the end", opts.CAValidity, opts.CertValidity, opts.RenewBefore)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Manager{client: client, opts: opts}, nil
}

func (m *Manager) secretRef() string { return m.opts.SecretNamespace + "/" + m.opts.SecretName }

// GetCertificate is for tls.Config.GetCertificate.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cert == nil {
		return nil, fmt.Errorf("no serving certificate loaded yet from Secret %s", m.secretRef())
	}
	return m.cert, nil
}

// CABundle returns the loaded PEM CA bundle.
func (m *Manager) CABundle() []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.bundle)
}

// Run calls Ensure (leader) or Load every interval until ctx ends;
// until the first success it retries every second.
func (m *Manager) Run(ctx context.Context, interval time.Duration, leader bool) {
	logger := klog.FromContext(ctx).WithValues("secret", m.secretRef(), "leader", leader)
	ok := false
	for {
		var err error
		if leader {
			err = m.Ensure(ctx)
		} else {
			err = m.Load(ctx)
		}
		if err != nil {
			logger.Error(err, "Webhook serving certificate not ready")
		}
		ok = ok || err == nil
		wait := interval
		if !ok {
			wait = min(interval, time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Load reads the Secret and loads the certificate, writing nothing.
func (m *Manager) Load(ctx context.Context) error {
	s, err := m.client.CoreV1().Secrets(m.opts.SecretNamespace).Get(ctx, m.opts.SecretName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read webhook certificate Secret %s: %w", m.secretRef(), err)
	}
	if err := m.load(s.Data); err != nil {
		return fmt.Errorf("webhook certificate Secret %s: %w", m.secretRef(), err)
	}
	return nil
}

func (m *Manager) load(data map[string][]byte) error {
	cert, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return fmt.Errorf("%s and %s: %w", KeyCert, KeyKey, err)
	}
	if len(data[KeyCA]) == 0 {
		return fmt.Errorf("%s is empty", KeyCA)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cert = &cert
	m.bundle = slices.Clone(data[KeyCA])
	return nil
}

// Ensure creates or rotates what is due, stores it in the Secret (racing
// replicas retry on conflicts), loads it and injects the CA bundle.
func (m *Manager) Ensure(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("secret", m.secretRef())
	secrets := m.client.CoreV1().Secrets(m.opts.SecretNamespace)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := secrets.Get(ctx, m.opts.SecretName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("read webhook certificate Secret %s: %w", m.secretRef(), err)
		}
		exists := err == nil
		var current map[string][]byte
		if exists {
			current = s.Data
		}
		data, changes, err := m.renew(current)
		if err != nil {
			return fmt.Errorf("renew webhook certificate: %w", err)
		}
		if len(changes) > 0 {
			logger.Info("Writing webhook certificate", "changes", changes)
			if exists {
				s.Data = data
				_, err = secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: ownerName})
			} else {
				_, err = secrets.Create(ctx, &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: m.opts.SecretName, Namespace: m.opts.SecretNamespace,
						Labels: map[string]string{"app.kubernetes.io/managed-by": ownerName}},
					Type: corev1.SecretTypeTLS,
					Data: data,
				}, metav1.CreateOptions{FieldManager: ownerName})
			}
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				lastErr = err
				continue // another replica wrote it: start over from its data
			}
			if err != nil {
				return fmt.Errorf("write webhook certificate Secret %s: %w", m.secretRef(), err)
			}
		}
		if err := m.load(data); err != nil {
			return fmt.Errorf("load the certificate just written to %s: %w", m.secretRef(), err)
		}
		return m.inject(ctx, data[KeyCA])
	}
	return fmt.Errorf("write webhook certificate Secret %s: gave up after repeated conflicts: %w", m.secretRef(), lastErr)
}

// renew returns the Secret data with what is missing, invalid or due
// replaced, and what it changed (nil: nothing).
func (m *Manager) renew(data map[string][]byte) (map[string][]byte, []string, error) {
	now := m.opts.Now()
	var changes []string
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = v
	}
	caCert, caKey, why := m.currentCA(data, now)
	if why != "" {
		changes = append(changes, "new CA: "+why)
		var err error
		if caCert, caKey, err = newCA(now, m.opts.CAValidity); err != nil {
			return nil, nil, err
		}
		bundle := pemCert(caCert.Raw)
		// Keep the older CAs that are still valid, so the serving
		// certificate they signed stays trusted until replicas reload.
		for _, old := range parseCerts(data[KeyCA]) {
			if now.Before(old.NotAfter) && !old.Equal(caCert) {
				bundle = append(bundle, pemCert(old.Raw)...)
			}
		}
		keyDER, err := x509.MarshalECPrivateKey(caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("encode CA key: %w", err)
		}
		out[KeyCA] = bundle
		out[KeyCAKey] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	} else if certs := parseCerts(data[KeyCA]); len(certs) > 1 {
		// Drop CAs that have expired since a rotation kept them.
		var bundle []byte
		for _, c := range certs {
			if now.Before(c.NotAfter) {
				bundle = append(bundle, pemCert(c.Raw)...)
			}
		}
		if !bytes.Equal(bundle, data[KeyCA]) {
			changes = append(changes, "dropped expired CAs from the bundle")
			out[KeyCA] = bundle
		}
	}
	if why := m.servingProblem(out, caCert, now); why != "" || len(changes) > 0 {
		if why == "" {
			why = "signed by the old CA"
		}
		changes = append(changes, "new serving certificate: "+why)
		certPEM, keyPEM, err := newServing(now, m.opts.CertValidity, m.opts.DNSNames, caCert, caKey)
		if err != nil {
			return nil, nil, err
		}
		out[KeyCert], out[KeyKey] = certPEM, keyPEM
	}
	return out, changes, nil
}

// currentCA returns the bundle's first CA if its key is ca.key and it is
// not due for renewal, or why not.
func (m *Manager) currentCA(data map[string][]byte, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	certs := parseCerts(data[KeyCA])
	if len(certs) == 0 {
		return nil, nil, "no CA certificate"
	}
	block, _ := pem.Decode(data[KeyCAKey])
	if block == nil {
		return nil, nil, "no CA key"
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, "CA key unreadable: " + err.Error()
	}
	ca := certs[0]
	pub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(key.Public()) || !ca.IsCA {
		return nil, nil, "CA certificate does not match its key"
	}
	if renewAt := ca.NotAfter.Add(-max(m.opts.RenewBefore, m.opts.CertValidity)); !now.Before(renewAt) {
		return nil, nil, fmt.Sprintf("CA expires %s", ca.NotAfter.Format(time.RFC3339))
	}
	return ca, key, ""
}

// servingProblem says why the serving certificate must be replaced, ""
// when it is fine.
func (m *Manager) servingProblem(data map[string][]byte, ca *x509.Certificate, now time.Time) string {
	pair, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return "unreadable: " + err.Error()
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return "unreadable: " + err.Error()
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return "not signed by the current CA"
	}
	for _, name := range m.opts.DNSNames {
		if !slices.Contains(leaf.DNSNames, name) {
			return "does not name " + name
		}
	}
	if !now.Before(leaf.NotAfter.Add(-m.opts.RenewBefore)) {
		return fmt.Sprintf("expires %s", leaf.NotAfter.Format(time.RFC3339))
	}
	return ""
}

// inject sets caBundle on every webhook of the configured configurations.
func (m *Manager) inject(ctx context.Context, bundle []byte) error {
	logger := klog.FromContext(ctx)
	api := m.client.AdmissionregistrationV1()
	for _, name := range m.opts.MutatingWebhookConfigurations {
		c, err := api.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			logger.Info("MutatingWebhookConfiguration not found; its CA is injected once it exists", "name", name)
			continue
		}
		if err != nil {
			return fmt.Errorf("read MutatingWebhookConfiguration %s: %w", name, err)
		}
		changed := false
		for i := range c.Webhooks {
			if !bytes.Equal(c.Webhooks[i].ClientConfig.CABundle, bundle) {
				c.Webhooks[i].ClientConfig.CABundle, changed = bundle, true
			}
		}
		if changed {
			if _, err := api.MutatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{FieldManager: ownerName}); err != nil {
				return fmt.Errorf("inject CA into MutatingWebhookConfiguration %s: %w", name, err)
			}
			logger.Info("Injected CA bundle", "mutatingWebhookConfiguration", name)
		}
	}
	for _, name := range m.opts.ValidatingWebhookConfigurations {
		c, err := api.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			logger.Info("ValidatingWebhookConfiguration not found; its CA is injected once it exists", "name", name)
			continue
		}
		if err != nil {
			return fmt.Errorf("read ValidatingWebhookConfiguration %s: %w", name, err)
		}
		changed := false
		for i := range c.Webhooks {
			if !bytes.Equal(c.Webhooks[i].ClientConfig.CABundle, bundle) {
				c.Webhooks[i].ClientConfig.CABundle, changed = bundle, true
			}
		}
		if changed {
			if _, err := api.ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{FieldManager: ownerName}); err != nil {
				return fmt.Errorf("inject CA into ValidatingWebhookConfiguration %s: %w", name, err)
			}
			logger.Info("Injected CA bundle", "validatingWebhookConfiguration", name)
		}
	}
	return nil
}

func parseCerts(bundle []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, fmt.Errorf("CA serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "dra-swap-controller-ca@" + now.UTC().Format("20060102T150405Z")},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return cert, key, nil
}

func newServing(now time.Time, validity time.Duration, names []string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate serving key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate serial number: %w", err)
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode serving key: %w", err)
	}
	return pemCert(der), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
