package daemontest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// joinTimeout bounds `sandboxd cluster join`'s retries: etcd refuses a new
// member for a few seconds after the previous one joined ("unhealthy
// cluster"), longer on a busy machine.
const joinTimeout = 90 * time.Second

// Cluster is daemons that form one cluster, each running an embedded etcd
// member with TLS and client certificates (docs/cluster.md), on 127.0.0.1
// or, with Env.LAN, each on a LAN host of its own. Its nodes are ordinary Daemons:
// Kill, Stop and Restart them one by one; a restart rejoins with the
// cluster files in its data directory.
type Cluster struct {
	// Nodes are the cluster's daemons, in the order they joined; Nodes[0]
	// ran `cluster init`.
	Nodes []*Daemon
	// etcdClients are the members' etcd client URLs (https), by node.
	etcdClients []string
	// LAN is the network the nodes' hosts are on (Env.LAN), nil when they
	// run on this host's loopback. Close removes it after the nodes.
	LAN *LAN
}

// EtcdClients are the etcd client URLs of the nodes' members, in the
// order of Nodes.
func (c *Cluster) EtcdClients() []string { return slices.Clone(c.etcdClients) }

// ClusterNode describes one node of NewCluster.
type ClusterNode struct {
	// Name is part of the node id (Env.New).
	Name string
	// Args are appended to the daemon's flags, e.g. a --memory-budget
	// that makes placement prefer the node.
	Args []string
}

// Nodes are ClusterNodes with the given names and no extra flags.
func Nodes(names ...string) []ClusterNode {
	out := make([]ClusterNode, len(names))
	for i, n := range names {
		out[i] = ClusterNode{Name: n}
	}
	return out
}

// NewCluster starts daemons that form one cluster: the first runs
// `sandboxd cluster init`, each other `sandboxd cluster join` through the
// first node's API, which holds the cluster CA key and signs the joiner's
// etcd certificate (retried while etcd refuses a new member so soon after
// the last), and each daemon is started right after its init or
// join (a new member counts toward the quorum at once). It returns once
// every node answers /readyz 200 and sees all the others live. On error
// the nodes started so far are closed.
func (e *Env) NewCluster(ctx context.Context, nodes []ClusterNode) (_ *Cluster, err error) {
	c := &Cluster{}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	for _, n := range nodes {
		c.Nodes = append(c.Nodes, e.New(n.Name, n.Args...))
	}
	if e.LAN {
		names := make([]string, len(c.Nodes))
		for i, d := range c.Nodes {
			names[i] = d.NodeID()
		}
		if c.LAN, err = NewLAN(names); err != nil {
			return nil, fmt.Errorf("LAN: %w", err)
		}
		for i, d := range c.Nodes {
			d.host = &c.LAN.Hosts[i]
		}
	}
	for i, d := range c.Nodes {
		// The cluster commands take the node id from the data dir; the
		// daemon's --node-id must be the same (it names the etcd member).
		if err := os.WriteFile(filepath.Join(d.DataDir(), "node-id"), []byte(d.NodeID()+"\n"), 0o600); err != nil {
			return nil, err
		}
		var client, peer string
		if d.host != nil {
			// The member binds and advertises an address (a name is
			// refused: docs/cluster.md), the host's own.
			client = net.JoinHostPort(d.host.Addr.String(), strconv.Itoa(lanEtcdClient))
			peer = net.JoinHostPort(d.host.Addr.String(), strconv.Itoa(lanEtcdPeer))
		} else if client, peer, err = freePair(); err != nil {
			return nil, err
		}
		args := []string{"--data-dir", d.DataDir(), "--etcd-client", client, "--etcd-peer", peer}
		if i == 0 {
			if out, err := e.clusterCmd(ctx, d, append([]string{"init"}, args...)...); err != nil {
				return nil, fmt.Errorf("cluster init %s: %w\n%s", d.NodeID(), err, out)
			}
		} else {
			args = append(args,
				"--secret-file", filepath.Join(c.Nodes[0].DataDir(), "cluster.secret"),
				"--via-api", c.Nodes[0].URL())
			err := testenv.Poll(ctx, joinTimeout, func() error {
				out, err := e.clusterCmd(ctx, d, append([]string{"join"}, args...)...)
				if err != nil {
					return fmt.Errorf("%w: %s", err, out)
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("cluster join %s: %w", d.NodeID(), err)
			}
		}
		c.etcdClients = append(c.etcdClients, "https://"+client)
		sctx, cancel := context.WithTimeout(ctx, StartTimeout)
		err = d.Start(sctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	if err := c.WaitReady(ctx, c.Nodes...); err != nil {
		return nil, err
	}
	return c, nil
}

// StartCluster is NewCluster for t: the cluster is closed (its nodes'
// containers removed) at the end of t, with the tail of each node's log
// when t failed.
func (e *Env) StartCluster(t testing.TB, nodes []ClusterNode) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(len(nodes)+1)*StartTimeout)
	defer cancel()
	c, err := e.NewCluster(ctx, nodes)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range c.Nodes {
				t.Logf("node %s log (tail):\n%s", d.NodeID(), d.LogTail(60))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("cluster cleanup: %v", err)
		}
	})
	return c
}

