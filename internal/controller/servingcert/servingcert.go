// Package servingcert keeps the webhook server's TLS certificate: a
// self-signed CA and a serving certificate stored in one Secret, so every
// replica serves the same certificate, with the CA bundle injected into
// the webhook configurations' caBundle.
//
// The leader calls Ensure, which creates, repairs and rotates what is in
// the Secret; the other replicas call Load, which only reads it. A CA is
// rotated in two steps so that the API server never meets a serving
// certificate it does not trust: first the new CA is put in front of the
// old one in ca.crt and injected, with the serving certificate left as it
// is; once every configured webhook trusts the new CA, a later Ensure
// issues a serving certificate signed by it. The old CA stays in the
// bundle until it expires.
package servingcert

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// Secret keys.
const (
	KeyCert  = corev1.TLSCertKey       // tls.crt: the serving certificate (PEM)
	KeyKey   = corev1.TLSPrivateKeyKey // tls.key: its private key (PEM)
	KeyCA    = "ca.crt"                // the CA bundle (PEM, newest CA first)
	KeyCAKey = "ca.key"                // the private key of the CA that signs (PEM)
)

// Defaults of Options.
const (
	DefaultCAValidity   = 5 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
	DefaultRenewBefore  = 30 * 24 * time.Hour
)

const (
	// fieldManager names this package in the objects it writes.
	fieldManager = "dra-swap-controller"
	// writeAttempts bounds how often Ensure starts over after another
	// replica wrote the Secret first.
	writeAttempts = 5
	// backdate is how far before "now" certificates become valid, for
	// clocks that lag behind.
	backdate = time.Hour
)

// Options configure a Manager.
type Options struct {
	// SecretNamespace and SecretName name the Secret (type
	// kubernetes.io/tls) that holds the CA and the serving certificate
	// under KeyCert, KeyKey, KeyCA and KeyCAKey.
	SecretNamespace, SecretName string
	// DNSNames are the names the serving certificate is valid for, e.g.
	// "dra-swap-controller.kube-system.svc" and "localhost". The first
	// one is also its common name.
	DNSNames []string
	// MutatingWebhookConfigurations and ValidatingWebhookConfigurations
	// name the configurations whose every webhook's clientConfig.caBundle
	// is kept equal to ca.crt.
	MutatingWebhookConfigurations   []string
	ValidatingWebhookConfigurations []string
	// CAValidity is how long a new CA is valid (DefaultCAValidity).
	CAValidity time.Duration
	// CertValidity is how long a new serving certificate is valid
	// (DefaultCertValidity).
	CertValidity time.Duration
	// RenewBefore: a serving certificate is renewed when it expires
	// within RenewBefore (DefaultRenewBefore), the CA when it expires
	// within max(RenewBefore, CertValidity), so that a new CA's first
	// serving certificate could still outlive the old CA.
	RenewBefore time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
	// OwnerReferences are set on the Secret when Ensure creates it and
	// added to one that lacks them (matched by UID), so that deleting
	// the owner (the controller's Deployment) deletes the Secret.
	OwnerReferences []metav1.OwnerReference
}

// Manager keeps the serving certificate. It is safe for concurrent use.
type Manager struct {
	client kubernetes.Interface
	opts   Options

	mu     sync.RWMutex
	cert   *tls.Certificate
	bundle []byte
}

