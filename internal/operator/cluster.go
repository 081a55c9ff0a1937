package operator

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/datadir"
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
  sandboxd cluster init    [--data-dir D] (--etcd-client HOST:PORT --etcd-peer HOST:PORT | --etcd-endpoints URL,... ETCD-TLS)
  sandboxd cluster join    [--data-dir D] --secret-file F (--via-api URL --etcd-client HOST:PORT --etcd-peer HOST:PORT | --etcd-endpoints URL,... ETCD-TLS)
  sandboxd cluster members [--data-dir D]
  sandboxd cluster leave   [--data-dir D] [--via URL,...]   (stop the daemon first; --via: another member's etcd)
ETCD-TLS (an external etcd): --etcd-cacert FILE --etcd-cert FILE --etcd-key FILE
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
	client := fs.String("etcd-client", "", "embedded etcd: the member's client address (HOST:PORT, TLS)")
	peer := fs.String("etcd-peer", "", "embedded etcd: the member's peer address (HOST:PORT, TLS)")
	endpoints := fs.String("etcd-endpoints", "", "an external etcd cluster's client URLs, comma-separated (no embedded member)")
	var ext datadir.ClusterTLS
	fs.StringVar(&ext.CACert, "etcd-cacert", "", "external etcd: the CA certificate (PEM) that signed its servers' certificates")
	fs.StringVar(&ext.Cert, "etcd-cert", "", "external etcd: this node's client certificate (PEM)")
	fs.StringVar(&ext.Key, "etcd-key", "", "external etcd: this node's client key (PEM)")
	viaAPI := fs.String("via-api", "", "join: the API URL of the node that ran `cluster init` (it holds the cluster CA key and signs this node's etcd certificate)")
	via := fs.String("via", "", "leave: client URLs of another member's etcd, comma-separated")
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
		run = func() error { return clusterInit(dir, *client, *peer, *endpoints, ext, stdout) }
	case "join":
		if *via != "" {
			fmt.Fprintln(stderr, "sandboxd cluster join: --via is gone: etcd takes only nodes with a certificate now; name the API URL of the node that ran `cluster init` with --via-api")
			return 2
		}
		run = func() error {
			return clusterJoin(ctx, dir, *client, *peer, *endpoints, *viaAPI, *secretFile, ext, stdout)
		}
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

// memberURLs turns the --etcd-client and --etcd-peer addresses into the
// member's https URLs, checking them, and returns their hosts (the SANs
// of the member's certificate). The member speaks TLS with client
// certificates on both (docs/cluster.md, "etcd is closed"), so any IP
// address will do but an unspecified one (0.0.0.0, ::), which other nodes
// could not dial; the member binds it, so it is an IP, not a name.
func memberURLs(client, peer string) (clientURL, peerURL string, hosts []string, err error) {
	for _, a := range []struct{ flag, addr string }{{"--etcd-client", client}, {"--etcd-peer", peer}} {
		host, port, err := net.SplitHostPort(a.addr)
		if err != nil || host == "" || port == "" {
			return "", "", nil, fmt.Errorf("%s %q: want HOST:PORT", a.flag, a.addr)
		}
		ip := net.ParseIP(host)
		if ip == nil {
			return "", "", nil, fmt.Errorf("%s %q: want an IP address (the member binds it and advertises it)", a.flag, a.addr)
		}
		if ip.IsUnspecified() {
			return "", "", nil, fmt.Errorf("%s %q: the address is advertised to the other nodes: name one they reach, not an unspecified address", a.flag, a.addr)
		}
		if !slices.Contains(hosts, host) {
			hosts = append(hosts, host)
		}
	}
	return "https://" + client, "https://" + peer, hosts, nil
}

// externalTLS checks the --etcd-cacert, --etcd-cert and --etcd-key of an
// external etcd: all three are required (etcd is never reached in clear
// or without a client certificate), and they must load. It returns them
// as absolute paths, which the cluster file keeps.
func externalTLS(t datadir.ClusterTLS) (*datadir.ClusterTLS, error) {
	if t.CACert == "" || t.Cert == "" || t.Key == "" {
		return nil, errors.New("--etcd-endpoints needs --etcd-cacert, --etcd-cert and --etcd-key: the node reaches etcd with TLS and a client certificate only")
	}
	for _, p := range []*string{&t.CACert, &t.Cert, &t.Key} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	if _, err := t.Files("").ClientConfig(); err != nil {
		return nil, err
	}
	return &t, nil
}

// refuseEmbeddedTLSFlags refuses the external etcd's TLS flags without
// --etcd-endpoints: the embedded member's identity is the cluster's own.
func refuseEmbeddedTLSFlags(t datadir.ClusterTLS) error {
	if t != (datadir.ClusterTLS{}) {
		return errors.New("--etcd-cacert, --etcd-cert and --etcd-key are for an external etcd (--etcd-endpoints); an embedded member's certificates come from the cluster's CA")
	}
	return nil
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
	id, err := datadir.LoadOrCreateNodeID(datadir.NodeIDPath(dataDir))
	if err != nil {
		return "", err
	}
	if !naming.ValidLabel(id) {
		return "", fmt.Errorf("node id %q (in %s) is not a DNS label; write one that is to that file first", id, datadir.NodeIDPath(dataDir))
	}
	return id, nil
}

// unclusteredNodeID is clusterNodeID of a data directory that is in no
// cluster yet (init and join refuse one that is).
func unclusteredNodeID(dataDir string) (string, error) {
	f, err := datadir.LoadClusterFile(dataDir)
	if err != nil {
		return "", err
	}
	if f != nil {
		return "", fmt.Errorf("%s is in a cluster already (%s); `sandboxd cluster leave` first", dataDir, datadir.ClusterFileName)
	}
	return clusterNodeID(dataDir)
}

func clusterInit(dataDir, client, peer, endpoints string, ext datadir.ClusterTLS, stdout io.Writer) error {
	id, err := unclusteredNodeID(dataDir)
	if err != nil {
		return err
	}
	var f datadir.ClusterFile
	if endpoints != "" {
		if f.Endpoints, err = splitURLs("--etcd-endpoints", endpoints); err != nil {
			return err
		}
		if f.TLS, err = externalTLS(ext); err != nil {
			return err
		}
	} else {
		if err := refuseEmbeddedTLSFlags(ext); err != nil {
			return err
		}
		c, p, hosts, err := memberURLs(client, peer)
		if err != nil {
			return err
		}
		if err := initClusterCA(dataDir, id, hosts); err != nil {
			return err
		}
		f.Endpoints = []string{c}
		f.Member = &datadir.ClusterMember{ClientURL: c, PeerURL: p, InitialCluster: id + "=" + p, State: "new"}
		f.TLS = embeddedTLS()
	}
	secret := filepath.Join(dataDir, datadir.ClusterSecretName)
	if err := datadir.NewClusterSecret(secret); err != nil {
		return err
	}
	if err := datadir.WriteClusterFile(dataDir, f); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %s starts a new cluster; start its daemon on %s.\n", id, dataDir)
	if f.Member != nil {
		fmt.Fprintf(stdout, "Add a node (its daemon stopped or not started yet; this node's daemon running):\n  sandboxd cluster join --data-dir DIR --secret-file %s --via-api THIS-NODE-API-URL --etcd-client HOST:PORT --etcd-peer HOST:PORT\n", secret)
	} else {
		fmt.Fprintf(stdout, "Add a node:\n  sandboxd cluster join --data-dir DIR --secret-file %s --etcd-endpoints %s --etcd-cacert F --etcd-cert F --etcd-key F\n", secret, strings.Join(f.Endpoints, ","))
	}
	return nil
}

// initClusterCA makes the cluster's CA in dataDir (its key 0600, kept
// only here) and the node's own etcd identity, for hosts.
func initClusterCA(dataDir, id string, hosts []string) error {
	now := time.Now()
	ca, err := cluster.NewCA(now)
	if err != nil {
		return err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	cert, key, err := ca.IssueNode(id, hosts, now)
	if err != nil {
		return err
	}
	return datadir.WriteFiles(dataDir, map[string][]byte{
		datadir.ClusterCAName: ca.CertPEM(), datadir.ClusterCAKeyName: caKey, datadir.ClusterCertName: cert, datadir.ClusterCertKeyName: key,
	})
}

func clusterJoin(ctx context.Context, dataDir, client, peer, endpoints, viaAPI, secretFile string, ext datadir.ClusterTLS, stdout io.Writer) error {
	id, err := unclusteredNodeID(dataDir)
	if err != nil {
		return err
	}
	if secretFile == "" {
		return errors.New("--secret-file is required (the cluster.secret of a node of the cluster)")
	}
	secret, err := datadir.LoadClusterSecret(secretFile)
	if err != nil {
		return err
	}
	var f datadir.ClusterFile
	if endpoints != "" {
		if f.Endpoints, err = splitURLs("--etcd-endpoints", endpoints); err != nil {
			return err
		}
		if f.TLS, err = externalTLS(ext); err != nil {
			return err
		}
	} else {
		if err := refuseEmbeddedTLSFlags(ext); err != nil {
			return err
		}
		if viaAPI == "" {
			return errors.New("--via-api is required: the API URL of the node that ran `cluster init`")
		}
		if _, err := splitURLs("--via-api", viaAPI); err != nil {
			return err
		}
		c, p, hosts, err := memberURLs(client, peer)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, clusterCallTimeout)
		etcdEndpoints, err := RequestCertificate(cctx, http.DefaultClient, viaAPI, secret, id, hosts, dataDir)
		cancel()
		if err != nil {
			return err
		}
		tlsCfg, err := datadir.EmbeddedTLS().Files(dataDir).ClientConfig()
		if err != nil {
			return err
		}
		cctx, cancel = context.WithTimeout(ctx, clusterCallTimeout)
		initial, err := cluster.AddMember(cctx, etcdEndpoints, tlsCfg, id, p)
		cancel()
		if err != nil {
			return fmt.Errorf("add member %s: %w", id, err)
		}
		f.Endpoints = []string{c}
		f.Member = &datadir.ClusterMember{ClientURL: c, PeerURL: p, InitialCluster: initial, State: "existing"}
		f.TLS = embeddedTLS()
	}
	if err := datadir.WriteAtomic(filepath.Join(dataDir, datadir.ClusterSecretName), []byte(fmt.Sprintf("%x\n", secret))); err != nil {
		return err
	}
	if err := datadir.WriteClusterFile(dataDir, f); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %s joined; start its daemon on %s now (a new member counts toward the quorum from this moment).\n", id, dataDir)
	return nil
}

func clusterMembers(ctx context.Context, dataDir string, stdout io.Writer) error {
	f, err := datadir.LoadClusterFile(dataDir)
	if err != nil {
		return err
	}
	if f == nil {
		return fmt.Errorf("%s is not in a cluster", dataDir)
	}
	tlsCfg, err := f.EtcdTLS(dataDir)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, clusterCallTimeout)
	defer cancel()
	members, err := cluster.ListMembers(cctx, f.Endpoints, tlsCfg)
	if err != nil {
		return err
	}
	nodes, err := cluster.ListNodes(cctx, f.Endpoints, tlsCfg)
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
	f, err := datadir.LoadClusterFile(dataDir)
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
		tlsCfg, err := f.EtcdTLS(dataDir)
		if err != nil {
			return err
		}
		// The node's own member is down with its daemon: ask another.
		endpoints := f.Endpoints
		if via != "" {
			if endpoints, err = splitURLs("--via", via); err != nil {
				return err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, clusterCallTimeout)
		err = cluster.RemoveMember(cctx, endpoints, tlsCfg, id)
		cancel()
		if err != nil {
			return fmt.Errorf("remove member %s: %w", id, err)
		}
		if err := os.RemoveAll(filepath.Join(dataDir, "etcd")); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, datadir.ClusterCAKeyName)); err == nil {
		fmt.Fprintf(stdout, "note: node %s held the cluster CA key (%s), which signs joining nodes' certificates; it is removed with the node. Copy %s and %s from a backup into another node's data directory if the cluster should take more nodes.\n",
			id, datadir.ClusterCAKeyName, datadir.ClusterCAName, datadir.ClusterCAKeyName)
	}
	for _, name := range []string{datadir.ClusterFileName, datadir.ClusterSecretName, datadir.ClusterCAKeyName, datadir.ClusterCertKeyName, datadir.ClusterCertName, datadir.ClusterCAName} {
		if err := os.Remove(filepath.Join(dataDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	fmt.Fprintf(stdout, "node %s left the cluster; its daemon starts as a single node now.\n", id)
	return nil
}

// RequestCertificate is the joiner's side: it makes this node's etcd key,
// asks the node at apiURL to sign it under the cluster secret, checks the
// answer's MAC and that the certificate is for its key and verifies under
// the CA it got, then writes the CA certificate, its certificate and key
// into dataDir. It returns the cluster's etcd endpoints. The secret never
// leaves this process: only MACs travel.
func RequestCertificate(ctx context.Context, hc *http.Client, apiURL string, secret []byte, node string, hosts []string, dataDir string) ([]string, error) {
	key, keyPEM, err := cluster.NewNodeKey()
	if err != nil {
		return nil, err
	}
	csr, err := cluster.NodeCSR(key, node)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(cluster.JoinRequest{Node: node, Hosts: hosts, CSR: string(csr), Time: time.Now().Unix()})
	if err != nil {
		return nil, err
	}
	mac, err := cluster.JoinMAC(secret, body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(apiURL, "/")+cluster.JoinPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(cluster.HeaderJoinAuth, mac)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask %s for an etcd certificate: %w", apiURL, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("ask %s for an etcd certificate: %w", apiURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ask %s for an etcd certificate: %s: %s", apiURL, resp.Status, bytes.TrimSpace(out))
	}
	want, err := cluster.ResponseMAC(secret, mac, out)
	if err != nil || !cluster.VerifyMAC(resp.Header.Get(cluster.HeaderJoinAuth), want) {
		return nil, fmt.Errorf("ask %s for an etcd certificate: the answer is not authenticated by the cluster secret (is it a node of this cluster?)", apiURL)
	}
	var jr cluster.JoinResponse
	if err := json.Unmarshal(out, &jr); err != nil {
		return nil, fmt.Errorf("ask %s for an etcd certificate: %w", apiURL, err)
	}
	pair, err := tls.X509KeyPair([]byte(jr.Cert), keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the certificate %s signed is not for this node's key: %w", apiURL, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(jr.CA)) {
		return nil, fmt.Errorf("%s sent no CA certificate", apiURL)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("the certificate %s signed does not verify under its CA: %w", apiURL, err)
	}
	if len(jr.Endpoints) == 0 {
		return nil, fmt.Errorf("%s named no etcd endpoints", apiURL)
	}
	if err := datadir.WriteFiles(dataDir, map[string][]byte{datadir.ClusterCAName: []byte(jr.CA), datadir.ClusterCertName: []byte(jr.Cert), datadir.ClusterCertKeyName: keyPEM}); err != nil {
		return nil, err
	}
	return jr.Endpoints, nil
}

// embeddedTLS is datadir.EmbeddedTLS for a cluster file to point at.
func embeddedTLS() *datadir.ClusterTLS {
	t := datadir.EmbeddedTLS()
	return &t
}
