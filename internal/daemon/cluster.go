package daemon

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/api/e2b"
	"github.com/sandboxd/sandboxd/internal/api/router"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/cluster/failover"
	"github.com/sandboxd/sandboxd/internal/cluster/forward"
	"github.com/sandboxd/sandboxd/internal/datadir"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Cluster mode's bounds.
const (
	// clusterStartTimeout bounds the embedded member's start and the
	// node's first answer from the cluster.
	clusterStartTimeout = 90 * time.Second
	// headroomEvery is how often the node publishes its free capacity.
	headroomEvery = time.Second
	// healthEvery is how often /readyz's view of the cluster is refreshed.
	healthEvery = 2 * time.Second
	// leaseTTL is how long a silent node counts as alive: a restart
	// shorter than this is no departure; a crash is noticed after it.
	leaseTTL = 10 * time.Second
)

// clusterNode is this daemon's part in a cluster: the embedded etcd
// member (if it runs one), the node's membership and keys, and the node
// MAC's signer.
type clusterNode struct {
	member *cluster.Member
	node   *cluster.Node
	signer forward.Signer
	// ca is the cluster CA when this node holds its key (it ran `cluster
	// init`): it signs joining nodes' etcd certificates (serveJoin).
	ca *cluster.CA
	// etcdEndpoints are the etcd client URLs this node uses, which a
	// joining node is given.
	etcdEndpoints []string
	self          string
	logger        *slog.Logger
	// healthy is the last /readyz view of the cluster: "" when it
	// answers, else why not.
	health atomic.Pointer[string]
	// fwd is the forwarding middleware (handler), for elsewhere and the
	// edges' placer.
	fwd *forward.Handler
	// stopping is closed when the node stops (run's ctx ended): the event
	// streams it serves end then, rather than hold the server's shutdown.
	stopping chan struct{}
	// macs are the node MACs the peer endpoints accepted (peerOnly).
	macs macCache
	// streams holds the event stream each node reads from this one
	// (servePeerEvents): one per node, a new one ends the old.
	streamsMu sync.Mutex
	streams   map[string]chan struct{}
	// fo is the node's failover and stale sweep (its Service is set once
	// the service exists).
	fo *failover.Failover
}

