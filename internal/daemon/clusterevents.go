package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster/forward"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Lifecycle events (service.Subscribe, behind the Daytona event stream)
// are the cluster's: while a node has subscribers, it streams every other
// live node's events (GET peerEventsPath, node MAC only) and relays them to
// its own subscribers; with none, it streams nothing and the other nodes
// pay nothing. A node streams only its own sandboxes' events, never
// relayed ones, so nothing echoes. docs/cluster.md, "Events".
const (
	peerEventsPath = "/v1/cluster/peer/events"
	// relayRefresh is how often the streamed nodes are matched to the
	// live ones; relayRetry is the wait before a broken stream is opened
	// again.
	relayRefresh = 2 * time.Second
	relayRetry   = time.Second
	// maxEventLine bounds one streamed event.
	maxEventLine = 1 << 20
)

// servePeerEvents streams this node's events to another node, one JSON
// object a line, until either side ends it (a receiver that falls behind
// is dropped, and opens the stream again).
func (c *clusterNode) servePeerEvents(w http.ResponseWriter, r *http.Request, svc *service.Service) {
	if !c.peerOnly(w, r) {
		return
	}
	sub := svc.SubscribeAll()
	defer sub.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	enc := json.NewEncoder(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.stopping:
			return
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			if enc.Encode(ev) != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// relayEvents keeps a stream open from every other live node while this
// node has subscribers, until ctx ends.
func (c *clusterNode) relayEvents(ctx context.Context, svc *service.Service) {
	client := &http.Client{Transport: forward.NewTransport()}
	streams := map[string]context.CancelFunc{} // node id → its stream's cancel
	stopAll := func() {
		for id, cancel := range streams {
			cancel()
			delete(streams, id)
		}
	}
	defer stopAll()
	t := time.NewTicker(relayRefresh)
	defer t.Stop()
	for {
		on, changed := svc.Subscribed()
		if !on {
			stopAll()
		} else {
			live := map[string]bool{}
			for _, n := range c.node.Nodes() {
				if n.ID == c.self {
					continue
				}
				live[n.ID] = true
				if _, ok := streams[n.ID]; !ok {
					sctx, cancel := context.WithCancel(ctx)
					streams[n.ID] = cancel
					go c.relayFrom(sctx, client, svc, n.ID, n.APIURL)
				}
			}
			for id, cancel := range streams {
				if !live[id] {
					cancel()
					delete(streams, id)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
	}
}

// relayFrom relays node's event stream to this node's subscribers, opening
// it again when it breaks, until ctx ends.
func (c *clusterNode) relayFrom(ctx context.Context, client *http.Client, svc *service.Service, node, apiURL string) {
	for ctx.Err() == nil {
		if err := c.streamFrom(ctx, client, svc, apiURL); err != nil && ctx.Err() == nil {
			c.logger.Debug("cluster: event stream broke; opening it again", "node", node, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(relayRetry):
		}
	}
}

func (c *clusterNode) streamFrom(ctx context.Context, client *http.Client, svc *service.Service, apiURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(apiURL, "/")+peerEventsPath, nil)
	if err != nil {
		return err
	}
	c.signer.Sign(req)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	for sc.Scan() {
		var ev service.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("decode an event: %w", err)
		}
		svc.Relay(ev)
	}
	return sc.Err()
}
