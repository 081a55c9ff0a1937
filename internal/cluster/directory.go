package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The directory is this node's copy of nodes/, placements/ and hostnames/:
// one map per prefix under dirMu, filled by a Get and kept current by a
// Watch from the Get's revision + 1. A watch that ends (compaction, a
// member that lost its leader, a cancelled stream) is replaced by a fresh
// Get and a new watch; until the Get succeeds the directory keeps what it
// last saw, so reads from it go on answering during a quorum loss.

type kv = mvccpb.KeyValue

// load reads every key under prefix, hands them to reset, and returns the
// revision the read saw.
func (n *Node) load(ctx context.Context, prefix string, reset func([]*kv)) (int64, error) {
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, unavailable("get "+prefix, err)
	}
	reset(resp.Kvs)
	return resp.Header.Revision, nil
}

// follow watches prefix from rev + 1, applying each event, and reloads
// and re-watches whenever the watch ends, until the node closes.
func (n *Node) follow(prefix string, rev int64, reset func([]*kv), apply func(*kv, bool)) {
	for {
		// WithRequireLeader ends the watch when its member loses the
		// leader, rather than leaving it silent through a partition.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(n.ctx))
		wch := n.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		var werr error
		for resp := range wch {
			if err := resp.Err(); err != nil {
				werr = err
				break
			}
			for _, ev := range resp.Events {
				apply(ev.Kv, ev.Type == clientv3.EventTypeDelete)
			}
		}
		cancel()
		if n.ctx.Err() != nil {
			return
		}
		n.log.Debug("cluster watch ended; reloading", "prefix", prefix, "err", werr)
		for {
			if !n.sleep(retryBackoff) {
				return
			}
			r, err := n.load(n.ctx, prefix, reset)
			if err == nil {
				rev = r
				break
			}
			if !errors.Is(err, ErrUnavailable) {
				n.log.Warn("cluster directory reload", "prefix", prefix, "err", err)
			}
		}
	}
}

func (n *Node) resetNodes(kvs []*kv) {
	fresh := make(map[string]NodeInfo, len(kvs))
	for _, kv := range kvs {
		if ni, ok := n.decodeNode(kv); ok {
			fresh[ni.ID] = ni
		}
	}
	n.dirMu.Lock()
	var gone []string
	for id := range n.nodes {
		if _, ok := fresh[id]; !ok {
			gone = append(gone, id)
		}
	}
	n.nodes = fresh
	n.dirMu.Unlock()
	for _, id := range gone {
		n.depart(id)
	}
}

func (n *Node) applyNode(kv *kv, deleted bool) {
	id := strings.TrimPrefix(string(kv.Key), nodesPrefix)
	if deleted {
		n.dirMu.Lock()
		_, had := n.nodes[id]
		delete(n.nodes, id)
		n.dirMu.Unlock()
		if had {
			n.depart(id)
		}
		return
	}
	if ni, ok := n.decodeNode(kv); ok {
		n.dirMu.Lock()
		n.nodes[id] = ni
		n.dirMu.Unlock()
	}
}

func (n *Node) decodeNode(kv *kv) (NodeInfo, bool) {
	var ni NodeInfo
	if err := json.Unmarshal(kv.Value, &ni); err != nil {
		n.log.Warn("cluster: undecodable node key", "key", string(kv.Key), "err", err)
		return NodeInfo{}, false
	}
	ni.ID = strings.TrimPrefix(string(kv.Key), nodesPrefix)
	return ni, true
}

// depart reports node id on Departed, dropping the oldest unread id when
// the channel is full. Only the nodes watch calls it, so there is one
// sender.
func (n *Node) depart(id string) {
	if id == n.cfg.NodeID {
		return
	}
	for {
		select {
		case n.departed <- id:
			return
		default:
		}
		select {
		case old := <-n.departed:
			n.log.Warn("cluster: departed channel full; dropping the oldest", "node", old)
		default:
		}
	}
}

func (n *Node) resetPlacements(kvs []*kv) {
	fresh := make(map[string]Placement, len(kvs))
	for _, kv := range kvs {
		if p, ok := n.decodePlacement(kv); ok {
			fresh[p.ID] = p
		}
	}
	n.dirMu.Lock()
	n.placements = fresh
	n.dirMu.Unlock()
}

