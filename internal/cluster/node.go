package cluster

import (
	"cmp"
	"context"
	"crypto/cipher"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
	"golang.org/x/time/rate"
)

// prefix is the root of every key sandboxd keeps in etcd. The version lets
// a later layout live beside this one during an upgrade.
const prefix = "/sandboxd/v1/"

// Key prefixes under [prefix].
const (
	nodesPrefix      = prefix + "nodes/"
	placementsPrefix = prefix + "placements/"
	namesPrefix      = prefix + "names/"
	hostnamesPrefix  = prefix + "hostnames/"
	idemPrefix       = prefix + "idem/"
	tokensPrefix     = prefix + "tokens/"
	tokenHashPrefix  = prefix + "tokenhash/"
)

const (
	defaultOpTimeout = 2 * time.Second
	defaultLeaseTTL  = 5 * time.Second
	// minSecret is the cluster secret's minimum length: 256 bits.
	minSecret = 32
	// headroomInterval is the least time between two puts of nodes/<id>
	// for a changed headroom: placement tolerates a second-old figure, and
	// every put is a raft round on every member.
	headroomInterval = time.Second
	// departedBuffer is Departed's capacity. A departure beyond it drops
	// the oldest unread one: the watch never waits on a slow reader.
	departedBuffer = 1024
	// retryBackoff is the wait between two attempts of a background loop
	// (re-grant, re-Get) that failed, so a cluster without quorum is not
	// spun on.
	retryBackoff = 500 * time.Millisecond
)

// Config is a node's membership in the cluster.
type Config struct {
	NodeID    string
	Endpoints []string    // etcd client URLs (https)
	TLS       *tls.Config // the node's etcd identity (TLSFiles.ClientConfig); required
	APIURL    string      // this node's API base URL, e.g. http://127.0.0.1:7071
	Secret    []byte      // the cluster secret (≥ 32 bytes): keys derived from it seal recovery specs
	Logger    *slog.Logger
	TLSAddr   string        // this node's SNI listener (host:port) for TLS exposures; "" for none (see SetTLSAddr)
	OpTimeout time.Duration // per etcd call; default 2 s
	LeaseTTL  time.Duration // membership lease; default 5 s (tests may pass 2 s)
}

// Headroom is a node's capacity and what is free of it.
type Headroom struct {
	MilliCPU     int64 `json:"milli_cpu"`
	MemoryMB     int64 `json:"memory_mb"`
	FreeMilliCPU int64 `json:"free_milli_cpu"`
	FreeMemoryMB int64 `json:"free_memory_mb"`
}

// NodeInfo is a live node as nodes/<id> describes it.
type NodeInfo struct {
	ID     string `json:"id"`
	APIURL string `json:"api_url"`
	// TLSAddr is where other nodes carry TLS connections for this node's
	// sandboxes (its SNI listener, host:port); empty when it has none.
	TLSAddr  string   `json:"tls_addr,omitempty"`
	Headroom Headroom `json:"headroom"`
	// Usage is what each owner holds on the node (quotas are the
	// cluster's: UsageElsewhere).
	Usage map[string]OwnerUsage `json:"usage,omitempty"`
}

// OwnerUsage is what one owner holds on a node: its sandboxes that hold
// capacity, and their CPU, memory and disk limits.
type OwnerUsage struct {
	Sandboxes int64 `json:"n"`
	MilliCPU  int64 `json:"cpu"`
	MemoryMB  int64 `json:"mem"`
	DiskMB    int64 `json:"disk,omitempty"`
}

// published is what nodes/<id> says of this node beyond its address; it
// is put again when it changes. usage is the JSON of the usage map
// (encoding/json sorts map keys), so that published compares.
type published struct {
	room    Headroom
	tlsAddr string
	usage   string
}

// Node is this daemon's membership in the cluster: its lease and nodes/
// key, the watch-fed directory of nodes, placements and hostnames, and the
// key transactions. It is safe for concurrent use.
type Node struct {
	cfg  Config
	cli  *clientv3.Client
	log  *slog.Logger
	aead cipher.AEAD

	ctx    context.Context // the node's lifetime; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	lease    clientv3.LeaseID
	headroom Headroom
	usage    map[string]OwnerUsage
	now      published // what nodes/<id> should say
	put      published // what it said when last put

	// missReads paces fetchToken's reads of etcd.
	missReads *rate.Limiter

	dirMu      sync.RWMutex
	nodes      map[string]NodeInfo
	placements map[string]Placement
	hostnames  map[string]string
	// tokens is tokenhash/ (hex hash → record), names is names/ (key →
	// id): authentication and name lookups on the request path read these,
	// never etcd.
	tokens map[string]tokenRecord
	names  map[string]string
	// templates is templates/ (FollowTemplates).
	templates templateDir

	departed chan string
}

