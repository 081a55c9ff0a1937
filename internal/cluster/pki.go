package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// The cluster's etcd PKI (docs/cluster.md, "etcd is closed"): `sandboxd
// cluster init` makes a CA whose key stays in the init node's data
// directory; every node's etcd identity is one ECDSA P-256 certificate,
// used as the member's server certificate on its client and peer
// listeners and as the client certificate of every etcd client the node
// runs. etcd checks client certificates against the CA on both listeners
// (ClientCertAuth), so whoever reaches an etcd port without a node
// certificate gets no further than the TLS handshake.
const (
	// certValidity is how long the CA and node certificates are valid.
	// There is no rotation yet: ten years is beyond a node's life, and a
	// key that leaks is answered by a new cluster (docs/cluster.md).
	certValidity = 10 * 365 * 24 * time.Hour
	// certBackdate covers clocks of nodes a little behind the signer's.
	certBackdate = time.Hour
	// maxCertHosts bounds the SANs a node certificate names.
	maxCertHosts = 8
)

// CA is the cluster's certificate authority: it signs nodes' etcd
// identities. Its key never leaves the data directory of the node that
// holds it, and is never written to etcd.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

// NewCA makes a CA with a fresh ECDSA P-256 key.
func NewCA(now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "sandboxd cluster CA"},
		NotBefore:             now.Add(-certBackdate),
		NotAfter:              now.Add(certValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("make cluster CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, certPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

// LoadCA reads a CA from its certificate and key (PEM), checking that they
// belong together.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load cluster CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("load cluster CA: %w", err)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("load cluster CA: %w: not a CA certificate and key", ErrInvalidArgument)
	}
	return &CA{cert: cert, certPEM: certPEM, key: key}, nil
}

// CertPEM is the CA's certificate, which every node trusts.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// KeyPEM is the CA's private key (PKCS #8); write it 0600, never to etcd.
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.key) }

// NewNodeKey makes a node's etcd key (ECDSA P-256), returned with its PEM.
func NewNodeKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	b, err := keyPEM(key)
	return key, b, err
}

// NodeCSR is a certificate request for key, naming node: what a joining
// node sends (JoinRequest) so that its key never leaves it.
func NodeCSR(key crypto.Signer, node string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: node}}, key)
	if err != nil {
		return nil, err
	}
	return pemBlock("CERTIFICATE REQUEST", der), nil
}

// SignNode signs the node certificate for csrPEM's key: common name node,
// SANs node (as a DNS name) and hosts (the IPs or names of the member's
// client and peer addresses; etcd checks a peer's certificate against the
// address it connects from), usable as server and client certificate.
// What the CSR asks for beyond its key is ignored. A CSR whose signature
// does not verify is ErrInvalidArgument.
func (ca *CA) SignNode(csrPEM []byte, node string, hosts []string, now time.Time) ([]byte, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("sign node certificate: %w: no PEM certificate request", ErrInvalidArgument)
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err == nil {
		err = csr.CheckSignature()
	}
	if err != nil {
		return nil, fmt.Errorf("sign node certificate: %w: %w", ErrInvalidArgument, err)
	}
	return ca.sign(csr.PublicKey, node, hosts, now)
}

func (ca *CA) sign(pub any, node string, hosts []string, now time.Time) ([]byte, error) {
	if node == "" || len(hosts) > maxCertHosts {
		return nil, fmt.Errorf("sign node certificate: %w: node %q, %d hosts (at most %d)", ErrInvalidArgument, node, len(hosts), maxCertHosts)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: node},
		NotBefore:    now.Add(-certBackdate),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{node},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" && h != node {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign node certificate: %w", err)
	}
	return pemBlock("CERTIFICATE", der), nil
}

// IssueNode makes a key and a signed certificate for node at once: the
// init node's own identity.
func (ca *CA) IssueNode(node string, hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, keyPEM, err := NewNodeKey()
	if err != nil {
		return nil, nil, err
	}
	certPEM, err = ca.sign(key.Public(), node, hosts, now)
	return certPEM, keyPEM, err
}

// TLSFiles names the PEM files of a node's etcd identity: the CA it
// trusts, its certificate and its key.
type TLSFiles struct {
	CA, Cert, Key string
}

// ClientConfig is the TLS configuration of an etcd client with f's
// identity: it presents the certificate and trusts only f.CA.
func (f TLSFiles) ClientConfig() (*tls.Config, error) {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, fmt.Errorf("etcd TLS: %w: a CA, a certificate and a key are required", ErrInvalidArgument)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("etcd TLS: %w: %s holds no PEM certificate", ErrInvalidArgument, f.CA)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// requireTLS refuses a client without a TLS configuration: etcd is never
// reached in clear.
func requireTLS(cfg *tls.Config) error {
	if cfg == nil {
		return fmt.Errorf("%w: no TLS configuration for etcd (etcd is never reached without TLS)", ErrInvalidArgument)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)) // never fails (crypto/rand)
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func keyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemBlock("PRIVATE KEY", der), nil
}
