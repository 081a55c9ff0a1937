package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The embedded member never listens beyond loopback: it has no TLS and no
// authentication, and its keys hold API tokens and where calls are sent.
func TestClusterInit_RefusesANonLoopbackMember(t *testing.T) {
	for _, args := range [][]string{
		{"--etcd-client", "0.0.0.0:23790", "--etcd-peer", "127.0.0.1:23800"},
		{"--etcd-client", "127.0.0.1:23790", "--etcd-peer", "10.0.0.1:23800"},
		{"--etcd-client", "example.com:23790", "--etcd-peer", "127.0.0.1:23800"},
	} {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		code := ClusterCommand(append([]string{"init", "--data-dir", dir}, args...), &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "loopback") {
			t.Errorf("init %v: exit %d, stderr %q; want a refusal naming loopback", args, code, errb.String())
		}
		if _, err := os.Stat(filepath.Join(dir, clusterFileName)); err == nil {
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
	f, err := loadClusterFile(dir)
	if err != nil || f == nil || f.Member == nil {
		t.Fatalf("cluster file: %+v, %v", f, err)
	}
	if got, want := f.Member.InitialCluster, "n1=http://127.0.0.1:23800"; got != want {
		t.Errorf("initial cluster %q, want %q", got, want)
	}
	if _, err := loadClusterSecret(filepath.Join(dir, clusterSecretName)); err != nil {
		t.Errorf("secret: %v", err)
	}
	errb.Reset()
	if code := ClusterCommand(args, &out, &errb); code == 0 {
		t.Error("a second init succeeded")
	}
}