// openCluster joins the cluster that dataDir's cluster file names, or
// returns nil when there is none (a single node).
func (d *Daemon) openCluster(ctx context.Context, dataDir string) (*clusterNode, error) {
	f, err := datadir.LoadClusterFile(dataDir)
	if err != nil || f == nil {
		return nil, err
	}
	if !naming.ValidLabel(d.Config.NodeID) {
		return nil, fmt.Errorf("node id %q is not a DNS label; cluster nodes need one", d.Config.NodeID)
	}
	secret, err := datadir.LoadClusterSecret(filepath.Join(dataDir, datadir.ClusterSecretName))
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	tlsCfg, err := f.EtcdTLS(dataDir)
	if err != nil {
		return nil, fmt.Errorf("cluster etcd TLS: %w", err)
	}
	ca, err := datadir.LoadClusterCA(dataDir)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	started := time.Now() // failover's grace counts from here
	c := &clusterNode{self: d.Config.NodeID, logger: d.logger, signer: forward.Signer{Node: d.Config.NodeID, Secret: secret}, stopping: make(chan struct{}),
		ca: ca, etcdEndpoints: f.Endpoints}
	ok := ""
	c.health.Store(&ok)
	sctx, cancel := context.WithTimeout(ctx, clusterStartTimeout)
	defer cancel()
	if m := f.Member; m != nil {
		c.member, err = cluster.StartMember(sctx, cluster.MemberConfig{
			Name: d.Config.NodeID, DataDir: filepath.Join(dataDir, "etcd"),
			ClientURL: m.ClientURL, PeerURL: m.PeerURL, InitialCluster: m.InitialCluster, State: m.State,
			TLS: f.TLS.Files(dataDir),
		}, d.logger)
		if err != nil {
			return nil, fmt.Errorf("cluster.StartMember: %w", err)
		}
		d.closers = append(d.closers, c.member.Close)
	}
	apiURL := d.Config.AdvertiseURL
	if apiURL == "" {
		addr, err := advertised(d.Config.Listen, d.ln.Addr())
		if err != nil {
			return nil, fmt.Errorf("--listen: %w; set --advertise-url", err)
		}
		apiURL = "http://" + addr
	}
	if loopbackURL(apiURL) && !slices.ContainsFunc(f.Endpoints, loopbackURL) {
		// Another host would call its own loopback: the call comes back
		// to it, which answers from its own view (the loop guard).
		d.logger.Warn("cluster: this node advertises a loopback API URL, but its etcd is reached beyond loopback: other hosts cannot reach this node; set --advertise-url (docs/deploy.md)", "api", apiURL)
	}
	c.node, err = cluster.Open(sctx, cluster.Config{
		NodeID: d.Config.NodeID, Endpoints: f.Endpoints, TLS: tlsCfg, APIURL: apiURL, Secret: secret, Logger: d.logger,
		LeaseTTL: leaseTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster.Open: %w", err)
	}
	c.fo = &failover.Failover{
		Dir: c.node, Self: c.self, Started: started, Logger: d.logger,
		Healthy: func() bool { return *c.health.Load() == "" },
	}
	// Stopped before the member (closers run in reverse), without
	// revoking its lease: a restart within the lease is no departure.
	d.closers = append(d.closers, func() error { c.node.Stop(); return nil })
	d.logger.Info("cluster node", "node", d.Config.NodeID, "api", apiURL, "etcd", strings.Join(f.Endpoints, ","))
	return c, nil
}

// publishTLS binds the SNI listener now (other nodes forward TLS
// connections to it before this node exposes anything) and publishes its
// address in the node's nodes/ key: advertise when set, else the
// configured host with the bound port (advertised). A node without a TLS
// listen address publishes none; one whose listener does not bind
// publishes none and says so (TLS exposures then fail here as on a single
// node, and nobody is sent to a dead address).
func (c *clusterNode) publishTLS(ctx context.Context, r *ingress.Router, listen, advertise string) error {
	if advertise != "" {
		if _, _, err := net.SplitHostPort(advertise); err != nil {
			return fmt.Errorf("--advertise-tls %q: %w", advertise, err)
		}
	}
	if listen == "" {
		return nil
	}
	addr, err := r.ListenTLS(ctx)
	if err != nil {
		c.logger.Warn("cluster: no SNI listener; TLS exposures of this node answer on no node", "addr", listen, "err", err)
		return nil
	}
	if advertise == "" {
		if advertise, err = advertised(listen, addr); err != nil {
			return fmt.Errorf("--tls-listen: %w; set --advertise-tls", err)
		}
	}
	c.node.SetTLSAddr(advertise)
	c.logger.Info("cluster node: tls", "listen", addr.String(), "advertise", advertise)
	return nil
}

// loopbackURL reports whether u's host is a loopback address or
// localhost.
func loopbackURL(u string) bool {
	p, err := url.Parse(u)
	return err == nil && naming.IsLoopbackHost(p.Hostname())
}

// advertised is the host:port other nodes reach a listener by when no
// --advertise-* flag says: the configured host (a name stays a name, so
// nodes reach each other by name) with the port it bound (the configured
// one may be 0). A listener on every address (0.0.0.0, ::, or no host)
// names no address another node could dial: that is an error.
func advertised(listen string, bound net.Addr) (string, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return "", fmt.Errorf("%q listens on every address, which names none the other nodes can reach", listen)
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

// tlsDirectory is what tlsRemote reads of the cluster (*cluster.Node's
// watch-fed directory: no etcd call on a connection's path).
type tlsDirectory interface {
	HostnameTarget(host string) (id string, ok bool)
	Placement(id string) (cluster.Placement, bool)
	Nodes() []cluster.NodeInfo
}

// tlsRemote is the ingress's Remote for node self: for a server name this
// node does not route, the SNI listener of the node that owns the sandbox
// it names (a preview host under domain, or a bound custom domain), when
// that is another live node that published one. A lost or deleted
// sandbox, one of this node, and one whose node is gone are nobody's: the
// connection is closed.
func tlsRemote(dir tlsDirectory, self, domain string) func(serverName string) (string, bool) {
	return func(serverName string) (string, bool) {
		host := naming.NormalizeHost(serverName)
		id, _, ok := naming.ParsePreviewHost(host, domain)
		if !ok {
			if id, ok = dir.HostnameTarget(host); !ok {
				return "", false
			}
		}
		p, ok := dir.Placement(id)
		if !ok || p.Node == self || p.State == cluster.StateLost || p.State == cluster.StateDeleted {
			return "", false
		}
		for _, n := range dir.Nodes() {
			if n.ID == p.Node {
				return n.TLSAddr, n.TLSAddr != ""
			}
		}
		return "", false
	}
}

// servesElsewhere reports whether host is a preview host under domain of
// a sandbox placed on another live node than self, running there, that
// its node would serve: a port it exposes over http, or any port of an
// E2B sandbox (PortHosts; whether it listens is that node's to find) —
// and names its owner. The HTTPS listener may then end TLS for it here,
// and the forwarding middleware sends its requests on. dir is the
// watch-fed directory: no etcd call on a handshake's path.
func servesElsewhere(dir tlsDirectory, self, domain, host string) (owner string, ok bool) {
	id, port, ok := naming.ParsePreviewHost(host, domain)
	if !ok {
		return "", false
	}
	p, ok := dir.Placement(id)
	if !ok || p.Node == self || p.State != cluster.StateRunning {
		return "", false
	}
	if !p.PortHosts && !slices.ContainsFunc(p.Ports, func(i cluster.PortIntent) bool { return i.Port == port && i.Protocol == "http" }) {
		return "", false
	}
	if !slices.ContainsFunc(dir.Nodes(), func(n cluster.NodeInfo) bool { return n.ID == p.Node }) {
		return "", false
	}
	return p.Owner, true
}

// keys adapts the node's keys to service.Cluster.
type clusterKeys struct{ c *clusterNode }

var _ service.Cluster = clusterKeys{}

func (k clusterKeys) ClaimSandbox(ctx context.Context, p service.Placement) error {
	var sealed []byte
	if len(p.Recovery) > 0 {
		var err error
		if sealed, err = k.c.node.Seal(p.Recovery, failover.RecoveryAD(p.ID)); err != nil {
			return err
		}
	}
	var key string
	if p.Key.Scope != "" {
		key = cluster.IdemKey(p.Key.Scope, p.Owner, p.Key.Fingerprint)
	}
	err := k.c.node.ClaimPlacement(ctx, cluster.Placement{
		ID: p.ID, Node: k.c.self, Owner: p.Owner, Name: p.Name, State: cluster.StateRunning, Failover: p.Failover, Spec: sealed, Key: key,
		Template: p.Template, PortHosts: e2b.ServesPortHosts(p.Annotations),
	})
	return serviceErr(err)
}

// ours reports whether id's placement is still this node's: a node that
// lost a sandbox to a failover never releases the new owner's keys.
func (k clusterKeys) ours(id string) bool {
	p, ok := k.c.node.Placement(id)
	return !ok || p.Node == k.c.self
}

func (k clusterKeys) ReleaseSandbox(ctx context.Context, id string) error {
	if !k.ours(id) {
		return nil
	}
	return serviceErr(k.c.node.ReleasePlacementOf(ctx, id, k.c.self))
}

func (k clusterKeys) SetIntents(ctx context.Context, id string, in service.Intents) error {
	if !k.ours(id) {
		return nil
	}
	_, err := k.c.node.UpdatePlacement(ctx, id, func(p *cluster.Placement) error {
		p.Ports = p.Ports[:0]
		for _, port := range in.Ports {
			p.Ports = append(p.Ports, cluster.PortIntent{Port: port.Port, Protocol: port.Protocol, Public: port.Public})
		}
		p.Domains = p.Domains[:0]
		for _, d := range in.Domains {
			p.Domains = append(p.Domains, d.Hostname+":"+strconv.Itoa(d.Port))
		}
		return nil
	})
	return serviceErr(err)
}

func (k clusterKeys) Ready(ctx context.Context) error { return serviceErr(k.c.node.Healthy(ctx)) }

func (k clusterKeys) ClaimHostname(ctx context.Context, host, id string) error {
	return serviceErr(k.c.node.ClaimHostname(ctx, host, id))
}

func (k clusterKeys) ReleaseHostname(ctx context.Context, host, id string) error {
	if !k.ours(id) {
		return nil
	}
	return serviceErr(k.c.node.ReleaseHostname(ctx, host, id))
}

// serviceErr maps the cluster's errors onto the service's.
func serviceErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrNameTaken):
		return fmt.Errorf("%w: %w", service.ErrNameConflict, err)
	case errors.Is(err, cluster.ErrHostnameTaken):
		return fmt.Errorf("%w: %w", service.ErrHostnameConflict, err)
	case errors.Is(err, cluster.ErrTemplateGone):
		// A create from a template another node deleted meanwhile.
		return fmt.Errorf("%w: %w", service.ErrNotFound, err)
	case errors.Is(err, cluster.ErrUnavailable):
		return service.Unavailable(service.ReasonNoQuorum, err)
	}
	return fmt.Errorf("%w: %w", service.ErrUnavailable, err)
}