// New checks the options, fills in defaults and returns a Manager that
// has nothing loaded yet.
func New(client kubernetes.Interface, opts Options) (*Manager, error) {
	if client == nil {
		return nil, errors.New("servingcert: no Kubernetes client")
	}
	if opts.SecretNamespace == "" || opts.SecretName == "" {
		return nil, fmt.Errorf("servingcert: the certificate Secret needs a namespace and a name, got %q/%q", opts.SecretNamespace, opts.SecretName)
	}
	if len(opts.DNSNames) == 0 {
		return nil, fmt.Errorf("servingcert: Secret %s/%s: the serving certificate needs at least one DNS name", opts.SecretNamespace, opts.SecretName)
	}
	if i := slices.Index(opts.DNSNames, ""); i >= 0 {
		return nil, fmt.Errorf("servingcert: Secret %s/%s: DNS name %d is empty", opts.SecretNamespace, opts.SecretName, i)
	}
	for _, names := range [][]string{opts.MutatingWebhookConfigurations, opts.ValidatingWebhookConfigurations} {
		if slices.Contains(names, "") {
			return nil, fmt.Errorf("servingcert: Secret %s/%s: a webhook configuration name is empty", opts.SecretNamespace, opts.SecretName)
		}
	}
	if opts.CAValidity <= 0 {
		opts.CAValidity = DefaultCAValidity
	}
	if opts.CertValidity <= 0 {
		opts.CertValidity = DefaultCertValidity
	}
	if opts.RenewBefore <= 0 {
		opts.RenewBefore = DefaultRenewBefore
	}
	if opts.RenewBefore >= opts.CertValidity || max(opts.RenewBefore, opts.CertValidity) >= opts.CAValidity {
		return nil, fmt.Errorf("servingcert: Secret %s/%s: validity periods leave no room for renewal: CA %v, serving certificate %v, renewed %v before the end",
			opts.SecretNamespace, opts.SecretName, opts.CAValidity, opts.CertValidity, opts.RenewBefore)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// The Manager keeps its own copies, so that the caller cannot change
	// them under a running Ensure.
	opts.DNSNames = slices.Clone(opts.DNSNames)
	opts.MutatingWebhookConfigurations = slices.Clone(opts.MutatingWebhookConfigurations)
	opts.ValidatingWebhookConfigurations = slices.Clone(opts.ValidatingWebhookConfigurations)
	return &Manager{client: client, opts: opts}, nil
}

func (m *Manager) secretRef() string { return m.opts.SecretNamespace + "/" + m.opts.SecretName }

// GetCertificate is for tls.Config.GetCertificate. It fails until Ensure
// or Load has succeeded once.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cert == nil {
		return nil, fmt.Errorf("no webhook serving certificate loaded yet from Secret %s", m.secretRef())
	}
	return m.cert, nil
}

// CABundle returns the PEM CA bundle loaded with the serving certificate,
// nil before the first load.
func (m *Manager) CABundle() []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.bundle)
}

// Run calls Ensure (when leader) or Load every interval until ctx ends,
// logging errors. Until the first success it retries every second at
// the latest, so that a replica starts serving soon.
func (m *Manager) Run(ctx context.Context, interval time.Duration, leader bool) {
	logger := klog.FromContext(ctx).WithValues("secret", m.secretRef(), "leader", leader)
	ctx = klog.NewContext(ctx, logger)
	timer := time.NewTimer(0)
	defer timer.Stop()
	ok := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		var err error
		if leader {
			err = m.Ensure(ctx)
		} else {
			err = m.Load(ctx)
		}
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "Webhook serving certificate not up to date")
		}
		ok = ok || err == nil
		wait := interval
		if !ok {
			wait = min(interval, time.Second)
		}
		timer.Reset(wait)
	}
}

// Load reads the Secret and loads the serving certificate and CA bundle,
// writing nothing. A Secret that is missing, malformed or whose serving
// certificate does not verify against its own ca.crt is an error, and
// what was loaded before stays.
func (m *Manager) Load(ctx context.Context) error {
	s, err := m.client.CoreV1().Secrets(m.opts.SecretNamespace).Get(ctx, m.opts.SecretName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read webhook certificate Secret %s: %w", m.secretRef(), err)
	}
	if err := m.load(s.Data); err != nil {
		return fmt.Errorf("load webhook certificate from Secret %s: %w", m.secretRef(), err)
	}
	return nil
}

// load checks data as Load does and keeps it.
func (m *Manager) load(data map[string][]byte) error {
	cas, err := parseBundle(data[KeyCA])
	if err != nil {
		return err
	}
	pair, _, _, err := m.checkServing(data, cas, m.opts.Now())
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cert = pair
	m.bundle = slices.Clone(data[KeyCA])
	return nil
}

