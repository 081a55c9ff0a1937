package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/cluster/forward"
	"github.com/sandboxd/sandboxd/internal/datadir"
	"github.com/sandboxd/sandboxd/internal/operator"
)

var joinSecret = []byte("0123456789abcdef0123456789abcdef")

// joinServer is a node that holds the cluster CA (nil ca: one that does
// not), serving only the join endpoint.
func joinServer(t *testing.T, ca *cluster.CA) *httptest.Server {
	t.Helper()
	c := &clusterNode{self: "n1", logger: slog.New(slog.DiscardHandler), signer: forward.Signer{Node: "n1", Secret: joinSecret},
		ca: ca, etcdEndpoints: []string{"https://127.0.0.1:23791"}}
	srv := httptest.NewServer(http.HandlerFunc(c.serveJoin))
	t.Cleanup(srv.Close)
	return srv
}

// The secret proves the joiner: with it, the joiner gets a certificate for
// its own key and the CA; with another secret it gets 403 and nothing is
// written.
func TestJoin_SecretProvesTheJoiner(t *testing.T) {
	ca, err := cluster.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := joinServer(t, ca)

	dir := t.TempDir()
	eps, err := operator.RequestCertificate(t.Context(), srv.Client(), srv.URL, joinSecret, "n2", []string{"127.0.0.1"}, dir)
	if err != nil {
		t.Fatalf("join with the secret: %v", err)
	}
	if len(eps) != 1 || eps[0] != "https://127.0.0.1:23791" {
		t.Errorf("endpoints %v", eps)
	}
	if _, err := datadir.EmbeddedTLS().Files(dir).ClientConfig(); err != nil {
		t.Errorf("the joiner's identity does not load: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, datadir.ClusterCAKeyName)); err == nil {
		t.Error("the joiner got the CA key")
	}

	wrong := []byte("fedcba9876543210fedcba9876543210")
	dir = t.TempDir()
	_, err = operator.RequestCertificate(t.Context(), srv.Client(), srv.URL, wrong, "evil", []string{"127.0.0.1"}, dir)
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("join with a wrong secret: %v, want 403", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("a refused join wrote %d files", len(left))
	}
}

// A request is refused, and nothing signed, when its MAC is missing or
// covers another body (a captured request with the attacker's CSR), when
// it is stale (a replay), or when the node holds no CA key.
func TestJoin_Refusals(t *testing.T) {
	ca, err := cluster.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _, _ := cluster.NewNodeKey()
	csr, _ := cluster.NodeCSR(key, "n2")
	body := func(at time.Time) []byte {
		b, _ := json.Marshal(cluster.JoinRequest{Node: "n2", Hosts: []string{"127.0.0.1"}, CSR: string(csr), Time: at.Unix()})
		return b
	}
	post := func(srv *httptest.Server, b []byte, mac string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+cluster.JoinPath, bytes.NewReader(b))
		if mac != "" {
			req.Header.Set(cluster.HeaderJoinAuth, mac)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	srv := joinServer(t, ca)
	now := body(time.Now())
	mac, _ := cluster.JoinMAC(joinSecret, now)
	other, _ := cluster.JoinMAC(joinSecret, body(time.Now().Add(time.Second)))
	stale := body(time.Now().Add(-2 * cluster.MaxJoinSkew))
	staleMAC, _ := cluster.JoinMAC(joinSecret, stale)
	for _, c := range []struct {
		name string
		body []byte
		mac  string
		want int
	}{
		{"no MAC", now, "", http.StatusForbidden},
		{"another body's MAC", now, other, http.StatusForbidden},
		{"stale", stale, staleMAC, http.StatusForbidden},
		{"valid", now, mac, http.StatusOK},
	} {
		if got := post(srv, c.body, c.mac); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	if got := post(joinServer(t, nil), now, mac); got != http.StatusConflict {
		t.Errorf("a node without the CA key: %d, want 409", got)
	}
}