func (n *Node) applyPlacement(kv *kv, deleted bool) {
	id := strings.TrimPrefix(string(kv.Key), placementsPrefix)
	if deleted {
		n.dirMu.Lock()
		delete(n.placements, id)
		n.dirMu.Unlock()
		return
	}
	if p, ok := n.decodePlacement(kv); ok {
		n.dirMu.Lock()
		n.placements[id] = p
		n.dirMu.Unlock()
	}
}

func (n *Node) decodePlacement(kv *kv) (Placement, bool) {
	p, err := decodePlacement(kv)
	if err != nil {
		n.log.Warn("cluster: undecodable placement", "key", string(kv.Key), "err", err)
		return Placement{}, false
	}
	return p, true
}

func (n *Node) resetHostnames(kvs []*kv) {
	fresh := refs(kvs, hostnamesPrefix)
	n.dirMu.Lock()
	n.hostnames = fresh
	n.dirMu.Unlock()
}

func (n *Node) applyHostname(kv *kv, deleted bool) {
	n.dirMu.Lock()
	defer n.dirMu.Unlock()
	applyRef(n.hostnames, hostnamesPrefix, kv, deleted)
}

// refs maps each key of kvs, without prefix, to the sandbox its value
// names (names/ and hostnames/ hold refs); undecodable values are left out.
func refs(kvs []*kv, prefix string) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		if id, err := decodeRef(kv.Value); err == nil {
			m[strings.TrimPrefix(string(kv.Key), prefix)] = id
		}
	}
	return m
}

// applyRef applies one watch event of a ref prefix to m (under dirMu).
func applyRef(m map[string]string, prefix string, kv *kv, deleted bool) {
	k := strings.TrimPrefix(string(kv.Key), prefix)
	if deleted {
		delete(m, k)
		return
	}
	if id, err := decodeRef(kv.Value); err == nil {
		m[k] = id
	}
}

func (n *Node) resetTokens(kvs []*kv) {
	fresh := make(map[string]tokenRecord, len(kvs))
	for _, kv := range kvs {
		var tr tokenRecord
		if json.Unmarshal(kv.Value, &tr) == nil {
			fresh[strings.TrimPrefix(string(kv.Key), tokenHashPrefix)] = tr
		}
	}
	n.dirMu.Lock()
	n.tokens = fresh
	n.dirMu.Unlock()
}

func (n *Node) applyToken(kv *kv, deleted bool) {
	h := strings.TrimPrefix(string(kv.Key), tokenHashPrefix)
	n.dirMu.Lock()
	defer n.dirMu.Unlock()
	if deleted {
		delete(n.tokens, h)
		return
	}
	var tr tokenRecord
	if json.Unmarshal(kv.Value, &tr) == nil {
		n.tokens[h] = tr
	}
}

func (n *Node) resetNames(kvs []*kv) {
	fresh := refs(kvs, namesPrefix)
	n.dirMu.Lock()
	n.names = fresh
	n.dirMu.Unlock()
}

func (n *Node) applyName(kv *kv, deleted bool) {
	n.dirMu.Lock()
	defer n.dirMu.Unlock()
	applyRef(n.names, namesPrefix, kv, deleted)
}

// token is the directory's record of a token hash.
func (n *Node) token(hexHash string) (tokenRecord, bool) {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	tr, ok := n.tokens[hexHash]
	return tr, ok
}

// missReadsPerSecond bounds fetchToken's reads of etcd (a burst of as
// many).
const missReadsPerSecond = 50

// fetchToken reads tokenhash/<hexHash> from etcd (a linearizable read),
// for a token the directory does not have yet. It reports false when the
// key does not exist, the read failed, or the node spent its read budget
// (missReadsPerSecond). The directory is left to the watch, which also
// delivers revocations in order.
func (n *Node) fetchToken(ctx context.Context, hexHash string) (tokenRecord, bool) {
	if !n.missReads.Allow() {
		return tokenRecord{}, false
	}
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Get(ctx, tokenHashPrefix+hexHash)
	if err != nil || len(resp.Kvs) == 0 {
		return tokenRecord{}, false
	}
	var tr tokenRecord
	if json.Unmarshal(resp.Kvs[0].Value, &tr) != nil {
		return tokenRecord{}, false
	}
	return tr, true
}

// nameTarget is the directory's id of owner's name.
func (n *Node) nameTarget(owner, name string) (string, bool) {
	n.dirMu.RLock()
	defer n.dirMu.RUnlock()
	id, ok := n.names[strings.TrimPrefix(nameKey(owner, name), namesPrefix)]
	return id, ok
}
