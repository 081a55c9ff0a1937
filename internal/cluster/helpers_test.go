package cluster

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
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

// freeURL returns http://127.0.0.1:<port> for a port that was free a
// moment ago.
func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// startMember starts an embedded member and closes it when the test ends.
func startMember(t *testing.T, cfg MemberConfig) *Member {
	t.Helper()
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
		cfgs[i] = MemberConfig{Name: fmt.Sprintf("m%d", i), DataDir: t.TempDir(), ClientURL: freeURL(t), PeerURL: freeURL(t), State: "new"}
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
		NodeID: id, Endpoints: endpoints, APIURL: "http://" + id + ".test",
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
