package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// tlsEcho terminates TLS with the certificate in /opt/tls and answers
// "echo: " and the first line it reads, once per connection (copied from
// internal/api/v1's ports test: the base image has python3, not openssl).
const tlsEcho = `
import socket, ssl, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/opt/tls/cert.pem", "/opt/tls/key.pem")
def serve(c):
    try:
        with ctx.wrap_socket(c, server_side=True) as t:
            t.sendall(b"echo: " + t.recv(4096))
    except Exception:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// TestTLS_AnswersOnEveryNode: a port exposed as tls on the node that owns
// the sandbox answers on the SNI listener of every node, preview host and
// custom domain alike; the other nodes carry the ClientHello to the
// owner's listener without terminating TLS, so the client verifies the
// sandbox's own certificate.
func TestTLS_AnswersOnEveryNode(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 5*time.Minute)

	sb := create(ctx, t, c, c.Nodes[0], map[string]any{"image": baseImage, "cpu": 0.25, "memory_mb": 256})
	owner := ownerOf(ctx, t, c, sb.ID)
	host := fmt.Sprintf("8443-%s.localhost", sb.ID)
	domain := "tls-" + sb.ID + ".example.test"
	certPEM, keyPEM, roots := selfSigned(t, host, domain)
	oc := client(owner)
	for path, data := range map[string][]byte{"/opt/tls/cert.pem": certPEM, "/opt/tls/key.pem": keyPEM, "/opt/tlsecho.py": []byte(tlsEcho)} {
		if err := oc.UploadFile(ctx, sb.ID, path, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sh(ctx, owner, sb.ID, "nohup python3 /opt/tlsecho.py 8443 >/tmp/tlsecho.log 2>&1 </dev/null &"); err != nil {
		t.Fatal(err)
	}
	p, err := oc.ExposePort(ctx, sb.ID, sandboxd.ExposePortRequest{Port: 8443, Protocol: sandboxd.ProtocolTLS, Public: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Protocol != sandboxd.ProtocolTLS {
		t.Fatalf("expose answered %+v, want a tls port", p)
	}
	// Not the SDK's AddDomain: it sends "sandbox_id", which the API refuses.
	if a, err := call(ctx, owner, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/domains", map[string]any{"hostname": domain, "port": 8443}); err != nil || a.Status != http.StatusOK {
		t.Fatalf("add domain %s: %v, %v", domain, a, err)
	}

	// A node publishes its TLS address once it has joined; on a busy
	// machine the last one may still be at it.
	var addrs map[string]string
	if err := testenv.Poll(ctx, testenv.Deadline, func() error {
		addrs = tlsAddrs(ctx, t, owner)
		for _, d := range c.Nodes {
			if addrs[d.NodeID()] == "" {
				return fmt.Errorf("node %s publishes no TLS address (nodes: %v)", d.NodeID(), addrs)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Nodes {
		addr := addrs[d.NodeID()]
		for _, name := range []string{host, domain} {
			err := testenv.Poll(ctx, testenv.Deadline, func() error {
				line, err := tlsRoundTrip(addr, name, roots)
				if err != nil {
					return fmt.Errorf("TLS to %s through node %s (owner %s): %w", name, d.NodeID(), owner.NodeID(), err)
				}
				if line != "echo: ping\n" {
					return fmt.Errorf("TLS to %s through node %s: %q, want %q", name, d.NodeID(), line, "echo: ping\n")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// A port that is not exposed answers on no node.
		if _, err := tlsRoundTrip(addr, fmt.Sprintf("8444-%s.localhost", sb.ID), roots); err == nil {
			t.Errorf("TLS to an unexposed port through node %s succeeded", d.NodeID())
		}
	}
}

// tlsAddrs is every live node's published SNI listener address, as
// GET /v1/cluster/nodes on d lists them.
func tlsAddrs(ctx context.Context, t *testing.T, d *daemontest.Daemon) map[string]string {
	t.Helper()
	a, err := call(ctx, d, http.MethodGet, "/v1/cluster/nodes", nil)
	if err != nil || a.Status != http.StatusOK {
		t.Fatalf("GET /v1/cluster/nodes on %s: %v, %v", d.NodeID(), a, err)
	}
	var nodes struct {
		Items []struct {
			ID      string `json:"id"`
			TLSAddr string `json:"tls_addr"`
		} `json:"items"`
	}
	if err := json.Unmarshal(a.Body, &nodes); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.ID] = n.TLSAddr
	}
	return out
}

// tlsRoundTrip connects to the SNI listener at addr with server name
// host, verifying the chain against roots, sends "ping\n" and returns the
// line that comes back.
func tlsRoundTrip(addr, host string, roots *x509.CertPool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := daemontest.DialContext(ctx, "tcp", addr) // a LAN host's address from its switch
	if err != nil {
		return "", err
	}
	c := tls.Client(raw, &tls.Config{ServerName: host, RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err := c.HandshakeContext(ctx); err != nil {
		c.Close()
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// selfSigned makes a self-signed ECDSA certificate for hosts and returns
// it and its key in PEM, and a pool that trusts it.
func selfSigned(t *testing.T, hosts ...string) (certPEM, keyPEM []byte, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: hosts[0]},
		DNSNames:              hosts,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), roots
}
