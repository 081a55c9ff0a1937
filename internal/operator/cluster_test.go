package operator

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/datadir"
)

// The embedded member speaks TLS with client certificates, so it may
// listen on any address the other nodes reach, but not an unspecified one
// (it is advertised to them).
func TestClusterInit_MemberAddresses(t *testing.T) {
	for _, args := range [][]string{
		{"--etcd-client", "0.0.0.0:23790", "--etcd-peer", "127.0.0.1:23800"},
		{"--etcd-client", "127.0.0.1:23790", "--etcd-peer", "[::]:23800"},
		{"--etcd-client", "127.0.0.1", "--etcd-peer", "127.0.0.1:23800"},
		{"--etcd-client", "example.com:23790", "--etcd-peer", "127.0.0.1:23800"},
	} {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		if code := ClusterCommand(append([]string{"init", "--data-dir", dir}, args...), &out, &errb); code == 0 {
			t.Errorf("init %v: exit 0, want a refusal", args)
		}
		if _, err := os.Stat(filepath.Join(dir, datadir.ClusterFileName)); err == nil {
			t.Errorf("init %v left a cluster file", args)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "node-id"), []byte("n1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := ClusterCommand([]string{"init", "--data-dir", dir, "--etcd-client", "10.77.0.1:23790", "--etcd-peer", "10.77.0.1:23800"}, &out, &errb); code != 0 {
		t.Fatalf("init on 10.77.0.1: exit %d: %s", code, errb.String())
	}
	f, err := datadir.LoadClusterFile(dir)
	if err != nil || f == nil || f.TLS == nil {
		t.Fatalf("cluster file: %+v, %v", f, err)
	}
	files := f.TLS.Files(dir)
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	caPEM, _ := os.ReadFile(files.CA)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, host := range []string{"10.77.0.1", "n1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("the node certificate for %s: %v", host, err)
		}
	}
	for _, name := range []string{datadir.ClusterCAKeyName, datadir.ClusterCertKeyName, datadir.ClusterSecretName} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", name, fi, err)
		}
	}
}

// An external etcd is reached with TLS and a client certificate only:
// init refuses --etcd-endpoints without the three files, and the
// embedded member's identity is never taken from flags.
func TestClusterInit_ExternalNeedsTLSFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--etcd-endpoints", "https://10.0.0.1:2379"},
		{"--etcd-endpoints", "https://10.0.0.1:2379", "--etcd-cacert", "ca.pem"},
		{"--etcd-client", "127.0.0.1:23790", "--etcd-peer", "127.0.0.1:23800", "--etcd-cert", "c.pem"},
	} {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		if code := ClusterCommand(append([]string{"init", "--data-dir", dir}, args...), &out, &errb); code == 0 || !strings.Contains(errb.String(), "--etcd-c") {
			t.Errorf("init %v: exit %d, stderr %q; want a refusal naming the TLS flags", args, code, errb.String())
		}
		if _, err := os.Stat(filepath.Join(dir, datadir.ClusterFileName)); err == nil {
			t.Errorf("init %v left a cluster file", args)
		}
	}
}

// init writes the cluster file and a fresh secret, and refuses a data
// directory that is in a cluster already.
func TestClusterInit_WritesFilesOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "node-id"), []byte("n1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"init", "--data-dir", dir, "--etcd-client", "127.0.0.1:23790", "--etcd-peer", "127.0.0.1:23800"}
	var out, errb bytes.Buffer
	if code := ClusterCommand(args, &out, &errb); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errb.String())
	}
	f, err := datadir.LoadClusterFile(dir)
	if err != nil || f == nil || f.Member == nil {
		t.Fatalf("cluster file: %+v, %v", f, err)
	}
	if got, want := f.Member.InitialCluster, "n1=https://127.0.0.1:23800"; got != want {
		t.Errorf("initial cluster %q, want %q", got, want)
	}
	if _, err := datadir.LoadClusterSecret(filepath.Join(dir, datadir.ClusterSecretName)); err != nil {
		t.Errorf("secret: %v", err)
	}
	errb.Reset()
	if code := ClusterCommand(args, &out, &errb); code == 0 {
		t.Error("a second init succeeded")
	}
}