// Open joins the cluster that cfg.Endpoints reach: it grants the
// membership lease, puts nodes/<id> under it, reads the nodes, placements
// and hostnames into the directory and starts the watches that keep it
// current, and keeps the lease alive until Close. A cluster that does not
// answer fails with ErrUnavailable (each step is bounded by OpTimeout).
//
// A lease that is lost (the node was cut off for longer than LeaseTTL) is
// granted again and nodes/<id> put again, with a warning: meanwhile the
// other nodes saw this node depart and may have taken over its placements,
// which the caller learns from the directory.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.NodeID == "" || strings.Contains(cfg.NodeID, "/") {
		return nil, fmt.Errorf("open cluster node: %w: node id %q", ErrInvalidArgument, cfg.NodeID)
	}
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("open cluster node: %w: no endpoints", ErrInvalidArgument)
	}
	if err := requireTLS(cfg.TLS); err != nil {
		return nil, fmt.Errorf("open cluster node: %w", err)
	}
	aead, err := sealer(cfg.Secret)
	if err != nil {
		return nil, fmt.Errorf("open cluster node: %w", err)
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = defaultOpTimeout
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = defaultLeaseTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("component", "cluster", "node", cfg.NodeID)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		DialTimeout: cfg.OpTimeout,
		Logger:      zapToSlog(log, zapcore.ErrorLevel, nil),
	})
	if err != nil {
		return nil, fmt.Errorf("open cluster node: %w", unavailable("dial "+strings.Join(cfg.Endpoints, ","), err))
	}
	lctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg: cfg, cli: cli, log: log, aead: aead,
		ctx: lctx, cancel: cancel,
		nodes:      map[string]NodeInfo{},
		placements: map[string]Placement{},
		hostnames:  map[string]string{},
		templates:  templateDir{records: map[string]TemplateRecord{}, holders: map[string]map[string]bool{}},
		departed:   make(chan string, departedBuffer),
		missReads:  rate.NewLimiter(missReadsPerSecond, missReadsPerSecond),
		now:        published{tlsAddr: cfg.TLSAddr},
	}
	if err := n.open(ctx); err != nil {
		cancel()
		n.wg.Wait()
		if lease := n.currentLease(); lease != 0 {
			// Best effort: without it nodes/<id> lingers for LeaseTTL.
			rctx, rcancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
			_, _ = cli.Revoke(rctx, lease)
			rcancel()
		}
		cli.Close()
		return nil, fmt.Errorf("open cluster node %s: %w", cfg.NodeID, err)
	}
	return n, nil
}

// open grants the lease, puts nodes/<id>, fills the directory and starts
// the background loops.
func (n *Node) open(ctx context.Context) error {
	if err := n.register(ctx); err != nil {
		return err
	}
	watches := []struct {
		prefix string
		reset  func([]*kv)
		apply  func(*kv, bool)
	}{
		{nodesPrefix, n.resetNodes, n.applyNode},
		{placementsPrefix, n.resetPlacements, n.applyPlacement},
		{hostnamesPrefix, n.resetHostnames, n.applyHostname},
		{tokenHashPrefix, n.resetTokens, n.applyToken},
		{namesPrefix, n.resetNames, n.applyName},
	}
	revs := make([]int64, len(watches))
	for i, w := range watches {
		rev, err := n.load(ctx, w.prefix, w.reset)
		if err != nil {
			return err
		}
		revs[i] = rev
	}
	for i, w := range watches {
		n.wg.Go(func() { n.follow(w.prefix, revs[i], w.reset, w.apply) })
	}
	n.wg.Go(n.keepAlive)
	n.wg.Go(n.putHeadroomLoop)
	return nil
}

// register grants a fresh membership lease and puts nodes/<id> under it.
func (n *Node) register(ctx context.Context) error {
	ctx, cancel := n.op(ctx)
	defer cancel()
	ttl := int64((n.cfg.LeaseTTL + time.Second - 1) / time.Second)
	g, err := n.cli.Grant(ctx, ttl)
	if err != nil {
		return unavailable("grant membership lease", err)
	}
	n.mu.Lock()
	st, usage := n.now, n.usage
	n.mu.Unlock()
	if err := n.putSelf(ctx, g.ID, st, usage); err != nil {
		// The lease expires by itself; revoking it is a courtesy.
		return err
	}
	n.mu.Lock()
	n.lease, n.put = g.ID, st
	n.mu.Unlock()
	return nil
}