// clusterTokens are the cluster's API tokens (etcd, read from the node's
// watch-fed copy) and the node's own (its database: the admin token, and
// tokens made with `sandboxd token create` on this node, which work here
// only). A token revoked in either is revoked: `sandboxd token revoke`
// on a node reaches its copy of the admin token in the cluster too. The
// cluster's are read from the directory, so authentication works through
// a quorum loss (docs/cluster.md, "Quorum loss").
type clusterTokens struct {
	cluster *cluster.TokenStore
	local   auth.TokenLookup
}

func (t clusterTokens) LookupAPITokenByHash(ctx context.Context, hash [32]byte) (auth.StoredToken, error) {
	st, cerr := t.cluster.LookupAPITokenByHash(ctx, hash)
	lt, lerr := t.local.LookupAPITokenByHash(ctx, hash)
	switch {
	case cerr == nil && lerr == nil:
		st.Revoked = st.Revoked || lt.Revoked
		return st, nil
	case cerr == nil && errors.Is(lerr, auth.ErrTokenNotFound):
		return st, nil
	case lerr == nil && errors.Is(cerr, auth.ErrTokenNotFound):
		return lt, nil
	case cerr != nil && !errors.Is(cerr, auth.ErrTokenNotFound):
		return auth.StoredToken{}, cerr
	}
	return auth.StoredToken{}, lerr
}

