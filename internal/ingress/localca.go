package ingress

import (
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
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/naming"
)

// Local CA lifetimes: the CA lives as long as the process that made it;
// leaves are short so a stale one never matters.
const (
	localCALifetime   = 10 * 365 * 24 * time.Hour
	localLeafLifetime = 7 * 24 * time.Hour
	// localLeafCacheCap bounds the leaves kept in memory; past it the
	// cache starts over (issuing a leaf costs about a millisecond).
	localLeafCacheCap = 4096
)

// LocalCA issues certificates for preview hosts from a CA that exists only
// in memory: HTTPS in local mode and in tests, with no ACME server. Trust
// it by adding Pool (or CertPEM) to a client's roots.
type LocalCA struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
	pool *x509.CertPool

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewLocalCA generates a self-signed CA.
func NewLocalCA() (*LocalCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("local CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "sandboxd local CA", Organization: []string{"sandboxd"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(localCALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("local CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("local CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &LocalCA{cert: cert, der: der, key: key, pool: pool, leaves: map[string]*tls.Certificate{}}, nil
}

// Pool is a certificate pool holding the CA, for clients' RootCAs.
func (ca *LocalCA) Pool() *x509.CertPool { return ca.pool }

// CertPEM is the CA certificate in PEM, for browsers and curl --cacert.
func (ca *LocalCA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

// TLSConfig returns a server configuration that issues a leaf on demand
// for every server name allow accepts (pass Router.Routable) and fails
// the handshake for any other. Serve the router's handler over it:
//
//	srv.Serve(tls.NewListener(ln, ca.TLSConfig(router.Routable)))
func (ca *LocalCA) TLSConfig(allow func(host string) bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			host := naming.NormalizeHost(hello.ServerName)
			if host == "" || !allow(host) {
				return nil, errors.New("ingress: no route for this server name")
			}
			return ca.leaf(host)
		},
	}
}

// leaf returns a cached or fresh certificate for host.
func (ca *LocalCA) leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[host]; c != nil && now.Before(c.Leaf.NotAfter.Add(-time.Hour)) {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(localLeafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.der}, PrivateKey: key, Leaf: leaf}
	if len(ca.leaves) >= localLeafCacheCap {
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	return n
}
