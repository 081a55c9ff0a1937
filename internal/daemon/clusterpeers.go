package daemon

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/cluster/forward"
	"github.com/sandboxd/sandboxd/internal/service"
)

// A listing in cluster mode is the cluster's (service.List): the node
// that is asked lists its own page and asks every other live node for
// theirs, here, and merges them; GET /v1/pools shows every node's pool
// the same way. docs/cluster.md, "Listings".
const (
	// peerListPath and peerPoolsPath are where a node answers another
	// node's list and question for its pool. Only a request with a valid
	// node MAC reaches them; to anyone else they do not exist.
	peerListPath  = "/v1/cluster/peer/sandboxes"
	peerPoolsPath = "/v1/cluster/peer/pools"
	// peerListTimeout bounds one call's questions to the other nodes: a
	// node that has not answered by then failed (a list answers 503).
	peerListTimeout = 5 * time.Second
	// maxPeerAnswer bounds the memory one node's answer may take here. A
	// page of sandboxes with the largest env the API allows could pass
	// it; such a list fails (503) rather than hold gigabytes, and a
	// smaller limit pages through.
	maxPeerAnswer = 64 << 20
)

// peerQuery is a peer list's question. It travels in the request URI,
// which the node MAC covers (the body is not covered, see package
// forward): a captured request replayed with another caller or filter
// fails the MAC.
type peerQuery struct {
	Owner  string             `json:"owner"`
	Admin  bool               `json:"admin"`
	Filter service.ListFilter `json:"filter"`
}

// peers is the service's PeerLister in cluster mode.
type peers struct {
	c      *clusterNode
	client *http.Client
}

// peerLister is the service's PeerLister: nil (no interface value) on a
// single node.
func (d *Daemon) peerLister() service.PeerLister {
	if d.cluster == nil {
		return nil
	}
	return peers{c: d.cluster, client: &http.Client{Transport: forward.NewTransport()}}
}

// ListPeers implements service.PeerLister.
func (p peers) ListPeers(ctx context.Context, c service.Caller, f service.ListFilter) ([]service.Page, error) {
	q, err := json.Marshal(peerQuery{Owner: c.Owner, Admin: c.Admin, Filter: f})
	if err != nil {
		return nil, fmt.Errorf("encode a peer list: %w", err)
	}
	query := url.Values{"q": {base64.RawURLEncoding.EncodeToString(q)}}.Encode()
	pages, failed := askPeers[service.Page](ctx, p, peerListPath+"?"+query, func(string, *service.Page) {})
	if len(failed) > 0 {
		return nil, fmt.Errorf("node %s did not answer the list; retry", strings.Join(failed, ", "))
	}
	return pages, nil
}

// PeerPools implements service.PeerLister: the nodes that answered (an
// admin's view, which may show fewer nodes than there are).
func (p peers) PeerPools(ctx context.Context) []service.NodePools {
	pools, _ := askPeers[service.NodePools](ctx, p, peerPoolsPath, func(node string, np *service.NodePools) { np.Node = node })
	return pools
}

// askPeers asks every other live node at once for what uri answers, each
// answer bounded in time and size; it returns the answers and the nodes
// that failed (logged). set marks an answer with its node.
func askPeers[T any](ctx context.Context, p peers, uri string, set func(node string, v *T)) (answers []T, failed []string) {
	ctx, cancel := context.WithTimeout(ctx, peerListTimeout)
	defer cancel()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, n := range p.c.node.Nodes() {
		if n.ID == p.c.self {
			continue
		}
		wg.Go(func() {
			var v T
			err := p.ask(ctx, n, uri, &v)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				p.c.logger.Warn("cluster: a node did not answer", "node", n.ID, "path", strings.SplitN(uri, "?", 2)[0], "err", err)
				failed = append(failed, n.ID)
				return
			}
			set(n.ID, &v)
			answers = append(answers, v)
		})
	}
	wg.Wait()
	slices.Sort(failed)
	return answers, failed
}

// ask GETs uri of node n, signed, and decodes its JSON answer into v.
func (p peers) ask(ctx context.Context, n cluster.NodeInfo, uri string, v any) error {
	req, err := p.c.peerRequest(ctx, n.APIURL, uri)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxPeerAnswer)).Decode(v); err != nil {
		return fmt.Errorf("decode its answer: %w", err)
	}
	return nil
}

// peerRequest is a signed GET of uri on the node at apiURL, made unique by
// a nonce in its query (the MAC covers it): every peer request has a MAC
// of its own, so that peerOnly can refuse one seen before.
func (c *clusterNode) peerRequest(ctx context.Context, apiURL, uri string) (*http.Request, error) {
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(apiURL, "/")+uri+sep+"nonce="+rand.Text(), nil)
	if err != nil {
		return nil, err
	}
	c.signer.Sign(req)
	return req, nil
}

// peerOnly answers 404 to anything but a GET with a valid node MAC seen
// for the first time, and reports whether r is one (and from which node).
// What the peer endpoints answer is every tenant's, so a captured peer
// request must not work twice: its MAC is remembered for as long as it
// could verify (macs).
func (c *clusterNode) peerOnly(w http.ResponseWriter, r *http.Request) (from string, ok bool) {
	from, ok = c.signer.Verify(r)
	if !ok || !c.macs.first(from+" "+r.Header.Get(forward.HeaderAuth), time.Now()) {
		http.NotFound(w, r)
		return "", false
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, "invalid_argument", "GET only", false)
		return "", false
	}
	return from, true
}

// macCache remembers the node MACs the peer endpoints accepted, for twice
// forward.MaxSkew (a MAC older than MaxSkew no longer verifies).
type macCache struct {
	mu     sync.Mutex
	seen   map[string]time.Time
	pruned time.Time
}

// first records key and reports whether it was not recorded yet.
func (m *macCache) first(key string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[string]time.Time{}
	}
	if now.Sub(m.pruned) > time.Second {
		for k, t := range m.seen {
			if now.Sub(t) > 2*forward.MaxSkew {
				delete(m.seen, k)
			}
		}
		m.pruned = now
	}
	if _, ok := m.seen[key]; ok {
		return false
	}
	m.seen[key] = now
	return true
}

// servePeerPools answers another node's question for this node's pool.
func (c *clusterNode) servePeerPools(w http.ResponseWriter, r *http.Request, svc *service.Service) {
	if _, ok := c.peerOnly(w, r); !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(service.NodePools{Node: c.self, Pools: svc.PoolStatus()})
}

// servePeerList answers another node's list with this node's page.
func (c *clusterNode) servePeerList(w http.ResponseWriter, r *http.Request, svc *service.Service) {
	if _, ok := c.peerOnly(w, r); !ok {
		return
	}
	var q peerQuery
	raw, err := base64.RawURLEncoding.DecodeString(r.URL.Query().Get("q"))
	if err == nil {
		err = json.Unmarshal(raw, &q)
	}
	if err != nil || (q.Owner == "" && !q.Admin) {
		writeError(w, http.StatusBadRequest, "invalid_argument", "q: not a peer query", false)
		return
	}
	items, next, err := svc.ListLocal(r.Context(), service.Caller{Owner: q.Owner, Admin: q.Admin}, q.Filter)
	switch {
	case errors.Is(err, service.ErrInvalidArgument):
		writeError(w, http.StatusBadRequest, "invalid_argument", err.Error(), false)
		return
	case err != nil:
		c.logger.Error("cluster: answer a peer list", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "this node cannot list its sandboxes right now", true)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(service.Page{Items: items, Next: next})
}
