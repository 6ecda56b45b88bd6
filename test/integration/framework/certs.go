package framework

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// certAuthority is the test cluster's CA: it signs the apiserver's serving
// certificate and every client certificate, and the apiserver trusts it for
// client authentication (--client-ca-file).
type certAuthority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

const certValidity = 24 * time.Hour

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
}

func newCA(commonName string) (*certAuthority, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}, nil
}

// certRequest describes a certificate for the CA to sign.
type certRequest struct {
	commonName   string
	organization []string
	dnsNames     []string
	ips          []net.IP
	usage        x509.ExtKeyUsage
}

// sign issues a certificate with a new key and returns both PEM encoded.
func (ca *certAuthority) sign(req certRequest) (certPEM, keyPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   req.commonName,
			Organization: req.organization,
		},
		DNSNames:    req.dnsNames,
		IPAddresses: req.ips,
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{req.usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %q: %w", req.commonName, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// clientCert issues a client certificate that the apiserver maps to the
// user commonName in the groups organization.
func (ca *certAuthority) clientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return ca.sign(certRequest{
		commonName:   user,
		organization: groups,
		usage:        x509.ExtKeyUsageClientAuth,
	})
}

// servingCert issues the apiserver's serving certificate for loopback.
func (ca *certAuthority) servingCert() (certPEM, keyPEM []byte, err error) {
	return ca.sign(certRequest{
		commonName: "kube-apiserver",
		dnsNames: []string{
			"localhost",
			"kubernetes",
			"kubernetes.default",
			"kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		},
		ips:   []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback, net.ParseIP(serviceIP)},
		usage: x509.ExtKeyUsageServerAuth,
	})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// newServiceAccountKey returns a PEM encoded key for signing service account
// tokens. The apiserver reads the public key from the same file.
func newServiceAccountKey() ([]byte, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	return encodeKey(key)
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