// clusterCmd runs `sandboxd cluster args...` on d's host and returns its
// output.
func (e *Env) clusterCmd(ctx context.Context, d *Daemon, args ...string) (string, error) {
	args = append([]string{e.Bins.Sandboxd, "cluster"}, args...)
	if d.host != nil {
		args = append([]string{"ip", "netns", "exec", d.host.NS}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = HermeticEnv()
	if d.host != nil {
		cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+d.host.CA) // join --via-api over HTTPS
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Members is `sandboxd cluster members` run on d's data directory: the
// cluster's etcd members and the live nodes, as a table.
func (c *Cluster) Members(ctx context.Context, d *Daemon) (string, error) {
	return d.env.clusterCmd(ctx, d, "members", "--data-dir", d.DataDir())
}

// WaitReady waits until every one of nodes answers /readyz 200 and lists
// every running node of c as live (`sandboxd cluster members`
// shows their API URLs), or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context, nodes ...*Daemon) error {
	return testenv.Poll(ctx, StartTimeout, func() error {
		for _, d := range nodes {
			if err := ready(ctx, d.URL()); err != nil {
				return fmt.Errorf("node %s: %w", d.NodeID(), err)
			}
		}
		for _, d := range nodes {
			table, err := c.Members(ctx, d)
			if err != nil {
				return fmt.Errorf("cluster members on %s: %w: %s", d.NodeID(), err, table)
			}
			for _, n := range c.Nodes {
				if n.PID() != 0 && !strings.Contains(table, n.URL()) {
					return fmt.Errorf("node %s does not list %s (%s) as live yet:\n%s", d.NodeID(), n.NodeID(), n.URL(), table)
				}
			}
		}
		return nil
	})
}

// Close closes every node at once (Daemon.Close: stop, remove its
// containers and data directory), then removes the LAN. It is safe to
// call more than once.
func (c *Cluster) Close() error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, d := range c.Nodes {
		wg.Go(func() { errs[i] = d.Close() })
	}
	wg.Wait()
	if c.LAN != nil {
		errs = append(errs, c.LAN.Close())
	}
	return errors.Join(errs...)
}

// ready is one GET /readyz: nil on 200.
func ready(ctx context.Context, baseURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: transport()}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	return nil
}

// freePair returns two 127.0.0.1 addresses whose ports were free a moment
// ago, for an etcd member's client and peer listeners.
func freePair() (client, peer string, err error) {
	a, err := FreePort()
	if err != nil {
		return "", "", err
	}
	b, err := FreePort()
	for err == nil && b == a {
		b, err = FreePort()
	}
	if err != nil {
		return "", "", err
	}
	return "127.0.0.1:" + strconv.Itoa(a), "127.0.0.1:" + strconv.Itoa(b), nil
}
