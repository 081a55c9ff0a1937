package daemon_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestHTTPS_APIWithTheOperatorsCertificate: --https-cert/--https-key
// serve the operator's certificate on --https-listen for the names it
// covers, so the API answers over TLS by its name (a cluster across
// hosts, docs/deploy.md). An --api-host the certificate does not cover
// gets the local CA's; a name that is neither the API's nor routable gets
// no certificate at all.
func TestHTTPS_APIWithTheOperatorsCertificate(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	agent, err := runtimetest.BuildAgent(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	roots := writeCert(t, certFile, keyFile, "api.example.test")
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpsAddr := probe.Addr().String()
	probe.Close()
	d := newDaemon(t, agent, "--https-listen", httpsAddr, "--https-cert", certFile, "--https-key", keyFile,
		"--api-host", "api.example.test", "--api-host", "other.example.test")
	go d.Serve(ctx)

	get := func(name string, roots *x509.CertPool) (*http.Response, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: name},
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", httpsAddr)
			},
		}}
		return c.Get("https://" + name + "/healthz")
	}
	var resp *http.Response
	err = testenv.Poll(ctx, 30*time.Second, func() (err error) { // the server starts in Serve
		resp, err = get("api.example.test", roots)
		return err
	})
	if err != nil {
		t.Fatalf("GET /healthz by the certificate's name: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz over TLS: %s", resp.Status)
	}

	// Another --api-host: the local CA's certificate, written to the data dir.
	caPEM, err := os.ReadFile(filepath.Join(d.Config.DataDir, "preview-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	local := x509.NewCertPool()
	local.AppendCertsFromPEM(caPEM)
	if resp, err := get("other.example.test", local); err != nil {
		t.Errorf("an --api-host the certificate does not cover: %v", err)
	} else {
		resp.Body.Close()
	}
	// A name nobody serves: no certificate, whoever's roots.
	for _, pool := range []*x509.CertPool{roots, local} {
		if resp, err := get("stranger.example.test", pool); err == nil {
			resp.Body.Close()
			t.Errorf("a name that is neither the API's nor routable got a certificate")
		}
	}
}

// writeCert writes a self-signed certificate for name and its key, and
// returns a pool that trusts it.
func writeCert(t *testing.T, certFile, keyFile, name string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}