// locator answers the forwarding middleware from the node's directory:
// no etcd call on the path of a call that names a sandbox.
type locator struct {
	c *clusterNode
	// who is the caller r's credential stands for (any edge's), ok=false
	// when it has no valid one.
	who func(r *http.Request) (c service.Caller, ok bool)
}

var _ forward.Locator = locator{}

func (l locator) target(ctx context.Context, id string) (forward.Target, bool, error) {
	p, ok := l.c.node.Placement(id)
	if !ok {
		// The directory is fed by a watch and may not have a placement
		// another node made a moment ago (a create answered there, then
		// a read sent here): etcd says, before this node answers for it.
		var err error
		if p, ok, err = l.c.node.FreshPlacement(ctx, id); err != nil {
			l.c.logger.Warn("cluster: read a placement the directory lacks", "sandbox", id, "err", err)
		}
	}
	if ok && p.Node == l.c.self {
		if l.c.fo.Recreating(id) {
			return forward.Target{}, false, service.Unavailable(fmt.Sprintf("sandbox %s is being recreated on this node", id), nil)
		}
	}
	if !ok || p.Node == l.c.self {
		return forward.Target{}, false, nil
	}
	switch p.State {
	case cluster.StateLost:
		return forward.Target{}, false, &lostError{p}
	case cluster.StateDeleted:
		return forward.Target{}, false, nil // answered here: not found
	}
	for _, n := range l.c.node.Nodes() {
		if n.ID == p.Node {
			return forward.Target{Node: n.ID, URL: n.APIURL}, true, nil
		}
	}
	// Its node is gone and the failover has not moved it yet.
	if p.Failover == service.FailoverRecreate {
		return forward.Target{}, false, service.Unavailable(fmt.Sprintf("sandbox %s is being recreated: its node %s departed", id, p.Node), nil)
	}
	return forward.Target{}, false, service.Unavailable(fmt.Sprintf("sandbox %s: its node %s is down", id, p.Node), nil)
}

func (l locator) Locate(ctx context.Context, r *http.Request, ref forward.Ref) (forward.Target, bool, error) {
	if ref.Kind == forward.Host {
		// A bound custom domain is its sandbox's, whatever the path; one
		// of this node's is named as this node's (ok), so that the
		// middleware knows it is no API host (it keeps no create body for
		// a sandbox's app).
		if id, ok := l.c.node.HostnameTarget(naming.NormalizeHost(ref.Host)); ok {
			t, ok, err := l.target(ctx, id)
			if err == nil && !ok {
				return forward.Target{Node: l.c.self}, true, nil
			}
			return t, ok, err
		}
		// Bound to nothing: an API host this node was not told of
		// (--api-host); the request is the API's, routed by its path (a
		// create is served here, where its edge places it).
	}
	switch {
	case ref.ID != "":
		return l.target(ctx, ref.ID)
	case ref.Name != "":
		owner, ok := l.owner(r)
		if !ok {
			return forward.Target{}, false, nil // the edge answers 401
		}
		id, err := l.c.node.LookupName(ctx, owner, ref.Name)
		if errors.Is(err, cluster.ErrNotFound) {
			return forward.Target{}, false, nil
		}
		if err != nil {
			return forward.Target{}, false, err
		}
		return l.target(ctx, id)
	}
	return forward.Target{}, false, nil
}

// arrived is the middleware's Arrived: a call another node sent here for
// a sandbox this node is taking over (the sender saw the placement name
// this node) is a retryable 503 until the local row exists, as the
// locator answers a call made here (target); served, it would be a 404.
// With no recreate in flight, the usual case, it costs one atomic load.
func (l locator) arrived(r *http.Request, ref forward.Ref) error {
	if !l.c.fo.RecreatingAny() {
		return nil
	}
	id := ref.ID
	if id == "" && ref.Name != "" {
		owner, ok := l.owner(r)
		if !ok {
			return nil // the edge answers 401
		}
		var err error
		if id, err = l.c.node.LookupName(r.Context(), owner, ref.Name); err != nil {
			return nil // served here: the edge answers from the local store
		}
	}
	if id != "" && l.c.fo.Recreating(id) {
		return service.Unavailable(fmt.Sprintf("sandbox %s is being recreated on this node", id), nil)
	}
	return nil
}

