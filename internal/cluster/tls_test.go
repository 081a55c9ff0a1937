package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
)

// attackPut is one Put of a token-hash key through a client of endpoint
// with tlsCfg (nil: plain): what someone who reaches etcd would write to
// mint an admin token. It returns the Put's error (nil: the attack worked).
func attackPut(t *testing.T, endpoint string, tlsCfg *tls.Config) error {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{endpoint}, TLS: tlsCfg, DialTimeout: 2 * time.Second,
		Logger: zapToSlog(nil, zapcore.FatalLevel, nil),
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, tokenHashPrefix+strings.Repeat("ab", 32), `{"id":"evil","role":"admin","owner":"admin"}`)
	if err == nil {
		return nil
	}
	// A read fails alike: nothing is served without a node certificate.
	if _, rerr := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); rerr == nil {
		t.Errorf("Get through %s answered though Put failed (%v)", endpoint, err)
	}
	return err
}

// The client listener serves only clients with a certificate of the
// cluster's CA: no certificate, a certificate of another CA, or plain
// HTTP/gRPC get no read and no write; the cluster's own identity does.
func TestMember_ClientNeedsClusterCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd member")
	}
	m := startSingle(t)
	pki := testPKI(t)
	caPEM, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	otherFiles, _ := writePKI(t, "m")
	other, err := otherFiles.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	other.RootCAs = roots // it trusts the server; the server must not trust it

	cases := []struct {
		name     string
		endpoint string
		tls      *tls.Config
	}{
		{"plain", strings.Replace(m.ClientURL(), "https://", "http://", 1), nil},
		{"TLS without a certificate", m.ClientURL(), &tls.Config{RootCAs: roots}},
		{"certificate of another CA", m.ClientURL(), other},
	}
	for _, c := range cases {
		if err := attackPut(t, c.endpoint, c.tls); err == nil {
			t.Errorf("%s: Put of a token-hash key succeeded, want it refused", c.name)
		}
	}
	if err := attackPut(t, m.ClientURL(), testTLS(t)); err != nil {
		t.Errorf("the cluster's own certificate: Put failed: %v", err)
	}
}

// The peer listener refuses whoever has no certificate of the cluster's
// CA: a member that would join (or a raft message) in clear or with
// another CA's certificate gets no answer, so it learns nothing of the
// cluster and cannot take part in it.
func TestMember_PeerNeedsClusterCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd member")
	}
	m := startSingle(t)
	peer := m.etcd.Config().AdvertisePeerUrls[0]
	caPEM, err := os.ReadFile(testPKI(t).CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	otherFiles, _ := writePKI(t, "m")
	other, err := otherFiles.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	other.RootCAs = roots
	get := func(url string, cfg *tls.Config) (int, error) {
		hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := hc.Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	members := peer.Host + "/members" // etcd's peer API: the member list a joiner reads
	for _, c := range []struct {
		name string
		url  string
		tls  *tls.Config
	}{
		{"plain HTTP", "http://" + members, nil},
		{"TLS without a certificate", "https://" + members, &tls.Config{RootCAs: roots}},
		{"certificate of another CA", "https://" + members, other},
	} {
		if code, err := get(c.url, c.tls); err == nil && code == http.StatusOK {
			t.Errorf("%s: GET %s answered %d, want the connection refused", c.name, c.url, code)
		}
	}
	if code, err := get("https://"+members, testTLS(t)); err != nil || code != http.StatusOK {
		t.Errorf("the cluster's own certificate: GET peer /members: %d, %v; want 200", code, err)
	}
}

// A member refuses to start without TLS, so no configuration serves etcd
// in clear.
func TestStartMember_RefusesPlain(t *testing.T) {
	for _, cfg := range []MemberConfig{
		{Name: "m", DataDir: t.TempDir(), ClientURL: "http://127.0.0.1:1", PeerURL: "https://127.0.0.1:2", TLS: TLSFiles{CA: "a", Cert: "b", Key: "c"}},
		{Name: "m", DataDir: t.TempDir(), ClientURL: "https://127.0.0.1:1", PeerURL: "http://127.0.0.1:2", TLS: TLSFiles{CA: "a", Cert: "b", Key: "c"}},
		{Name: "m", DataDir: t.TempDir(), ClientURL: "https://127.0.0.1:1", PeerURL: "https://127.0.0.1:2"},
	} {
		if _, err := StartMember(t.Context(), cfg, nil); err == nil || !strings.Contains(err.Error(), "invalid argument") {
			t.Errorf("StartMember(%s, %s, %+v): %v, want an invalid argument", cfg.ClientURL, cfg.PeerURL, cfg.TLS, err)
		}
	}
}

// A node certificate carries what etcd checks: the hosts as IP SANs, the
// node id, server and client use; and it verifies under the CA only.
func TestCA_SignNode(t *testing.T) {
	ca, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, keyPEM, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NodeCSR(key, "n2")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignNode(csr, "n2", []string{"10.77.0.2", "node2.example"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("the signed certificate does not match the joiner's key: %v", err)
	}
	cert, _ := x509.ParseCertificate(pair.Certificate[0])
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	for _, host := range []string{"10.77.0.2", "n2", "node2.example"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	other, _ := NewCA(time.Now())
	otherRoots := x509.NewCertPool()
	otherRoots.AppendCertsFromPEM(other.CertPEM())
	if _, err := cert.Verify(x509.VerifyOptions{Roots: otherRoots}); err == nil {
		t.Error("the certificate verifies under another CA")
	}
	// A CSR whose signature does not verify is refused.
	blk, _ := pem.Decode(csr)
	blk.Bytes[len(blk.Bytes)-1] ^= 1 // the signature's last byte
	if _, err := ca.SignNode(pem.EncodeToMemory(blk), "n2", nil, time.Now()); err == nil {
		t.Error("SignNode signed a CSR whose signature does not verify")
	}
	// The CA survives a round trip through its PEM files.
	kp, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(ca.CertPEM(), kp); err != nil {
		t.Errorf("LoadCA: %v", err)
	}
	if _, err := LoadCA(certPEM, keyPEM); err == nil {
		t.Error("LoadCA took a node certificate for a CA")
	}
}

// The join MACs: the request MAC verifies only with the same secret and
// body; the answer MAC is bound to the request's.
func TestJoinMAC(t *testing.T) {
	body := []byte(`{"node":"n2"}`)
	m, err := JoinMAC(testSecret, body)
	if err != nil {
		t.Fatal(err)
	}
	other := []byte("fedcba9876543210fedcba9876543210")
	if m2, _ := JoinMAC(other, body); VerifyMAC(m2, m) {
		t.Error("a MAC under another secret verifies")
	}
	if m2, _ := JoinMAC(testSecret, []byte(`{"node":"n3"}`)); VerifyMAC(m2, m) {
		t.Error("a MAC of another body verifies")
	}
	r1, _ := ResponseMAC(testSecret, m, body)
	r2, _ := ResponseMAC(testSecret, strings.Repeat("0", 64), body)
	if VerifyMAC(r1, r2) || VerifyMAC(r1, m) {
		t.Error("a response MAC is not bound to its request")
	}
	if _, err := JoinMAC([]byte("short"), body); err == nil {
		t.Error("JoinMAC took a short secret")
	}
	if !CheckJoinTime(time.Now().Unix(), time.Now()) || CheckJoinTime(time.Now().Add(-2*MaxJoinSkew).Unix(), time.Now()) {
		t.Error("CheckJoinTime")
	}
}
