package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// The attacks on the cluster's etcd, against the shared
// cluster's real members: whoever reaches an etcd port without a node
// certificate must not read or write a key (a token-hash key written there
// would be an admin token on every node), nor talk to a member's peer
// listener, nor get a certificate by joining without the cluster secret.

// memberOf is what d's cluster file says of its embedded member.
type memberOf struct {
	ClientURL string `json:"client_url"`
	PeerURL   string `json:"peer_url"`
}

func readMember(t *testing.T, d *daemontest.Daemon) memberOf {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.DataDir(), "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Member *memberOf `json:"member"`
	}
	if err := json.Unmarshal(b, &f); err != nil || f.Member == nil {
		t.Fatalf("cluster.json of %s: %v, no member in %s", d.NodeID(), err, b)
	}
	return *f.Member
}

// otherCA is a client certificate of a CA that is not the cluster's.
func otherCA(t *testing.T) tls.Certificate {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "s1"}, DNSNames: []string{"s1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
}

// hostOf is the host:port of a URL.
func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// An etcd client without the cluster's certificate (plain, TLS without a
// certificate, a certificate of another CA) can neither write a
// token-hash key nor read one.
func TestEtcd_ClientWithoutClusterCertificateIsRefused(t *testing.T) {
	c := sharedCluster(t)
	host := hostOf(t, readMember(t, c.Nodes[0]).ClientURL)
	// Never a real token: a random hash, removed below if the write went
	// through (on a cluster that is open).
	key := "/sandboxd/v1/tokenhash/" + randomHex(t)
	value := `{"id":"attacker","role":"admin","owner":"admin","name":"written by an attacker"}`
	for _, a := range []struct {
		name     string
		endpoint string
		tls      *tls.Config
	}{
		{"plain", "http://" + host, nil},
		{"TLS without a client certificate", "https://" + host, &tls.Config{InsecureSkipVerify: true}},
		{"a certificate of another CA", "https://" + host, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{otherCA(t)}}},
	} {
		t.Run(a.name, func(t *testing.T) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{a.endpoint}, TLS: a.tls, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				return // refused at the dial: what we want
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if _, err := cli.Put(ctx, key, value); err == nil {
				t.Errorf("Put %s through %s succeeded: whoever reaches etcd mints an admin token", key, a.endpoint)
				dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _ = cli.Delete(dctx, key)
				dcancel()
			}
			if res, err := cli.Get(ctx, "/sandboxd/v1/tokens/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
				t.Errorf("Get of the token records through %s answered (%d keys)", a.endpoint, res.Count)
			}
		})
	}
}

// A member's peer listener answers nobody without the cluster's
// certificate: etcd's peer API (/members, what a joining member reads;
// raft's streams) refuses plain HTTP, TLS without a certificate, and a
// certificate of another CA.
func TestEtcd_PeerWithoutClusterCertificateIsRefused(t *testing.T) {
	c := sharedCluster(t)
	host := hostOf(t, readMember(t, c.Nodes[0]).PeerURL)
	for _, a := range []struct {
		name string
		url  string
		tls  *tls.Config
	}{
		{"plain", "http://" + host + "/members", nil},
		{"TLS without a client certificate", "https://" + host + "/members", &tls.Config{InsecureSkipVerify: true}},
		{"a certificate of another CA", "https://" + host + "/members", &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{otherCA(t)}}},
	} {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: a.tls}}
		resp, err := hc.Get(a.url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("%s: GET %s answered 200: the peer listener is open", a.name, a.url)
			}
		}
	}
}

