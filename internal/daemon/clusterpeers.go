package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
	// node that has not answered by then is left out.
	peerListTimeout = 5 * time.Second
	// maxPeerAnswer bounds one node's answer: a page of MaxListLimit
	// sandboxes, each within the API's bounds on tags, env and
	// annotations, is far smaller.
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
func (p peers) ListPeers(ctx context.Context, c service.Caller, f service.ListFilter) []service.Page {
	q, err := json.Marshal(peerQuery{Owner: c.Owner, Admin: c.Admin, Filter: f})
	if err != nil {
		p.c.logger.Error("cluster: encode a peer list", "err", err)
		return nil
	}
	query := url.Values{"q": {base64.RawURLEncoding.EncodeToString(q)}}.Encode()
	return askPeers[service.Page](ctx, p, peerListPath+"?"+query, func(string, *service.Page) {})
}

// PeerPools implements service.PeerLister.
func (p peers) PeerPools(ctx context.Context) []service.NodePools {
	return askPeers[service.NodePools](ctx, p, peerPoolsPath, func(node string, np *service.NodePools) { np.Node = node })
}

// askPeers asks every other live node at once for what uri answers, each
// answer bounded in time and size; a node that fails is logged and left
// out. set marks an answer with its node.
func askPeers[T any](ctx context.Context, p peers, uri string, set func(node string, v *T)) []T {
	ctx, cancel := context.WithTimeout(ctx, peerListTimeout)
	defer cancel()
	var (
		mu  sync.Mutex
		out []T
		wg  sync.WaitGroup
	)
	for _, n := range p.c.node.Nodes() {
		if n.ID == p.c.self {
			continue
		}
		wg.Go(func() {
			var v T
			if err := p.ask(ctx, n, uri, &v); err != nil {
				p.c.logger.Warn("cluster: a node did not answer; it is left out", "node", n.ID, "path", strings.SplitN(uri, "?", 2)[0], "err", err)
				return
			}
			set(n.ID, &v)
			mu.Lock()
			out = append(out, v)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// ask GETs uri of node n, signed, and decodes its JSON answer into v.
func (p peers) ask(ctx context.Context, n cluster.NodeInfo, uri string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(n.APIURL, "/")+uri, nil)
	if err != nil {
		return err
	}
	p.c.signer.Sign(req)
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

// peerOnly answers 404 to anything but a GET with a valid node MAC, and
// reports whether r is one.
func (c *clusterNode) peerOnly(w http.ResponseWriter, r *http.Request) bool {
	if _, ok := c.signer.Verify(r); !ok {
		http.NotFound(w, r)
		return false
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, "invalid_argument", "GET only", false)
		return false
	}
	return true
}

// servePeerPools answers another node's question for this node's pool.
func (c *clusterNode) servePeerPools(w http.ResponseWriter, r *http.Request, svc *service.Service) {
	if !c.peerOnly(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(service.NodePools{Node: c.self, Pools: svc.PoolStatus()})
}

// servePeerList answers another node's list with this node's page.
func (c *clusterNode) servePeerList(w http.ResponseWriter, r *http.Request, svc *service.Service) {
	if !c.peerOnly(w, r) {
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
