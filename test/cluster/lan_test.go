package cluster_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
)

// In the LAN pass (main_test.go) every node is a host of its own,
// configured by name with no loopback address: its command line, its
// cluster file and what it publishes to the others name only LAN names
// and addresses, and the others reach it by name, its API over HTTPS
// with the operator's certificate (--https-cert). A stranger on the LAN
// (no credential: the switch's address) gets nothing but health: the
// native, E2B and Daytona APIs and /metrics answer 401, and each node's
// etcd refuses a client without the cluster's certificate.
func TestLAN_NodesByNameClosedToStrangers(t *testing.T) {
	if !env.lan {
		requireDocker(t)
		t.Skip("runs in the LAN pass only")
	}
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 2*time.Minute)
	if c.LAN == nil {
		t.Fatal("the LAN pass's cluster is not on a LAN")
	}

	for i, d := range c.Nodes {
		h := d.Host()
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", d.PID()))
		if err != nil {
			t.Fatal(err)
		}
		file, err := os.ReadFile(filepath.Join(d.DataDir(), "cluster.json"))
		if err != nil {
			t.Fatal(err)
		}
		// The registries the engine may pull from are the engine's business
		// (it runs in the host's namespace, where the tests' registry is on
		// loopback), not an address of the node's.
		cmdline = []byte(strings.ReplaceAll(string(cmdline), "--registry-allow\x00127.0.0.1\x00", ""))
		for what, b := range map[string][]byte{"command line": cmdline, "cluster.json": file} {
			for _, lo := range []string{"127.0.0.1", "localhost", "[::1]"} {
				if strings.Contains(string(b), lo) {
					t.Errorf("node %s's %s names %s: %q", d.NodeID(), what, lo, strings.ReplaceAll(string(b), "\x00", " "))
				}
			}
		}
		if !strings.Contains(string(cmdline), h.Name+":") {
			t.Errorf("node %s does not listen by its name %s: %q", d.NodeID(), h.Name, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
		if !strings.Contains(string(file), "https://"+h.Addr.String()+":") {
			t.Errorf("node %s's etcd member is not on its LAN address %s: %s", d.NodeID(), h.Addr, file)
		}
		if i > 0 && !strings.Contains(string(file), "https://"+c.Nodes[0].Host().Addr.String()+":") {
			t.Errorf("node %s's cluster file names no etcd endpoint of %s: %s", d.NodeID(), c.Nodes[0].NodeID(), file)
		}
	}

	// What every node publishes, read through each: the API by name (the
	// default --advertise-url, from --listen), the SNI listener too (put
	// a moment after the node joined: polled).
	for _, d := range c.Nodes {
		err := testenv.Poll(ctx, testenv.Deadline, func() error {
			a, err := call(ctx, d, http.MethodGet, "/v1/cluster/nodes", nil)
			if err != nil || a.Status != http.StatusOK {
				return fmt.Errorf("GET /v1/cluster/nodes through %s: %v, %v", d.NodeID(), a, err)
			}
			var nodes struct {
				Items []struct {
					ID      string `json:"id"`
					APIURL  string `json:"api_url"`
					TLSAddr string `json:"tls_addr"`
				} `json:"items"`
			}
			if err := json.Unmarshal(a.Body, &nodes); err != nil {
				return err
			}
			got := map[string][2]string{}
			for _, n := range nodes.Items {
				got[n.ID] = [2]string{n.APIURL, n.TLSAddr}
			}
			for _, n := range c.Nodes {
				want := [2]string{n.URL(), net.JoinHostPort(n.Host().Name, "7443")}
				if got[n.NodeID()] != want {
					return fmt.Errorf("through %s, node %s publishes %q, want %q", d.NodeID(), n.NodeID(), got[n.NodeID()], want)
				}
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}

	// A stranger on the LAN: no token, on the HTTPS listener the nodes
	// advertise and on the plain one (--listen).
	for _, d := range c.Nodes {
		for _, base := range []string{d.URL(), "http://" + net.JoinHostPort(d.Host().Name, "7070")} {
			for _, tc := range []struct {
				path string
				want int
			}{
				{"/healthz", http.StatusOK},
				{"/metrics", http.StatusUnauthorized},
				{"/v1/sandboxes", http.StatusUnauthorized},
				{"/v1/cluster/nodes", http.StatusUnauthorized},
				{"/sandboxes", http.StatusUnauthorized},           // E2B
				{"/daytona/api/sandbox", http.StatusUnauthorized}, // Daytona
			} {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+tc.path, nil)
				resp, err := freshConns.Do(req)
				if err != nil {
					t.Fatalf("GET %s%s: %v", base, tc.path, err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.want {
					t.Errorf("GET %s%s without a token: %s, want %d", base, tc.path, resp.Status, tc.want)
				}
			}
		}
		if a, err := call(ctx, d, http.MethodGet, "/metrics", nil); err != nil || a.Status != http.StatusOK {
			t.Errorf("GET /metrics on %s with the admin token: %v, %v; want 200", d.NodeID(), a.Status, err)
		}
	}
	// Each member's etcd, from the LAN, without a certificate: the TLS
	// handshake fails (the member asks for a client certificate).
	for i, ep := range c.EtcdClients() {
		u, err := url.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		if err := etcdWithoutCert(ctx, u.Host); err == nil {
			t.Errorf("etcd of %s (%s) answered a client without a certificate", c.Nodes[i].NodeID(), ep)
		}
	}
}

// etcdWithoutCert sends an etcd range request over TLS without a client
// certificate to addr, and returns nil only if it gets an HTTP answer.
func etcdWithoutCert(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := daemontest.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) // the server is not what is tested
	defer c.Close()
	if err := c.HandshakeContext(ctx); err != nil {
		return err
	}
	body := `{"key":"eA=="}`
	req := "POST /v3/kv/range HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 && strings.HasPrefix(string(buf[:n]), "HTTP/") {
		return nil
	}
	return fmt.Errorf("no answer: %v", err)
}

// A raw TCP exposure made through another node answers on its owner's
// host by name (--tcp-host): the URL names the owner's host, not
// 127.0.0.1, and a client on the LAN reaches the sandbox's app there.
func TestLAN_TCPExposureAnswersOnItsOwnersName(t *testing.T) {
	if !env.lan {
		requireDocker(t)
		t.Skip("runs in the LAN pass only")
	}
	t.Parallel()
	c := sharedCluster(t)
	ctx := testContext(t, 3*time.Minute)
	sb := create(ctx, t, c, c.Nodes[0], createBody("", nil, ""))
	owner := ownerOf(ctx, t, c, sb.ID)
	via := c.Nodes[0]
	if via == owner {
		via = c.Nodes[1]
	}
	if err := serveHTTP(ctx, owner, sb.ID, "tcp-"+sb.ID); err != nil {
		t.Fatal(err)
	}
	a, err := call(ctx, via, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/ports", map[string]any{"port": 8080, "protocol": "tcp", "public": true})
	if err != nil || a.Status != http.StatusOK {
		t.Fatalf("expose 8080 as tcp through %s: %v, %v", via.NodeID(), a, err)
	}
	var p struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(a.Body, &p); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(p.URL)
	if err != nil || u.Scheme != "tcp" || u.Hostname() != owner.Host().Name {
		t.Fatalf("tcp exposure's URL %q (%v), want tcp://%s:<port>", p.URL, err, owner.Host().Name)
	}
	err = testenv.Poll(ctx, testenv.Deadline, func() error {
		conn, err := daemontest.DialContext(ctx, "tcp", u.Host)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
			return err
		}
		b, err := io.ReadAll(conn)
		if !strings.Contains(string(b), "tcp-"+sb.ID) {
			return fmt.Errorf("%s answered %q, %v", p.URL, b, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
