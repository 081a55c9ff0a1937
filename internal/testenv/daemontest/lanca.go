package daemontest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"sync"
	"time"
)

// certAuthority is the process's LAN CA: it signs every LAN host's
// certificate; LANRootCAs trusts it.
type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var lanCAOnce struct {
	sync.Once
	ca  *certAuthority
	err error
}

// lanCA is the process's LAN CA, made on first use.
func lanCA() (*certAuthority, error) {
	lanCAOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			lanCAOnce.err = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber:          serialNumber(),
			Subject:               pkix.Name{CommonName: "sandboxd test LAN CA"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(24 * time.Hour),
			KeyUsage:              x509.KeyUsageCertSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			lanCAOnce.err = err
			return
		}
		cert, err := x509.ParseCertificate(der)
		lanCAOnce.ca, lanCAOnce.err = &certAuthority{cert: cert, key: key}, err
	})
	return lanCAOnce.ca, lanCAOnce.err
}

// LANRootCAs is the system's roots and the process's LAN CA: a client's
// RootCAs to reach LAN hosts over TLS by name.
func LANRootCAs() (*x509.CertPool, error) {
	ca, err := lanCA()
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	pool.AddCert(ca.cert)
	return pool, nil
}

// CertPEM is the CA's certificate in PEM.
func (ca *certAuthority) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// issue writes a server certificate for name (and its key, 0600).
func (ca *certAuthority) issue(name, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("certificate for %s: %w", name, err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}

func serialNumber() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