// Ensure makes the Secret hold a valid CA and a serving certificate for
// the DNS names, creating the Secret when it is missing and replacing
// whatever is malformed or due; loads them; and injects ca.crt into the
// configured webhook configurations, where it differs. When another
// replica writes the Secret first, Ensure starts over from what it
// wrote. A configuration that does not exist is logged and skipped.
func (m *Manager) Ensure(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("secret", m.secretRef())
	ctx = klog.NewContext(ctx, logger)
	secrets := m.client.CoreV1().Secrets(m.opts.SecretNamespace)
	var lastErr error
	for range writeAttempts {
		s, err := secrets.Get(ctx, m.opts.SecretName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("read webhook certificate Secret %s: %w", m.secretRef(), err)
		}
		exists := err == nil
		var current map[string][]byte
		if exists {
			current = s.Data
		}
		data, changes, err := m.plan(ctx, current)
		if err != nil {
			return fmt.Errorf("renew webhook certificate in Secret %s: %w", m.secretRef(), err)
		}
		var owners []metav1.OwnerReference
		if exists {
			owners = s.OwnerReferences
		}
		owners, ownersAdded := WithOwners(owners, m.opts.OwnerReferences)
		if exists && ownersAdded {
			changes = append(changes, "owner references")
		}
		if len(changes) > 0 {
			logger.Info("Writing webhook certificate Secret", "created", !exists, "changes", changes)
			if exists {
				s.Data = data
				s.OwnerReferences = owners
				_, err = secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: fieldManager})
			} else {
				_, err = secrets.Create(ctx, &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{
						Name:            m.opts.SecretName,
						Namespace:       m.opts.SecretNamespace,
						Labels:          map[string]string{"app.kubernetes.io/managed-by": fieldManager},
						OwnerReferences: owners,
					},
					Type: corev1.SecretTypeTLS,
					Data: data,
				}, metav1.CreateOptions{FieldManager: fieldManager})
			}
			// Another replica created, updated or deleted it in the
			// meantime: start over from what is there now.
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || (exists && apierrors.IsNotFound(err)) {
				logger.V(2).Info("Webhook certificate Secret changed concurrently, reading it again", "err", err)
				lastErr = err
				continue
			}
			if err != nil {
				return fmt.Errorf("write webhook certificate Secret %s: %w", m.secretRef(), err)
			}
		}
		if err := m.load(data); err != nil {
			return fmt.Errorf("load the webhook certificate just renewed in Secret %s: %w", m.secretRef(), err)
		}
		return m.inject(ctx, data[KeyCA])
	}
	return fmt.Errorf("write webhook certificate Secret %s: gave up after %d concurrent changes: %w", m.secretRef(), writeAttempts, lastErr)
}

// WithOwners returns refs with each of owners whose UID none of refs
// names added (a new slice), and whether it added one.
func WithOwners(refs, owners []metav1.OwnerReference) ([]metav1.OwnerReference, bool) {
	out := slices.Clone(refs)
	for _, o := range owners {
		if !slices.ContainsFunc(out, func(r metav1.OwnerReference) bool { return r.UID == o.UID }) {
			out = append(out, o)
		}
	}
	return out, len(out) > len(refs)
}

// plan returns the Secret data with what is missing, malformed or due
// replaced, and a description of each change (none: nothing to write).
func (m *Manager) plan(ctx context.Context, data map[string][]byte) (map[string][]byte, []string, error) {
	now := m.opts.Now()
	out := maps.Clone(data)
	if out == nil {
		out = map[string][]byte{}
	}
	var changes []string

	// The CAs worth keeping: those that parse, are CAs and have not
	// expired. Anything else in ca.crt is dropped.
	cas := usableCAs(data[KeyCA], now)
	ca, caKey, err := m.signingCA(cas, data[KeyCAKey], now)
	rotated := err != nil
	if rotated {
		changes = append(changes, "new CA: "+err.Error())
		if ca, caKey, err = newCA(now, m.opts.CAValidity); err != nil {
			return nil, nil, err
		}
		keyPEM, err := encodeKey(caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("encode CA key: %w", err)
		}
		// The old CAs stay behind the new one until they expire, so
		// that serving certificates they signed stay trusted.
		cas = append([]*x509.Certificate{ca}, cas...)
		out[KeyCAKey] = keyPEM
	}
	if bundle := encodeCerts(cas); !bytes.Equal(bundle, data[KeyCA]) {
		if !rotated {
			changes = append(changes, "dropped expired or unreadable certificates from "+KeyCA)
		}
		out[KeyCA] = bundle
	}

	_, leaf, issuer, err := m.checkServing(out, cas, now)
	reason := ""
	switch {
	case err != nil:
		reason = err.Error()
	case !now.Before(leaf.NotAfter.Add(-m.opts.RenewBefore)):
		reason = "it expires " + leaf.NotAfter.UTC().Format(time.RFC3339)
	case !issuer.Equal(ca) && rotated:
		// Keep it until the webhooks trust the new CA (a later Ensure).
		klog.FromContext(ctx).V(2).Info("Keeping the serving certificate signed by the old CA until the new CA is injected")
	case !issuer.Equal(ca):
		published, err := m.published(ctx, ca)
		if err != nil {
			return nil, nil, err
		}
		if published {
			reason = "it is signed by an older CA and every webhook trusts the new one"
		} else {
			klog.FromContext(ctx).V(2).Info("Keeping the serving certificate signed by the old CA until the new CA is injected")
		}
	}
	if reason != "" {
		changes = append(changes, "new serving certificate: "+reason)
		certPEM, keyPEM, err := newServing(now, m.opts.CertValidity, m.opts.DNSNames, ca, caKey)
		if err != nil {
			return nil, nil, err
		}
		out[KeyCert], out[KeyKey] = certPEM, keyPEM
	}
	return out, changes, nil
}

