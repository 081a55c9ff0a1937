package cluster

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// testSecret is a cluster secret for tests (32 bytes).
var testSecret = []byte("0123456789abcdef0123456789abcdef")

// testLogger discards etcd's warnings unless the test runs with -v.
func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// freeURL returns https://127.0.0.1:<port> for a port that was free a
// moment ago. The port is drawn below the kernel's ephemeral range
// (ip_local_port_range starts at 32768 by default), where the kernel
// never hands one to an outgoing connection: a port the kernel chose
// (":0") is an ephemeral one, and on a busy machine another process's
// connection could take it between this check and the member's bind.
// A port is handed out once per process (handedOut), so that two tests
// running in parallel never draw the same one.
func freeURL(t *testing.T) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		if handedOut.ports[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken: draw again
		}
		l.Close()
		handedOut.ports[port] = true
		return "https://" + addr
	}
	t.Fatal("no free port in 20000-31999 after 100 draws")
	return ""
}

// handedOut is the ports freeURL gave out in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// testPKIs holds each test's PKI (testPKI), by *testing.T.
var testPKIs sync.Map

// testPKI is t's cluster CA and one node identity (SAN 127.0.0.1) that
// every member and client of t uses, written to t's temporary directory.
func testPKI(t *testing.T) TLSFiles {
	t.Helper()
	if f, ok := testPKIs.Load(t); ok {
		return f.(TLSFiles)
	}
	f, _ := writePKI(t, "m")
	testPKIs.Store(t, f)
	t.Cleanup(func() { testPKIs.Delete(t) })
	return f
}

// writePKI makes a fresh CA and an identity for node (SAN 127.0.0.1)
// in a temporary directory of t.
func writePKI(t *testing.T, node string) (TLSFiles, *CA) {
	t.Helper()
	ca, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueNode(node, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := TLSFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "node.crt"), Key: filepath.Join(dir, "node.key")}
	for path, b := range map[string][]byte{f.CA: ca.CertPEM(), f.Cert: cert, f.Key: key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f, ca
}

// testTLS is the client configuration of t's PKI.
func testTLS(t *testing.T) *tls.Config {
	t.Helper()
	cfg, err := testPKI(t).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startMember starts an embedded member (with t's PKI unless cfg names
// one) and closes it when the test ends.
func startMember(t *testing.T, cfg MemberConfig) *Member {
	t.Helper()
	if cfg.TLS == (TLSFiles{}) {
		cfg.TLS = testPKI(t)
	}
	m, err := StartMember(t.Context(), cfg, testLogger())
	if err != nil {
		t.Fatalf("StartMember(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// startSingle starts a one-member cluster.
func startSingle(t *testing.T) *Member {
	t.Helper()
	return startMember(t, MemberConfig{Name: "m0", DataDir: t.TempDir(), ClientURL: freeURL(t), PeerURL: freeURL(t), State: "new"})
}

// startThree starts a three-member cluster, all members "new" with the
// full initial cluster (they must start together: each waits for a
// quorum).
func startThree(t *testing.T) []*Member {
	t.Helper()
	cfgs := make([]MemberConfig, 3)
	var initial []string
	for i := range cfgs {
		cfgs[i] = MemberConfig{Name: fmt.Sprintf("m%d", i), DataDir: t.TempDir(), ClientURL: freeURL(t), PeerURL: freeURL(t), State: "new", TLS: testPKI(t)}
		initial = append(initial, cfgs[i].Name+"="+cfgs[i].PeerURL)
	}
	members := make([]*Member, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(initial, ",")
		wg.Go(func() { members[i], errs[i] = StartMember(t.Context(), cfgs[i], testLogger()) })
	}
	wg.Wait()
	for i, m := range members {
		if m != nil {
			t.Cleanup(func() { m.Close() })
		}
		if errs[i] != nil {
			t.Fatalf("StartMember(%s): %v", cfgs[i].Name, errs[i])
		}
	}
	return members
}

// openNode opens a node on endpoints and closes it when the test ends.
func openNode(t *testing.T, id string, endpoints []string, opts ...func(*Config)) *Node {
	t.Helper()
	cfg := Config{
		NodeID: id, Endpoints: endpoints, TLS: testTLS(t), APIURL: "http://" + id + ".test",
		Secret: testSecret, Logger: testLogger(), LeaseTTL: 2 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", id, err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDeparted reads n.Departed until id arrives or timeout passes.
func waitDeparted(t *testing.T, n *Node, id string, timeout time.Duration) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case got := <-n.Departed():
			if got == id {
				return
			}
		case <-timer.C:
			t.Fatalf("after %s: %s never departed", timeout, id)
		}
	}
}

func clientCountOnly() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}