// putSelf puts nodes/<id> with st and usage under lease.
func (n *Node) putSelf(ctx context.Context, lease clientv3.LeaseID, st published, usage map[string]OwnerUsage) error {
	v, err := json.Marshal(NodeInfo{ID: n.cfg.NodeID, APIURL: n.cfg.APIURL, TLSAddr: st.tlsAddr, Headroom: st.room, Usage: usage})
	if err != nil {
		return err
	}
	if _, err := n.cli.Put(ctx, nodesPrefix+n.cfg.NodeID, string(v), clientv3.WithLease(lease)); err != nil {
		return unknownOutcome("put "+nodesPrefix+n.cfg.NodeID, err)
	}
	return nil
}

// keepAlive keeps the membership lease alive and, when it is lost, grants
// a new one and puts nodes/<id> again, until the node closes.
func (n *Node) keepAlive() {
	for {
		n.mu.Lock()
		lease := n.lease
		n.mu.Unlock()
		ch, err := n.cli.KeepAlive(n.ctx, lease)
		if err == nil {
			for range ch {
			}
		}
		if n.ctx.Err() != nil {
			return
		}
		n.log.Warn("cluster membership lease lost; granting a new one", "lease", int64(lease), "err", err)
		for {
			err := n.register(n.ctx)
			if err == nil {
				n.log.Warn("cluster membership restored", "lease", int64(n.currentLease()))
				break
			}
			if !n.sleep(retryBackoff) {
				return
			}
		}
	}
}

func (n *Node) currentLease() clientv3.LeaseID {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lease
}

// putHeadroomLoop puts nodes/<id> again when the headroom changed, at most
// once per headroomInterval.
func (n *Node) putHeadroomLoop() {
	t := time.NewTicker(headroomInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.mu.Lock()
		st, put, usage, lease := n.now, n.put, n.usage, n.lease
		n.mu.Unlock()
		if st == put {
			continue
		}
		ctx, cancel := n.op(n.ctx)
		err := n.putSelf(ctx, lease, st, usage)
		cancel()
		if err != nil {
			n.log.Debug("put headroom", "err", err)
			continue // the next tick tries again
		}
		n.mu.Lock()
		if n.lease == lease {
			n.put = st
		}
		n.mu.Unlock()
	}
}

// sleep waits d or until the node closes; it reports whether to go on.
func (n *Node) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-n.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// op bounds one etcd call by OpTimeout.
func (n *Node) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, n.cfg.OpTimeout)
}

// Close stops the watches and the keepalive, and revokes the membership
// lease, so that other nodes see this node leave at once (a Close that
// cannot reach the cluster leaves the lease to expire: the node departs
// after LeaseTTL). It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.cancel()
		n.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.OpTimeout)
		defer cancel()
		if _, err := n.cli.Revoke(ctx, n.currentLease()); err != nil {
			n.closeErr = unavailable("revoke membership lease", err)
		}
		if err := n.cli.Close(); err != nil && n.closeErr == nil {
			n.closeErr = err
		}
	})
	return n.closeErr
}

// Stop ends the node's part without leaving the cluster: no revoke, so
// the lease runs out after LeaseTTL. A daemon that stops to restart uses
// it, so that coming back within LeaseTTL is no departure (no failover of
// its sandboxes). It is idempotent, and a later Close does nothing.
func (n *Node) Stop() { n.abandon() }

// abandon stops the node as a crash would: no revoke, the lease expires.
func (n *Node) abandon() {
	n.closeOnce.Do(func() {
		n.cancel()
		n.wg.Wait()
		n.cli.Close()
	})
}

// ID is this node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Client is the node's etcd client, for callers with needs beyond this
// package's (it closes with the node).
func (n *Node) Client() *clientv3.Client { return n.cli }

// SetHeadroom records this node's headroom; nodes/<id> carries it within
// about a second (puts are coalesced, at most one per second).
func (n *Node) SetHeadroom(h Headroom) {
	n.mu.Lock()
	n.headroom, n.now.room = h, h
	n.mu.Unlock()
}