// signingCA returns the CA in cas whose key keyPEM is, or an error saying
// why there is none that can still sign.
func (m *Manager) signingCA(cas []*x509.Certificate, keyPEM []byte, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	if len(cas) == 0 {
		return nil, nil, fmt.Errorf("%s holds no valid CA certificate", KeyCA)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", KeyCAKey, err)
	}
	i := slices.IndexFunc(cas, func(c *x509.Certificate) bool { return samePublicKey(c.PublicKey, key.Public()) })
	if i < 0 {
		return nil, nil, fmt.Errorf("%s does not belong to any CA in %s", KeyCAKey, KeyCA)
	}
	ca := cas[i]
	if ca.KeyUsage != 0 && ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, nil, fmt.Errorf("CA %q may not sign certificates", ca.Subject.CommonName)
	}
	if renewAt := ca.NotAfter.Add(-max(m.opts.RenewBefore, m.opts.CertValidity)); !now.Before(renewAt) {
		return nil, nil, fmt.Errorf("CA %q expires %s", ca.Subject.CommonName, ca.NotAfter.UTC().Format(time.RFC3339))
	}
	return ca, key, nil
}

// checkServing parses the serving certificate and key in data and checks
// that they belong together, name every DNS name and verify at now
// against one of cas, which it returns as issuer.
func (m *Manager) checkServing(data map[string][]byte, cas []*x509.Certificate, now time.Time) (pair *tls.Certificate, leaf, issuer *x509.Certificate, err error) {
	p, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serving certificate %s and key %s: %w", KeyCert, KeyKey, err)
	}
	if leaf = p.Leaf; leaf == nil {
		if leaf, err = x509.ParseCertificate(p.Certificate[0]); err != nil {
			return nil, nil, nil, fmt.Errorf("serving certificate %s: %w", KeyCert, err)
		}
	}
	for _, name := range m.opts.DNSNames {
		if err := leaf.VerifyHostname(name); err != nil {
			return nil, nil, nil, fmt.Errorf("serving certificate %s is not valid for %q: names %q", KeyCert, name, leaf.DNSNames)
		}
	}
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	intermediates := x509.NewCertPool()
	for _, der := range p.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			intermediates.AddCert(c)
		}
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: intermediates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serving certificate %s does not verify against the CAs in %s: %w", KeyCert, KeyCA, err)
	}
	p.Leaf = leaf
	return &p, leaf, chains[0][len(chains[0])-1], nil
}

// webhookTarget is one webhook configuration whose caBundles are kept.
type webhookTarget struct {
	kind, name string
	// get reads the configuration and returns pointers into its
	// webhooks' client configurations and a function that writes the
	// configuration back.
	get func(ctx context.Context) ([]*admissionregistrationv1.WebhookClientConfig, func(context.Context) error, error)
}

func (m *Manager) targets() []webhookTarget {
	api := m.client.AdmissionregistrationV1()
	var out []webhookTarget
	for _, name := range m.opts.MutatingWebhookConfigurations {
		out = append(out, target("MutatingWebhookConfiguration", name, api.MutatingWebhookConfigurations(),
			func(c *admissionregistrationv1.MutatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
				var ccs []*admissionregistrationv1.WebhookClientConfig
				for i := range c.Webhooks {
					ccs = append(ccs, &c.Webhooks[i].ClientConfig)
				}
				return ccs
			}))
	}
	for _, name := range m.opts.ValidatingWebhookConfigurations {
		out = append(out, target("ValidatingWebhookConfiguration", name, api.ValidatingWebhookConfigurations(),
			func(c *admissionregistrationv1.ValidatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
				var ccs []*admissionregistrationv1.WebhookClientConfig
				for i := range c.Webhooks {
					ccs = append(ccs, &c.Webhooks[i].ClientConfig)
				}
				return ccs
			}))
	}
	return out
}