// owner is the tenant of r's credential, when it has a valid one.
func (l locator) owner(r *http.Request) (string, bool) {
	c, ok := l.who(r)
	return c.Owner, ok
}

// Place picks the node of a create (service.Cluster): the node a key is
// bound to (bound now, to the chosen node, by the key's first attempt;
// after a failover, the node that recreated the key's sandbox), else two
// random live nodes among a.Template's holders with room (all live nodes
// when none has), the one with more free memory. While this node's view
// of the cluster is unhealthy it places nothing: a retryable "the cluster
// has no quorum". A key whose sandbox is being recreated is retryable too
// (keySandbox, keyRecreating). Volumes are the service's rule: such a
// create never asks.
func (k clusterKeys) Place(ctx context.Context, a service.Ask) (service.Node, bool, error) {
	c := k.c
	if *c.health.Load() != "" {
		// Every create needs the cluster (its placement claim), and without
		// quorum the directory still lists nodes that are gone (their
		// leases cannot expire): say why now, rather than send it to one.
		return service.Node{}, false, service.Unavailable(service.ReasonNoQuorum, nil)
	}
	nodes := c.node.Nodes()
	cands := make([]forward.Candidate, 0, len(nodes))
	urls := map[string]string{}
	for _, n := range nodes {
		cands = append(cands, forward.Candidate{Node: n.ID, URL: n.APIURL, FreeMilliCPU: n.Headroom.FreeMilliCPU, FreeMemoryMB: n.Headroom.FreeMemoryMB})
		urls[n.ID] = n.APIURL
	}
	chosen, ok := forward.PowerOfTwo(c.holders(a.Template, cands), rand.IntN)
	if !ok {
		return service.Node{}, true, nil
	}
	if a.Key.Scope != "" {
		scope, key := a.Key.Scope, a.Key.Fingerprint
		b, err := c.node.BindKey(ctx, scope, a.Owner, key, chosen.Node, a.KeyTTL)
		if err != nil {
			return service.Node{}, false, serviceErr(err)
		}
		if _, live := urls[b.Node]; !live && *c.health.Load() == "" {
			if n, ok, err := c.keySandbox(ctx, b, urls); ok || err != nil {
				return n, ok && n.ID == c.self, err
			}
			// The node of the first attempt departed, and its attempt with
			// it (it made no sandbox, or one that was lost: the key's local
			// claim died with that node's database): the retry is the
			// key's create now, on a live node.
			if b, err = c.node.RebindKey(ctx, scope, a.Owner, key, b, chosen.Node, a.KeyTTL); err != nil {
				return service.Node{}, false, serviceErr(err)
			}
		}
		url, live := urls[b.Node]
		if !live {
			return service.Node{}, false, service.Unavailable(fmt.Sprintf("the node %s that has this key's first attempt is down", b.Node), nil)
		}
		if err := c.keyRecreating(ctx, b); err != nil {
			return service.Node{}, false, err
		}
		chosen = forward.Candidate{Node: b.Node, URL: url}
	}
	if chosen.Node == c.self {
		return service.Node{}, true, nil
	}
	return service.Node{ID: chosen.Node, URL: chosen.URL}, false, nil
}

// holders narrows cands to the nodes that hold the image of template
// (an id; "" for none) when any of them has room: a create from a
// template runs where its image is, and pulls it elsewhere only when
// those nodes are full (or gone).
func (c *clusterNode) holders(template string, cands []forward.Candidate) []forward.Candidate {
	if template == "" {
		return cands
	}
	holders := c.node.TemplateHolders(template)
	var out []forward.Candidate
	for _, cand := range cands {
		if slices.Contains(holders, cand.Node) && cand.FreeMemoryMB >= holderRoomMB && cand.FreeMilliCPU >= holderRoomMilliCPU {
			out = append(out, cand)
		}
	}
	if len(out) == 0 {
		return cands
	}
	return out
}

// A holder has room for a create when it has this much free (a default
// sandbox's size); a fuller one is passed over for a node that pulls.
const (
	holderRoomMB       = 512
	holderRoomMilliCPU = 1000
)

// keySandbox is where a retried keyed create goes when the node its key
// is bound to departed and the key names sandbox b.ID that is to be
// recreated (failover "recreate"): to the live node that has it now,
// whose claim of the key replays it (ok), or, while the failover has not
// moved it yet, nowhere: a retryable 503 that says so. A key without a
// sandbox, or whose sandbox was lost or deleted, is neither (false, nil):
// its create runs again.
func (c *clusterNode) keySandbox(ctx context.Context, b cluster.Binding, urls map[string]string) (service.Node, bool, error) {
	if b.ID == "" {
		return service.Node{}, false, nil
	}
	p, ok := c.node.Placement(b.ID)
	if !ok {
		var err error
		if p, ok, err = c.node.FreshPlacement(ctx, b.ID); err != nil {
			return service.Node{}, false, serviceErr(err)
		}
	}
	if !ok || p.Failover != service.FailoverRecreate || p.State == cluster.StateLost || p.State == cluster.StateDeleted {
		return service.Node{}, false, nil
	}
	if url, live := urls[p.Node]; live && p.State == cluster.StateRunning {
		return service.Node{ID: p.Node, URL: url}, true, nil
	}
	return service.Node{}, false, service.Unavailable(fmt.Sprintf("sandbox %s, which this create's key made, is being recreated: its node %s departed", b.ID, b.Node), nil)
}

