package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	// heartbeatEvery is how often a stream with no event carries an empty
	// line; a reader that hears nothing for relayIdle (a half-open
	// connection) opens it again. writeTimeout bounds one write of the
	// stream (a reader that stopped reading).
	heartbeatEvery = 10 * time.Second
	relayIdle      = 3 * heartbeatEvery
	writeTimeout   = 10 * time.Second
	// maxEventLine bounds one streamed event.
	maxEventLine = 1 << 20
)

// servePeerEvents streams this node's events to another node, one JSON
// object a line (an empty line every heartbeatEvery without one), until
// either side ends it: a receiver that falls behind is dropped and opens
// the stream again. A node holds one stream: its new one ends its old.
func (c *clusterNode) servePeerEvents(w http.ResponseWriter, r *http.Request, svc *service.Service) {
	from, ok := c.peerOnly(w, r)
	if !ok {
		return
	}
	replaced := c.holdStream(from)
	defer c.releaseStream(from, replaced)
	sub := svc.SubscribeAll()
	defer sub.Close()
	rc := http.NewResponseController(w)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := w.Write(b)
		return err == nil && rc.Flush() == nil
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if !write(nil) {
		return
	}
	beat := time.NewTicker(heartbeatEvery)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.stopping:
			return
		case <-replaced:
			return
		case <-beat.C:
			if !write([]byte("\n")) {
				return
			}
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			b, err := json.Marshal(ev)
			if err != nil || !write(append(b, '\n')) {
				return
			}
		}
	}
}

// holdStream makes node's new event stream its only one: the one it held
// before ends. The returned channel is closed when a newer one replaces
// this one.
func (c *clusterNode) holdStream(node string) chan struct{} {
	c.streamsMu.Lock()
	defer c.streamsMu.Unlock()
	if c.streams == nil {
		c.streams = map[string]chan struct{}{}
	}
	if old, ok := c.streams[node]; ok {
		close(old)
	}
	mine := make(chan struct{})
	c.streams[node] = mine
	return mine
}

// releaseStream forgets node's stream mine, unless a newer one took its
// place.
func (c *clusterNode) releaseStream(node string, mine chan struct{}) {
	c.streamsMu.Lock()
	defer c.streamsMu.Unlock()
	if c.streams[node] == mine {
		delete(c.streams, node)
	}
}

// relayEvents keeps a stream open from every other live node while this
// node has subscribers, until ctx ends.
func (c *clusterNode) relayEvents(ctx context.Context, svc *service.Service) {
	client := &http.Client{Transport: forward.NewTransport()}
	streams := map[string]context.CancelFunc{} // node id and API URL → its stream's cancel
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
				key := n.ID + " " + n.APIURL // a node back at another address is streamed there
				live[key] = true
				if _, ok := streams[key]; !ok {
					sctx, cancel := context.WithCancel(ctx)
					streams[key] = cancel
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

// streamFrom reads one event stream of the node at apiURL until it ends,
// or until it has been silent for relayIdle (a half-open connection).
func (c *clusterNode) streamFrom(ctx context.Context, client *http.Client, svc *service.Service, apiURL string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(relayIdle, cancel)
	defer idle.Stop()
	req, err := c.peerRequest(ctx, apiURL, peerEventsPath)
	if err != nil {
		return err
	}
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
		idle.Reset(relayIdle)
		if len(sc.Bytes()) == 0 {
			continue // a heartbeat
		}
		var ev service.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("decode an event: %w", err)
		}
		svc.Relay(ev)
	}
	return sc.Err()
}