// configurationClient is what target needs of a typed webhook
// configuration client.
type configurationClient[C any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (C, error)
	Update(ctx context.Context, c C, opts metav1.UpdateOptions) (C, error)
}

// target makes a webhookTarget of one configuration of either kind.
func target[C any](kind, name string, client configurationClient[C], clientConfigs func(C) []*admissionregistrationv1.WebhookClientConfig) webhookTarget {
	return webhookTarget{kind: kind, name: name,
		get: func(ctx context.Context) ([]*admissionregistrationv1.WebhookClientConfig, func(context.Context) error, error) {
			c, err := client.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, err
			}
			return clientConfigs(c), func(ctx context.Context) error {
				_, err := client.Update(ctx, c, metav1.UpdateOptions{FieldManager: fieldManager})
				return err
			}, nil
		}}
}

// inject sets caBundle to bundle on every webhook of the configured
// configurations where it differs, retrying on conflicts. A missing
// configuration is skipped; the other errors are returned together.
func (m *Manager) inject(ctx context.Context, bundle []byte) error {
	logger := klog.FromContext(ctx)
	var errs []error
	for _, t := range m.targets() {
		updated := false
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ccs, update, err := t.get(ctx)
			if err != nil {
				return err
			}
			changed := false
			for _, cc := range ccs {
				if !bytes.Equal(cc.CABundle, bundle) {
					cc.CABundle = slices.Clone(bundle)
					changed = true
				}
			}
			if !changed {
				return nil
			}
			if err := update(ctx); err != nil {
				return err
			}
			updated = true
			return nil
		})
		switch {
		case apierrors.IsNotFound(err):
			logger.Info("Webhook configuration not found, CA bundle not injected yet", "kind", t.kind, "name", t.name)
		case err != nil:
			errs = append(errs, fmt.Errorf("inject CA bundle of Secret %s into %s %s: %w", m.secretRef(), t.kind, t.name, err))
		case updated:
			logger.Info("Injected CA bundle", "kind", t.kind, "name", t.name)
		}
	}
	return errors.Join(errs...)
}

// published tells whether every webhook of every configured
// configuration that exists trusts ca.
func (m *Manager) published(ctx context.Context, ca *x509.Certificate) (bool, error) {
	for _, t := range m.targets() {
		ccs, _, err := t.get(ctx)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read %s %s: %w", t.kind, t.name, err)
		}
		for _, cc := range ccs {
			if !slices.ContainsFunc(parseCerts(cc.CABundle), ca.Equal) {
				return false, nil
			}
		}
	}
	return true, nil
}

// parseBundle parses a PEM bundle strictly: it must hold at least one
// certificate and nothing but certificates that parse.
func parseBundle(bundle []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				return nil, fmt.Errorf("%s holds data that is not PEM", KeyCA)
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s holds a PEM block of type %q, want CERTIFICATE", KeyCA, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s certificate %d: %w", KeyCA, len(out), err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no certificate", KeyCA)
	}
	return out, nil
}

// parseCerts returns the certificates in a PEM bundle that parse,
// skipping everything else.
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

// usableCAs returns the CA certificates in a PEM bundle that have not
// expired at now, without duplicates, in their order.
func usableCAs(bundle []byte, now time.Time) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range parseCerts(bundle) {
		if c.IsCA && now.Before(c.NotAfter) && !slices.ContainsFunc(out, c.Equal) {
			out = append(out, c)
		}
	}
	return out
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseKey parses a PEM private key in PKCS #8, SEC 1 (EC) or PKCS #1
// (RSA) form.
func parseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM private key")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block of type %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("unsupported private key type %T", key)
	}
}

func samePublicKey(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	sn, err := serialNumber()
	if err != nil {
		return nil, nil, fmt.Errorf("CA serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: fieldManager + "-ca@" + now.UTC().Format("20060102T150405Z")},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse new CA certificate: %w", err)
	}
	return cert, key, nil
}

// newServing returns a PEM serving certificate for names signed by ca,
// valid for validity but not beyond ca, and its PEM key.
func newServing(now time.Time, validity time.Duration, names []string, ca *x509.Certificate, caKey crypto.Signer) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate serving key: %w", err)
	}
	sn, err := serialNumber()
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
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, fmt.Errorf("encode serving key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}