// keyRecreating is a retryable 503 when the key's sandbox is being
// recreated on b.Node (a failover took it over, moving the binding, and
// has not finished): that node claims the key only as its recreate
// starts, and a retry that came first would make a second sandbox. It
// reads the directory, and etcd only when the directory has not seen the
// takeover yet; a key without a sandbox costs nothing.
func (c *clusterNode) keyRecreating(ctx context.Context, b cluster.Binding) error {
	if b.ID == "" {
		return nil
	}
	p, ok := c.node.Placement(b.ID)
	if !ok || p.Node != b.Node {
		var err error
		if p, ok, err = c.node.FreshPlacement(ctx, b.ID); err != nil {
			return serviceErr(err)
		}
	}
	if ok && p.Node == b.Node && p.State == cluster.StateCreating {
		return service.Unavailable(fmt.Sprintf("sandbox %s, which this create's key made, is being recreated on node %s", b.ID, b.Node), nil)
	}
	return nil
}

// publishHeadroom keeps the node's free capacity (for placement) and what
// each owner holds here (for the other nodes' quota checks) current in the
// cluster.
func (c *clusterNode) publishHeadroom(ctx context.Context, adm *admission.Controller) {
	t := time.NewTicker(headroomEvery)
	defer t.Stop()
	for {
		used, budget := adm.Usage()
		c.node.SetHeadroom(cluster.Headroom{
			MilliCPU: budget.MilliCPU, MemoryMB: budget.MemoryMB,
			FreeMilliCPU: budget.MilliCPU - used.MilliCPU, FreeMemoryMB: budget.MemoryMB - used.MemoryMB,
		})
		holdings := adm.Holdings()
		usage := make(map[string]cluster.OwnerUsage, len(holdings))
		for owner, h := range holdings {
			if owner != store.PoolOwner { // idle sandboxes count against no quota
				usage[owner] = cluster.OwnerUsage{Sandboxes: h.Sandboxes, MilliCPU: h.MilliCPU, MemoryMB: h.MemoryMB, DiskMB: h.DiskMB}
			}
		}
		c.node.SetUsage(usage)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// holdingElsewhere is the admission controller's view of what owner holds
// on the other live nodes (SetElsewhere): a lost node's sandboxes count no
// more.
func (c *clusterNode) holdingElsewhere(owner string) admission.Holding {
	u := c.node.UsageElsewhere(owner)
	return admission.Holding{Sandboxes: u.Sandboxes, Request: admission.Request{MilliCPU: u.MilliCPU, MemoryMB: u.MemoryMB, DiskMB: u.DiskMB}}
}

// watchHealth refreshes the cluster's part of /readyz.
func (c *clusterNode) watchHealth(ctx context.Context) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		why := ""
		if err := c.node.Healthy(ctx); err != nil && ctx.Err() == nil {
			why = "cluster: " + err.Error()
		}
		c.health.Store(&why)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// clusterKeys is the service's Cluster: nil (no interface value) on a
// single node.
func (d *Daemon) clusterKeys() service.Cluster {
	if d.cluster == nil {
		return nil
	}
	return clusterKeys{d.cluster}
}

// tokenStore is where API tokens made through the API live: etcd in a
// cluster (a token works on every node), else the node's database.
func (d *Daemon) tokenStore() auth.TokenStore {
	if d.cluster != nil {
		return cluster.NewTokenStore(d.cluster.node)
	}
	return tokenStore{d.Store}
}

// key is the 32-byte key called name: in a cluster derived from the
// cluster secret, so that every node checks what any node signed (a
// preview token, an E2B envd access token) and a sandbox that failed over
// keeps working with the tokens its clients hold; else kept in dataDir.
func (d *Daemon) key(dataDir, name string) ([]byte, error) {
	if d.cluster == nil {
		return loadOrCreateKey(filepath.Join(dataDir, name))
	}
	return hkdf.Key(sha256.New, d.cluster.signer.Secret, nil, "sandboxd "+name, 32)
}

// shareAdminToken registers the node's local admin token in the cluster,
// so it works on every node (the forwarded calls it makes are checked by
// their owner).
func (c *clusterNode) shareAdminToken(ctx context.Context, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	plain := strings.TrimSpace(string(b))
	id, err := auth.Parse(plain)
	if err != nil {
		return err
	}
	_, err = cluster.NewTokenStore(c.node).CreateAPIToken(ctx, auth.Record{Token: auth.Token{
		ID: id, Role: auth.RoleAdmin, Owner: "admin", Name: "local admin of " + c.self,
	}}, auth.Hash(plain))
	if errors.Is(err, auth.ErrTokenIDTaken) {
		return nil
	}
	return err
}

// handler puts the forwarding middleware in front of next, and the
// cluster's health into /readyz. route is what the API edges registered
// (the sandbox a request names, whether it is a create), who the caller
// a request's credential stands for; domain and apiHosts are RefOf's.
func (c *clusterNode) handler(next http.Handler, svc *service.Service, authn *auth.Authenticator, who func(*http.Request) (service.Caller, bool), route router.Func, domain string, apiHosts []string) http.Handler {
	l := locator{c: c, who: who}
	fwd := forward.Middleware(next, forward.Options{
		Self: c.self, Signer: c.signer, Locator: l,
		Domain: domain, APIHosts: apiHosts, Logger: c.logger,
		Route:   func(r *http.Request) (string, bool) { ref := route(r); return ref.Sandbox, ref.Create },
		Arrived: l.arrived,
		OnError: func(w http.ResponseWriter, r *http.Request, err error) {
			if lost := (*lostError)(nil); errors.As(err, &lost) {
				c.serveLost(w, r, l, route(r), next, lost.p)
				return
			}
			msg := "the node that has this sandbox did not answer; retry"
			if c.fwd.RefOf(r).Kind == forward.Create {
				msg = "the node chosen for this create did not answer; retry"
			}
			switch why := service.UnavailableReason(err); {
			case why != "":
				msg = why + "; retry"
			case errors.Is(err, cluster.ErrUnavailable):
				msg = service.ReasonNoQuorum + "; retry"
			case errors.Is(err, service.ErrUnavailable):
				msg = err.Error() // the locator's own words: node ids, no addresses
			}
			writeError(w, http.StatusServiceUnavailable, "unavailable", msg, true)
		},
	})
	c.fwd = fwd
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/cluster/nodes":
			c.serveNodes(w, r, authn)
			return
		case cluster.JoinPath:
			c.serveJoin(w, r)
			return
		case peerListPath:
			c.servePeerList(w, r, svc)
			return
		case peerPoolsPath:
			c.servePeerPools(w, r, svc)
			return
		case peerEventsPath:
			c.servePeerEvents(w, r, svc)
			return
		}
		if r.URL.Path == "/readyz" {
			if why := *c.health.Load(); why != "" {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "{\"status\":\"not ready\",\"reason\":%q}\n", why)
				return
			}
		}
		fwd.ServeHTTP(w, r)
	})
}