// A node that joins with a wrong cluster secret gets no certificate and
// is not added as a member: neither through a node's API (the join
// hand-over) nor straight through etcd (how join worked while etcd was
// open, when any caller could add a member).
func TestJoin_WrongSecretGetsNoCertificate(t *testing.T) {
	c := sharedCluster(t)
	ctx := testContext(t, 2*time.Minute)
	dir := t.TempDir()
	joiner := "evil-" + randomHex(t)[:8]
	if err := os.WriteFile(filepath.Join(dir, "node-id"), []byte(joiner+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "wrong.secret")
	if err := os.WriteFile(secret, []byte(randomHex(t)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client, peer := freeAddr(t), freeAddr(t)
	t.Cleanup(func() {
		// On a cluster that took the join, take the member out again so
		// that the shared cluster's quorum is not left counting it.
		if _, err := os.Stat(filepath.Join(dir, "cluster.json")); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, env.dt.Bins.Sandboxd, "cluster", "leave", "--data-dir", dir, "--via", readMember(t, c.Nodes[0]).ClientURL)
		cmd.Env = daemontest.HermeticEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("cleanup: leave %s: %v: %s", joiner, err, out)
		}
	})
	common := []string{"cluster", "join", "--data-dir", dir, "--secret-file", secret, "--etcd-client", client, "--etcd-peer", peer}
	for _, via := range [][]string{
		{"--via-api", c.Nodes[0].URL()},
		{"--via", readMember(t, c.Nodes[0]).ClientURL},
	} {
		cmd := exec.CommandContext(ctx, env.dt.Bins.Sandboxd, append(common, via...)...)
		cmd.Env = daemontest.HermeticEnv()
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("join %v with a wrong secret succeeded: %s", via, out)
		}
		for _, f := range []string{"etcd-node.crt", "etcd-ca.crt", "cluster.json"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				t.Errorf("join %v with a wrong secret wrote %s", via, f)
			}
		}
	}
	table, err := c.Members(ctx, c.Nodes[0])
	if err != nil {
		t.Fatalf("cluster members: %v: %s", err, table)
	}
	if strings.Contains(table, peer) || strings.Contains(table, joiner) {
		t.Errorf("the cluster has a member added with a wrong secret:\n%s", table)
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freeAddr is a 127.0.0.1 address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := daemontest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// A node on an external etcd reaches it with the CA, certificate and key
// the operator gave (--etcd-cacert, --etcd-cert, --etcd-key, kept in the
// cluster file): here an etcd with client-certificate auth on 127.0.0.1,
// run in this process by etcd's embed package.
func TestExternalEtcd_TLS(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 3*daemontest.StartTimeout)
	dir := t.TempDir()
	ca, err := cluster.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueNode("etcd-ext", []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files := cluster.TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	for path, b := range map[string][]byte{files.CA: ca.CertPEM(), files.Cert: cert, files.Key: key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	etcd, err := cluster.StartMember(ctx, cluster.MemberConfig{
		Name: "ext", DataDir: filepath.Join(dir, "etcd"),
		ClientURL: "https://" + freeAddr(t), PeerURL: "https://" + freeAddr(t), TLS: files,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })

	d := env.dt.New("x1")
	c := &daemontest.Cluster{Nodes: []*daemontest.Daemon{d}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node %s log (tail):\n%s", d.NodeID(), d.LogTail(60))
		}
		if err := d.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := os.WriteFile(filepath.Join(d.DataDir(), "node-id"), []byte(d.NodeID()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, env.dt.Bins.Sandboxd, "cluster", "init", "--data-dir", d.DataDir(),
		"--etcd-endpoints", etcd.ClientURL(), "--etcd-cacert", files.CA, "--etcd-cert", files.Cert, "--etcd-key", files.Key)
	cmd.Env = daemontest.HermeticEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cluster init on an external etcd: %v: %s", err, out)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, d); err != nil {
		t.Fatal(err)
	}
	// The node's key is in that etcd: it is the node's store.
	tlsCfg, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL()}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	res, err := cli.Get(ctx, "/sandboxd/v1/nodes/"+d.NodeID())
	if err != nil || len(res.Kvs) != 1 {
		t.Errorf("nodes/%s in the external etcd: %v, %v", d.NodeID(), res, err)
	}
}
