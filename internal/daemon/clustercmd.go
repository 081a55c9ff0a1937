package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/naming"
)

// clusterCallTimeout bounds each etcd call a cluster command makes.
const clusterCallTimeout = 10 * time.Second

// ClusterCommand runs `sandboxd cluster init|join|members|leave` on a
// node's data directory. init and join only write the data directory's
// cluster files (and, for join, add the member to the running cluster);
// the daemon started on that directory afterwards is a cluster node. They
// refuse a directory already in a cluster.
func ClusterCommand(args []string, stdout, stderr io.Writer) int {
	usage := func() int {
		fmt.Fprint(stderr, `usage:
  sandboxd cluster init    [--data-dir D] (--etcd-client HOST:PORT --etcd-peer HOST:PORT | --etcd-endpoints URL,...)
  sandboxd cluster join    [--data-dir D] --secret-file F --via URL,... (--etcd-client HOST:PORT --etcd-peer HOST:PORT | --etcd-endpoints URL,...)
  sandboxd cluster members [--data-dir D]
  sandboxd cluster leave   [--data-dir D] [--via URL,...]   (stop the daemon first; --via: another member's etcd)
`)
		return 2
	}
	if len(args) == 0 {
		return usage()
	}
	cmd, args := args[0], args[1:]
	defaults, err := config.Parse(nil, os.LookupEnv)
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd cluster:", err)
		return 2
	}
	fs := flag.NewFlagSet("sandboxd cluster "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", defaults.DataDir, "the node's data directory (env SANDBOXD_DATA_DIR)")
	client := fs.String("etcd-client", "", "embedded etcd: the member's client address (loopback HOST:PORT)")
	peer := fs.String("etcd-peer", "", "embedded etcd: the member's peer address (HOST:PORT)")
	endpoints := fs.String("etcd-endpoints", "", "an external etcd cluster's client URLs, comma-separated (no embedded member)")
	via := fs.String("via", "", "join: client URLs of the cluster's etcd, comma-separated")
	secretFile := fs.String("secret-file", "", "join: the cluster secret file that `cluster init` wrote")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterCallTimeout)
	defer cancel()
	dir, err := filepath.Abs(*dataDir)
	if err == nil {
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd cluster: data dir:", err)
		return 1
	}
	var run func() error
	switch cmd {
	case "init":
		run = func() error { return clusterInit(dir, *client, *peer, *endpoints, stdout) }
	case "join":
		run = func() error { return clusterJoin(ctx, dir, *client, *peer, *endpoints, *via, *secretFile, stdout) }
	case "members":
		run = func() error { return clusterMembers(ctx, dir, stdout) }
	case "leave":
		run = func() error { return clusterLeave(ctx, dir, *via, stdout) }
	default:
		return usage()
	}
	if err := run(); err != nil {
		fmt.Fprintf(stderr, "sandboxd cluster %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// memberURLs turns the --etcd-client and --etcd-peer addresses into URLs,
// checking them. Both must be loopback addresses: the embedded member
// speaks plain HTTP without client authentication, and whoever can write
// its keys can mint API tokens and redirect forwarded calls. Nodes on
// several hosts use an external etcd secured by its operator
// (--etcd-endpoints).
func memberURLs(client, peer string) (clientURL, peerURL string, err error) {
	for _, a := range []struct{ flag, addr string }{{"--etcd-client", client}, {"--etcd-peer", peer}} {
		host, port, err := net.SplitHostPort(a.addr)
		if err != nil || host == "" || port == "" {
			return "", "", fmt.Errorf("%s %q: want HOST:PORT", a.flag, a.addr)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return "", "", fmt.Errorf("%s %q: the embedded etcd member listens on loopback addresses only (it has no TLS or authentication); across hosts, use an external etcd with --etcd-endpoints", a.flag, a.addr)
		}
	}
	return "http://" + client, "http://" + peer, nil
}

// splitURLs checks a comma-separated list of http(s) URLs.
func splitURLs(flagName, list string) ([]string, error) {
	var out []string
	for u := range strings.SplitSeq(list, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("%s: %q is not an http(s) URL", flagName, u)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no URLs", flagName)
	}
	return out, nil
}

// clusterNodeID is the node id of dataDir (the one the daemon uses, made
// now if the directory has none), checked for the cluster: it names the
// etcd member and is part of container names.
func clusterNodeID(dataDir string) (string, error) {
	id, err := loadOrCreateNodeID(filepath.Join(dataDir, "node-id"))
	if err != nil {
		return "", err
	}
	if !naming.ValidLabel(id) {
		return "", fmt.Errorf("node id %q (in %s) is not a DNS label; write one that is to that file first", id, filepath.Join(dataDir, "node-id"))
	}
	return id, nil
}

// unclusteredNodeID is clusterNodeID of a data directory that is in no
// cluster yet (init and join refuse one that is).
func unclusteredNodeID(dataDir string) (string, error) {
	f, err := loadClusterFile(dataDir)
	if err != nil {
		return "", err
	}
	if f != nil {
		return "", fmt.Errorf("%s is in a cluster already (%s); `sandboxd cluster leave` first", dataDir, clusterFileName)
	}
	return clusterNodeID(dataDir)
}

func clusterInit(dataDir, client, peer, endpoints string, stdout io.Writer) error {
	id, err := unclusteredNodeID(dataDir)
	if err != nil {
		return err
	}
	var f clusterFile
	if endpoints != "" {
		if f.Endpoints, err = splitURLs("--etcd-endpoints", endpoints); err != nil {
			return err
		}
	} else {
		c, p, err := memberURLs(client, peer)
		if err != nil {
			return err
		}
		f.Endpoints = []string{c}
		f.Member = &clusterMember{ClientURL: c, PeerURL: p, InitialCluster: id + "=" + p, State: "new"}
	}
	secret := filepath.Join(dataDir, clusterSecretName)
	if err := newClusterSecret(secret); err != nil {
		return err
	}
	if err := writeClusterFile(dataDir, f); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %s starts a new cluster; start its daemon on %s.\n", id, dataDir)
	fmt.Fprintf(stdout, "Add a node (its daemon stopped or not started yet):\n  sandboxd cluster join --data-dir DIR --secret-file %s --via %s --etcd-client HOST:PORT --etcd-peer HOST:PORT\n",
		secret, strings.Join(f.Endpoints, ","))
	return nil
}

func clusterJoin(ctx context.Context, dataDir, client, peer, endpoints, via, secretFile string, stdout io.Writer) error {
	id, err := unclusteredNodeID(dataDir)
	if err != nil {
		return err
	}
	if secretFile == "" {
		return errors.New("--secret-file is required (the cluster.secret of a node of the cluster)")
	}
	secret, err := loadClusterSecret(secretFile)
	if err != nil {
		return err
	}
	var f clusterFile
	if endpoints != "" {
		if f.Endpoints, err = splitURLs("--etcd-endpoints", endpoints); err != nil {
			return err
		}
	} else {
		vias, err := splitURLs("--via", via)
		if err != nil {
			return err
		}
		c, p, err := memberURLs(client, peer)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, clusterCallTimeout)
		initial, err := cluster.AddMember(cctx, vias, id, p)
		cancel()
		if err != nil {
			return fmt.Errorf("add member %s: %w", id, err)
		}
		f.Endpoints = []string{c}
		f.Member = &clusterMember{ClientURL: c, PeerURL: p, InitialCluster: initial, State: "existing"}
	}
	if err := writeAtomic(filepath.Join(dataDir, clusterSecretName), []byte(fmt.Sprintf("%x\n", secret))); err != nil {
		return err
	}
	if err := writeClusterFile(dataDir, f); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %s joined; start its daemon on %s now (a new member counts toward the quorum from this moment).\n", id, dataDir)
	return nil
}

func clusterMembers(ctx context.Context, dataDir string, stdout io.Writer) error {
	f, err := loadClusterFile(dataDir)
	if err != nil {
		return err
	}
	if f == nil {
		return fmt.Errorf("%s is not in a cluster", dataDir)
	}
	cctx, cancel := context.WithTimeout(ctx, clusterCallTimeout)
	defer cancel()
	members, err := cluster.ListMembers(cctx, f.Endpoints)
	if err != nil {
		return err
	}
	nodes, err := cluster.ListNodes(cctx, f.Endpoints)
	if err != nil {
		return err
	}
	live := map[string]cluster.NodeInfo{}
	for _, n := range nodes {
		live[n.ID] = n
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tETCD\tLEADER\tAPI\tFREE CPU\tFREE MEMORY")
	seen := map[string]bool{}
	for _, m := range members {
		n, ok := live[m.Name]
		seen[m.Name] = true
		api, cpu, mem := "(down)", "-", "-"
		if ok {
			api, cpu, mem = n.APIURL, fmt.Sprintf("%.1f", float64(n.Headroom.FreeMilliCPU)/1000), fmt.Sprintf("%d MB", n.Headroom.FreeMemoryMB)
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\n", m.Name, m.ClientURL, m.Leader, api, cpu, mem)
	}
	for _, n := range nodes {
		if !seen[n.ID] { // a node on an external etcd runs no member
			fmt.Fprintf(tw, "%s\t-\t-\t%s\t%.1f\t%d MB\n", n.ID, n.APIURL, float64(n.Headroom.FreeMilliCPU)/1000, n.Headroom.FreeMemoryMB)
		}
	}
	return tw.Flush()
}

func clusterLeave(ctx context.Context, dataDir, via string, stdout io.Writer) error {
	f, err := loadClusterFile(dataDir)
	if err != nil {
		return err
	}
	if f == nil {
		return fmt.Errorf("%s is not in a cluster", dataDir)
	}
	id, err := clusterNodeID(dataDir)
	if err != nil {
		return err
	}
	if f.Member != nil {
		// The node's own member is down with its daemon: ask another.
		endpoints := f.Endpoints
		if via != "" {
			if endpoints, err = splitURLs("--via", via); err != nil {
				return err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, clusterCallTimeout)
		err := cluster.RemoveMember(cctx, endpoints, id)
		cancel()
		if err != nil {
			return fmt.Errorf("remove member %s: %w", id, err)
		}
		if err := os.RemoveAll(filepath.Join(dataDir, "etcd")); err != nil {
			return err
		}
	}
	for _, name := range []string{clusterFileName, clusterSecretName} {
		if err := os.Remove(filepath.Join(dataDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	fmt.Fprintf(stdout, "node %s left the cluster; its daemon starts as a single node now.\n", id)
	return nil
}