// elsewhere is the E2B facade's Elsewhere: a request that names no
// sandbox by its path but turned out to be for id (a signed /files URL,
// which the facade has named id now) is forwarded when id is another
// node's.
func (c *clusterNode) elsewhere(w http.ResponseWriter, r *http.Request, id string) bool {
	if p, ok := c.node.Placement(id); !ok || p.Node == c.self || c.fwd == nil {
		return false
	}
	c.fwd.ServeHTTP(w, r)
	return true
}

// placer is the edges' Placer: the service places, and a create placed
// on another node goes there through the forwarding middleware, signed,
// so that it is not placed again.
func (c *clusterNode) placer(svc *service.Service) *router.Placer {
	return &router.Placer{
		Service: svc,
		Forward: func(w http.ResponseWriter, r *http.Request, n service.Node) {
			c.fwd.Forward(w, r, forward.Target{Node: n.ID, URL: n.URL})
		},
		Placed: func(r *http.Request) bool { _, ok := forward.FromNode(r); return ok },
	}
}

// peerSandboxes is the E2B facade's PeerSandboxes: the ids of the
// sandboxes the other nodes have (placed there, not lost), from the
// watch-fed directory.
func (c *clusterNode) peerSandboxes() []string {
	var ids []string
	for node := range c.node.PlacementNodes() {
		if node == c.self {
			continue
		}
		for _, p := range c.node.PlacementsOf(node) {
			if p.State != cluster.StateLost && p.State != cluster.StateDeleted {
				ids = append(ids, p.ID)
			}
		}
	}
	return ids
}

// run keeps the node's part going until ctx ends: headroom, health,
// failover and the relay of other nodes' events.
func (c *clusterNode) run(ctx context.Context, svc *service.Service, adm *admission.Controller) {
	var wg sync.WaitGroup
	wg.Go(func() { c.publishHeadroom(ctx, adm) })
	wg.Go(func() { c.watchHealth(ctx) })
	wg.Go(func() { c.relayEvents(ctx, svc) })
	wg.Go(func() { <-ctx.Done(); close(c.stopping) })
	c.fo.Run(ctx)
	wg.Wait()
}