// SetTLSAddr records this node's SNI listener address (host:port; "" for
// none); nodes/<id> carries it within about a second, like the headroom.
// Open publishes Config.TLSAddr until it is called.
func (n *Node) SetTLSAddr(addr string) {
	n.mu.Lock()
	n.now.tlsAddr = addr
	n.mu.Unlock()
}

// maxUsageOwners bounds the owners nodes/<id> lists (an etcd value is at
// most 1.5 MiB; an owner's entry is about 60 bytes).
const maxUsageOwners = 10000

// SetUsage records what each owner holds on this node; nodes/<id> carries
// it within about a second, as the headroom. Past maxUsageOwners owners
// the largest holders are kept.
func (n *Node) SetUsage(u map[string]OwnerUsage) {
	if len(u) > maxUsageOwners {
		owners := slices.SortedFunc(maps.Keys(u), func(a, b string) int {
			return cmp.Or(cmp.Compare(u[b].MemoryMB, u[a].MemoryMB), strings.Compare(a, b))
		})
		kept := make(map[string]OwnerUsage, maxUsageOwners)
		for _, o := range owners[:maxUsageOwners] {
			kept[o] = u[o]
		}
		n.log.Warn("cluster: too many owners to publish their usage; the smallest are left out (their quotas count this node less)", "owners", len(u))
		u = kept
	}
	key, _ := json.Marshal(u) // a map of strings to plain structs always encodes
	n.mu.Lock()
	n.usage, n.now.usage = u, string(key)
	n.mu.Unlock()
}

// UsageElsewhere is what owner holds on the other live nodes, as they
// last published it (within about a second). It answers from the
// watch-fed directory, without I/O.
func (n *Node) UsageElsewhere(owner string) OwnerUsage {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	var sum OwnerUsage
	for id, ni := range n.nodes {
		if id == n.cfg.NodeID {
			continue
		}
		u := ni.Usage[owner]
		sum.Sandboxes += u.Sandboxes
		sum.MilliCPU += u.MilliCPU
		sum.MemoryMB += u.MemoryMB
		sum.DiskMB += u.DiskMB
	}
	return sum
}

// Healthy reports whether the cluster answers a linearizable read within
// OpTimeout (a member without quorum cannot); ErrUnavailable otherwise.
func (n *Node) Healthy(ctx context.Context) error {
	ctx, cancel := n.op(ctx)
	defer cancel()
	_, err := n.cli.Get(ctx, nodesPrefix+n.cfg.NodeID, clientv3.WithCountOnly())
	return unavailable("health read", err)
}

// Departed delivers the ids of nodes whose nodes/ key was deleted (their
// lease expired or was revoked), never this node's own. The channel holds
// up to 1024 ids; past that the oldest unread id is dropped, so the watch
// never waits on the reader (a reader that falls that far behind should
// rescan [Node.Nodes] and the placements).
func (n *Node) Departed() <-chan string { return n.departed }

// Nodes returns the live nodes in the directory, this one included,
// sorted by id.
func (n *Node) Nodes() []NodeInfo {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	out := make([]NodeInfo, 0, len(n.nodes))
	for _, ni := range n.nodes {
		out = append(out, ni)
	}
	slices.SortFunc(out, func(a, b NodeInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Placement returns placement id from the directory (no etcd call: it
// answers during a quorum loss, with what was last seen).
func (n *Node) Placement(id string) (Placement, bool) {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	p, ok := n.placements[id]
	return clonePlacement(p), ok
}

// PlacementsOf returns the placements the directory shows on node,
// sorted by id.
func (n *Node) PlacementsOf(node string) []Placement {
	n.dirMu.RLock()
	var out []Placement
	for _, p := range n.placements {
		if p.Node == node {
			out = append(out, clonePlacement(p))
		}
	}
	n.dirMu.RUnlock()
	slices.SortFunc(out, func(a, b Placement) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// HostnameTarget returns the sandbox id that hostnames/<host> names, from
// the directory.
func (n *Node) HostnameTarget(host string) (string, bool) {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	id, ok := n.hostnames[host]
	return id, ok
}

func clonePlacement(p Placement) Placement {
	p.Spec = slices.Clone(p.Spec)
	p.Ports = slices.Clone(p.Ports)
	p.Domains = slices.Clone(p.Domains)
	return p
}

// PlacementNodes returns the set of nodes that some placement in the
// directory names (live or not).
func (n *Node) PlacementNodes() map[string]bool {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	out := map[string]bool{}
	for _, p := range n.placements {
		out[p.Node] = true
	}
	return out
}