// serveNodes answers GET /v1/cluster/nodes (admins): the live nodes, their
// API and SNI listener addresses and headroom, this node marked, and with
// ?owner= what that owner holds on each.
func (c *clusterNode) serveNodes(w http.ResponseWriter, r *http.Request, authn *auth.Authenticator) {
	w.Header().Set("Content-Type", "application/json")
	fail := func(status int, code, msg string) {
		writeError(w, status, code, msg, status == http.StatusServiceUnavailable)
	}
	p, err := authn.Authenticate(r.Context(), r)
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		fail(http.StatusUnauthorized, "unauthenticated", "a valid API token is required")
		return
	case err != nil:
		fail(http.StatusServiceUnavailable, "unavailable", "token lookup failed")
		return
	case !p.IsAdmin():
		fail(http.StatusForbidden, "permission_denied", "admins only")
		return
	case r.Method != http.MethodGet:
		w.Header().Set("Allow", http.MethodGet)
		fail(http.StatusMethodNotAllowed, "invalid_argument", "GET only")
		return
	}
	type usage struct {
		Sandboxes int64   `json:"sandboxes"`
		CPU       float64 `json:"cpu"`
		MemoryMB  int64   `json:"memory_mb"`
		DiskMB    int64   `json:"disk_mb"`
	}
	type node struct {
		ID           string `json:"id"`
		APIURL       string `json:"api_url"`
		TLSAddr      string `json:"tls_addr,omitempty"`
		Self         bool   `json:"self"`
		MilliCPU     int64  `json:"milli_cpu"`
		MemoryMB     int64  `json:"memory_mb"`
		FreeMilliCPU int64  `json:"free_milli_cpu"`
		FreeMemoryMB int64  `json:"free_memory_mb"`
		// OwnerUsage, with ?owner=, is what that owner holds on the node,
		// as the node last published it (what quotas count).
		OwnerUsage *usage `json:"owner_usage,omitempty"`
	}
	owner := r.URL.Query().Get("owner")
	items := []node{}
	for _, n := range c.node.Nodes() {
		item := node{ID: n.ID, APIURL: n.APIURL, TLSAddr: n.TLSAddr, Self: n.ID == c.self, MilliCPU: n.Headroom.MilliCPU,
			MemoryMB: n.Headroom.MemoryMB, FreeMilliCPU: n.Headroom.FreeMilliCPU, FreeMemoryMB: n.Headroom.FreeMemoryMB}
		if owner != "" {
			u := n.Usage[owner]
			item.OwnerUsage = &usage{Sandboxes: u.Sandboxes, CPU: float64(u.MilliCPU) / 1000, MemoryMB: u.MemoryMB, DiskMB: u.DiskMB}
		}
		items = append(items, item)
	}
	json.NewEncoder(w).Encode(map[string]any{"items": items})
}

// lostError is a call for a sandbox whose node was lost and that was not
// recreated.
type lostError struct{ p cluster.Placement }

func (e *lostError) Error() string {
	return fmt.Sprintf("sandbox %s was lost with its node %s", e.p.ID, e.p.Node)
}

// serveLost answers a call for a lost sandbox. To its owner (or an admin)
// an edge that says so (ref.SaysLost: the native API) says so: its
// destroy frees its keys (its name can be used again) and answers 204,
// anything else is 410 "lost". Everyone else, and the other edges, get
// what this node has of it: not found, in their shape.
func (c *clusterNode) serveLost(w http.ResponseWriter, r *http.Request, l locator, ref router.Ref, next http.Handler, p cluster.Placement) {
	who, ok := l.who(r)
	if !ok || (who.Owner != p.Owner && !who.Admin) || !ref.SaysLost {
		next.ServeHTTP(w, r)
		return
	}
	if ref.Destroy {
		for _, d := range p.Domains {
			host, _, _ := strings.Cut(d, ":")
			if err := c.node.ReleaseHostname(r.Context(), host, p.ID); err != nil {
				writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error(), true)
				return
			}
		}
		// A tombstone, not a release: the lost node may come back with its
		// copy, and must then know to destroy it.
		if err := c.node.Tombstone(r.Context(), p.ID, p.Node); err != nil && !errors.Is(err, cluster.ErrNotFound) {
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the cluster did not record the delete; retry", true)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeError(w, http.StatusGone, "lost", fmt.Sprintf("sandbox %s was lost with its node %s (it had no failover policy); DELETE it to free its name", p.ID, p.Node), false)
}

// writeError writes the native API's error body.
func writeError(w http.ResponseWriter, status int, code, msg string, retryable bool) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "retryable": retryable}})
}
