package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Placement states and failover policies.
const (
	StateCreating = "creating" // claimed; the owner's create chain (or a failover's recreate) is running
	StateRunning  = "running"  // the owner serves it
	StateLost     = "lost"     // its node departed and it was not recreated
	StateDeleted  = "deleted"  // lost, then deleted by its owner: its name is free, and its node destroys its copy when it returns

	FailoverNone     = ""         // a departed node's sandbox becomes lost
	FailoverRecreate = "recreate" // a departed node's sandbox is recreated elsewhere
)

// updateAttempts bounds the read-modify-write retries of UpdatePlacement
// and ReleasePlacement when the placement changes between the read and the
// write: a placement has one owner, so more than a couple of losses in a
// row means something is wrong.
const updateAttempts = 5

// Placement is where a sandbox lives, and what another node needs to
// recreate it: placements/<id>.
type Placement struct {
	ID       string       `json:"id"`                 // sandbox id
	Node     string       `json:"node"`               // owning node id
	Owner    string       `json:"owner"`              // tenant
	Name     string       `json:"name,omitempty"`     // "" when unnamed
	State    string       `json:"state"`              // "creating", "running", "lost"
	Failover string       `json:"failover,omitempty"` // "" (none) or "recreate"
	Spec     []byte       `json:"spec,omitempty"`     // sealed recovery spec (opaque here; Seal/Open)
	Ports    []PortIntent `json:"ports,omitempty"`
	Domains  []string     `json:"domains,omitempty"`
	// Key is the idem/ key (IdemKey) of the keyed create that made the
	// sandbox, "" for none: its binding names the sandbox from the claim
	// on, and moves with it (TakeOver), so that a retry of the create
	// after a failover finds it.
	Key string `json:"key,omitempty"`
	// Template is the template the sandbox was made from, "" for none:
	// a template in use anywhere is not deleted (TemplateUsers).
	Template string `json:"template,omitempty"`
	// PortHosts says the owner serves every port of the sandbox by its
	// preview host, exposed or not (an E2B sandbox): another node's HTTPS
	// listener may then end TLS for any of them and forward the request.
	PortHosts bool  `json:"portHosts,omitempty"`
	Revision  int64 `json:"-"` // etcd ModRevision when read (ignored on write)
}

// PortIntent is a port the sandbox exposes, to be exposed again after a
// failover.
type PortIntent struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Public   bool   `json:"public,omitempty"`
}

// ref is the value of names/ and hostnames/ keys: the sandbox they name.
// Fencing compares these bytes, so encodeRef must stay deterministic.
type ref struct {
	ID string `json:"id"`
}

func encodeRef(id string) string {
	b, _ := json.Marshal(ref{ID: id}) // a struct of one string: never fails
	return string(b)
}

func decodeRef(b []byte) (string, error) {
	var r ref
	if err := json.Unmarshal(b, &r); err != nil {
		return "", err
	}
	return r.ID, nil
}

// Binding is the value of idem/ keys: the node that took the first
// attempt of a keyed create, and, once that create has claimed its
// placement, the sandbox it made. Fencing compares these bytes, so
// encodeBinding must stay deterministic.
type Binding struct {
	Node string `json:"node"`
	ID   string `json:"id,omitempty"`
}

func encodeBinding(b Binding) string {
	v, _ := json.Marshal(b) // a struct of two strings: never fails
	return string(v)
}

// IdemKey is the etcd key of an idempotency key: idem/<scope>/<owner>/
// <hex sha256(key)>.
func IdemKey(scope, owner, key string) string {
	sum := sha256.Sum256([]byte(key))
	return idemPrefix + scope + "/" + url.PathEscape(owner) + "/" + hex.EncodeToString(sum[:])
}

// bindingOps are what a placement transaction does to its key's binding
// (none when key is ""): when it holds exactly from, it becomes to, on its
// own lease (the binding keeps its replay TTL). A binding that says
// anything else is left as it is.
func bindingOps(key string, from, to Binding) []clientv3.Op {
	if key == "" || !strings.HasPrefix(key, idemPrefix) {
		return nil
	}
	return []clientv3.Op{clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", encodeBinding(from))},
		[]clientv3.Op{clientv3.OpPut(key, encodeBinding(to), clientv3.WithIgnoreLease())}, nil)}
}

func decodePlacement(kv *kv) (Placement, error) {
	var p Placement
	if err := json.Unmarshal(kv.Value, &p); err != nil {
		return Placement{}, err
	}
	p.ID = strings.TrimPrefix(string(kv.Key), placementsPrefix)
	p.Revision = kv.ModRevision
	return p, nil
}

func placementKey(id string) string  { return placementsPrefix + id }
func hostnameKey(host string) string { return hostnamesPrefix + host }

// nameKey escapes owner and name, so that neither can reach into the
// other's part of the key ("a/b" + "c" is not "a" + "b/c").
func nameKey(owner, name string) string {
	return namesPrefix + url.PathEscape(owner) + "/" + url.PathEscape(name)
}

// segment checks that s can be one key segment: not empty, no "/".
func segment(what, s string) error {
	if s == "" || strings.Contains(s, "/") {
		return fmt.Errorf("%w: %s %q", ErrInvalidArgument, what, s)
	}
	return nil
}

// ClaimPlacement creates placements/<id> and, when p.Name is set,
// names/<owner>/<name> naming p.ID, in one transaction that writes only if
// both are absent. When p.Key is set and its binding names p.Node without
// a sandbox, the same transaction makes it name p.ID. A name another sandbox holds is ErrNameTaken; a
// placement of p.ID held by another node (or for another owner or name) is
// ErrConflict. A retry of a claim that succeeded (same id, node, owner and
// name) is nil. An empty p.State is written as "creating". Failure modes:
// ErrUnavailable (no quorum, OpTimeout passed; the claim may have been
// applied: retry it, or release it).
func (n *Node) ClaimPlacement(ctx context.Context, p Placement) error {
	if err := segment("sandbox id", p.ID); err != nil {
		return fmt.Errorf("claim placement: %w", err)
	}
	if p.Node == "" || p.Owner == "" {
		return fmt.Errorf("claim placement %s: %w: node and owner are required", p.ID, ErrInvalidArgument)
	}
	if p.State == "" {
		p.State = StateCreating
	}
	val, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("claim placement %s: %w", p.ID, err)
	}
	pk := placementKey(p.ID)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(pk), "=", 0)}
	then := []clientv3.Op{clientv3.OpPut(pk, string(val))}
	els := []clientv3.Op{clientv3.OpGet(pk)}
	if p.Name != "" {
		nk := nameKey(p.Owner, p.Name)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(nk), "=", 0))
		then = append(then, clientv3.OpPut(nk, encodeRef(p.ID)))
		els = append(els, clientv3.OpGet(nk))
	}
	then = append(then, bindingOps(p.Key, Binding{Node: p.Node}, Binding{Node: p.Node, ID: p.ID})...)
	if p.Template != "" {
		// Made from a template: only while its record exists, and the
		// template is in use (DeleteTemplate refuses) until the release.
		if err := segment("template id", p.Template); err != nil {
			return fmt.Errorf("claim placement %s: %w", p.ID, err)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(tplRecordKey(p.Template)), ">", 0))
		then = append(then, clientv3.OpPut(tplUseKey(p.Template, p.ID), ""))
		els = append(els, clientv3.OpGet(tplRecordKey(p.Template), clientv3.WithCountOnly()))
	}
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		return unknownOutcome("claim placement "+p.ID, err)
	}
	if resp.Succeeded {
		return nil
	}
	if p.Template != "" && resp.Responses[len(resp.Responses)-1].GetResponseRange().Count == 0 {
		return fmt.Errorf("claim placement %s: template %s: %w", p.ID, p.Template, ErrTemplateGone)
	}
	if p.Name != "" {
		kvs := resp.Responses[1].GetResponseRange().Kvs
		if len(kvs) == 0 {
			// The placement exists and the name is free: not our claim,
			// which writes both.
			return fmt.Errorf("claim placement %s: %w: the placement exists without its name", p.ID, ErrConflict)
		}
		if id, _ := decodeRef(kvs[0].Value); id != p.ID {
			return fmt.Errorf("claim placement %s: name %q of %s: %w", p.ID, p.Name, p.Owner, ErrNameTaken)
		}
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("claim placement %s: %w: the name names it but the placement is absent", p.ID, ErrConflict)
	}
	cur, err := decodePlacement(kvs[0])
	if err != nil {
		return fmt.Errorf("claim placement %s: %w: undecodable placement: %w", p.ID, ErrConflict, err)
	}
	if cur.Node != p.Node || cur.Owner != p.Owner || cur.Name != p.Name {
		return fmt.Errorf("claim placement %s: %w: held by node %s", p.ID, ErrConflict, cur.Node)
	}
	return nil
}

// ReleasePlacement deletes placements/<id> and its names/ key, the name
// only while it still names id (fenced), in one transaction that holds
// only if the placement has not changed since it was read (retried a few
// times otherwise; ErrConflict if it keeps changing). An absent placement
// is nil: releasing is idempotent. It does not check which node owns the
// placement (ReleasePlacementOf does). Failure modes: ErrUnavailable (the
// release may have been applied: retry).
func (n *Node) ReleasePlacement(ctx context.Context, id string) error {
	return n.ReleasePlacementOf(ctx, id, "")
}

// ReleasePlacementOf is ReleasePlacement, done only while the placement
// names node (any node when node is ""): the check and the delete are one
// transaction, so a node that lost a sandbox to a failover, however stale
// its directory, never releases the new owner's placement or name. A
// placement another node holds is left, and nil is returned.
func (n *Node) ReleasePlacementOf(ctx context.Context, id, node string) error {
	if err := segment("sandbox id", id); err != nil {
		return fmt.Errorf("release placement: %w", err)
	}
	pk := placementKey(id)
	for range updateAttempts {
		cur, ok, err := n.getPlacement(ctx, id)
		if err != nil {
			return fmt.Errorf("release placement: %w", err)
		}
		if !ok || (node != "" && cur.Node != node) {
			return nil
		}
		// The key's binding forgets the sandbox: a retry of its create
		// makes another one.
		ops := append([]clientv3.Op{clientv3.OpDelete(pk)}, bindingOps(cur.Key, Binding{Node: cur.Node, ID: id}, Binding{Node: cur.Node})...)
		ok, err = n.changePlacement(ctx, cur, ops...)
		if err != nil {
			return unknownOutcome("release placement "+id, err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("release placement %s: %w: it kept changing", id, ErrConflict)
}

// FreshPlacement reads placement id from etcd (linearizable), for what
// the watch-fed directory (Placement) may not have yet. ok is false when
// there is none. Failure modes: ErrUnavailable.
func (n *Node) FreshPlacement(ctx context.Context, id string) (p Placement, ok bool, err error) {
	return n.getPlacement(ctx, id)
}

// getPlacement reads placements/<id> from etcd (linearizable).
func (n *Node) getPlacement(ctx context.Context, id string) (Placement, bool, error) {
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Get(ctx, placementKey(id))
	if err != nil {
		return Placement{}, false, unavailable("get placement "+id, err)
	}
	if len(resp.Kvs) == 0 {
		return Placement{}, false, nil
	}
	p, err := decodePlacement(resp.Kvs[0])
	if err != nil {
		return Placement{}, false, fmt.Errorf("placement %s: %w", id, err)
	}
	return p, true, nil
}

// UpdatePlacement reads placements/<id>, applies f, and writes the result
// if the placement has not changed since the read; otherwise it reads and
// applies f again (so f may run more than once, and must only change its
// argument), up to a few times, then fails with ErrConflict. f may not
// change the id, owner or name (ErrInvalidArgument): the names/ key stays
// as claimed. An error from f is returned as is and writes nothing. An
// absent placement is ErrNotFound. It returns the placement as written,
// with its new Revision. Failure modes: ErrUnavailable (the write may have
// been applied).
func (n *Node) UpdatePlacement(ctx context.Context, id string, f func(*Placement) error) (Placement, error) {
	if err := segment("sandbox id", id); err != nil {
		return Placement{}, fmt.Errorf("update placement: %w", err)
	}
	pk := placementKey(id)
	for range updateAttempts {
		cur, ok, err := n.getPlacement(ctx, id)
		if err != nil {
			return Placement{}, fmt.Errorf("update placement: %w", err)
		}
		if !ok {
			return Placement{}, fmt.Errorf("update placement %s: %w", id, ErrNotFound)
		}
		p := clonePlacement(cur)
		if err := f(&p); err != nil {
			return Placement{}, err
		}
		if p.ID != cur.ID || p.Owner != cur.Owner || p.Name != cur.Name {
			return Placement{}, fmt.Errorf("update placement %s: %w: id, owner and name cannot change", id, ErrInvalidArgument)
		}
		val, err := json.Marshal(p)
		if err != nil {
			return Placement{}, fmt.Errorf("update placement %s: %w", id, err)
		}
		tctx, cancel := n.op(ctx)
		resp, err := n.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.ModRevision(pk), "=", cur.Revision)).
			Then(clientv3.OpPut(pk, string(val))).Commit()
		cancel()
		if err != nil {
			return Placement{}, unknownOutcome("update placement "+id, err)
		}
		if resp.Succeeded {
			p.Revision = resp.Header.Revision
			return p, nil
		}
	}
	return Placement{}, fmt.Errorf("update placement %s: %w: it kept changing", id, ErrConflict)
}

// Tombstone marks a lost placement deleted and frees its name, in one
// transaction that holds only while the placement is unchanged since read
// and still names node: the sandbox's owner deleted it while its node was
// away. The placement stays, as a tombstone, until that node comes back
// and destroys its copy (releasing it); the name can be taken at once.
// Failure modes: ErrNotFound, ErrConflict (it changed: re-read),
// ErrUnavailable.
func (n *Node) Tombstone(ctx context.Context, id, node string) error {
	if err := segment("sandbox id", id); err != nil {
		return fmt.Errorf("tombstone: %w", err)
	}
	cur, ok, err := n.getPlacement(ctx, id)
	if err != nil {
		return fmt.Errorf("tombstone: %w", err)
	}
	if !ok {
		return fmt.Errorf("tombstone %s: %w", id, ErrNotFound)
	}
	if cur.Node != node {
		return fmt.Errorf("tombstone %s: %w: it moved to %s", id, ErrConflict, cur.Node)
	}
	p := clonePlacement(cur)
	p.State = StateDeleted
	val, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("tombstone %s: %w", id, err)
	}
	changed, err := n.changePlacement(ctx, cur, clientv3.OpPut(placementKey(id), string(val)))
	if err != nil {
		return unknownOutcome("tombstone "+id, err)
	}
	if !changed {
		return fmt.Errorf("tombstone %s: %w: it changed", id, ErrConflict)
	}
	return nil
}

// changePlacement applies ops (cur's placement key first) and frees cur's name
// (only while it still names cur.ID), in one transaction that holds only
// while the placement is still at cur.Revision; it reports whether it
// held. ReleasePlacementOf (a delete) and Tombstone (a put) share it.
func (n *Node) changePlacement(ctx context.Context, cur Placement, ops ...clientv3.Op) (bool, error) {
	then := ops
	if cur.Template != "" {
		// A released or deleted sandbox no longer keeps its template.
		then = append(then, clientv3.OpDelete(tplUseKey(cur.Template, cur.ID)))
	}
	if cur.Name != "" {
		nk := nameKey(cur.Owner, cur.Name)
		then = append(then, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(nk), "=", encodeRef(cur.ID))},
			[]clientv3.Op{clientv3.OpDelete(nk)}, nil))
	}
	tctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.ModRevision(placementKey(cur.ID)), "=", cur.Revision)).
		Then(then...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// TakeOver moves placement p to newNode in state "creating" (and the
// binding of its p.Key, when it names p.ID on p.Node, with it), if and only
// if placements/<p.ID> is still at p.Revision (as read from the directory
// or etcd): of racing callers holding the same p, exactly one gets true.
// false means another change came first (re-read before trying again).
// Failure modes: ErrUnavailable (the move may have been applied: read the
// placement to learn whether newNode holds it).
func (n *Node) TakeOver(ctx context.Context, p Placement, newNode string) (bool, error) {
	if err := segment("sandbox id", p.ID); err != nil {
		return false, fmt.Errorf("take over: %w", err)
	}
	if p.Revision == 0 || newNode == "" {
		return false, fmt.Errorf("take over %s: %w: a read placement (revision) and a node are required", p.ID, ErrInvalidArgument)
	}
	q := clonePlacement(p)
	q.Node, q.State = newNode, StateCreating
	val, err := json.Marshal(q)
	if err != nil {
		return false, fmt.Errorf("take over %s: %w", p.ID, err)
	}
	pk := placementKey(p.ID)
	// The key's binding moves with the sandbox: a retry of its create goes
	// to the node that recreates it.
	then := append([]clientv3.Op{clientv3.OpPut(pk, string(val))}, bindingOps(p.Key, Binding{Node: p.Node, ID: p.ID}, Binding{Node: newNode, ID: p.ID})...)
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(pk), "=", p.Revision)).
		Then(then...).Commit()
	if err != nil {
		return false, unknownOutcome("take over "+p.ID, err)
	}
	return resp.Succeeded, nil
}

// ClaimHostname binds hostnames/<host> to sandbox id if no sandbox holds
// it. A hostname id already holds is nil (a retry); one another sandbox
// holds is ErrHostnameTaken. The caller normalizes host (lowercase, no
// port). Failure modes: ErrUnavailable (the claim may have been applied:
// retry it, or release it).
func (n *Node) ClaimHostname(ctx context.Context, host, id string) error {
	if err := segment("hostname", host); err != nil {
		return fmt.Errorf("claim hostname: %w", err)
	}
	if err := segment("sandbox id", id); err != nil {
		return fmt.Errorf("claim hostname: %w", err)
	}
	hk := hostnameKey(host)
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(hk), "=", 0)).
		Then(clientv3.OpPut(hk, encodeRef(id))).
		Else(clientv3.OpGet(hk)).Commit()
	if err != nil {
		return unknownOutcome("claim hostname "+host, err)
	}
	if resp.Succeeded {
		return nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if cur, _ := decodeRef(kvs[0].Value); cur == id {
			return nil
		}
	}
	return fmt.Errorf("claim hostname %s: %w", host, ErrHostnameTaken)
}

// ReleaseHostname deletes hostnames/<host> only while it names id
// (fenced): an absent hostname, or one another sandbox holds, is left as
// it is and the call returns nil. Failure modes: ErrUnavailable (the
// release may have been applied: retry).
func (n *Node) ReleaseHostname(ctx context.Context, host, id string) error {
	if err := segment("hostname", host); err != nil {
		return fmt.Errorf("release hostname: %w", err)
	}
	hk := hostnameKey(host)
	ctx, cancel := n.op(ctx)
	defer cancel()
	_, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(hk), "=", encodeRef(id))).
		Then(clientv3.OpDelete(hk)).Commit()
	return unknownOutcome("release hostname "+host, err)
}

// BindKey binds idem/<scope>/<owner>/<hex sha256(key)> (IdemKey) to node,
// if no node is bound to it yet, under a lease of ttl (rounded up to whole
// seconds; etcd may raise a very short one to its minimum), and returns the
// binding: node when this call bound it, or what an earlier call bound
// (which may be node itself: a retry), with the sandbox its create made
// once that create claimed its placement. Failure modes: ErrUnavailable
// (the binding may have been applied: retry, which returns it).
func (n *Node) BindKey(ctx context.Context, scope, owner, key, node string, ttl time.Duration) (Binding, error) {
	if err := segment("scope", scope); err != nil {
		return Binding{}, fmt.Errorf("bind key: %w", err)
	}
	if owner == "" || node == "" || ttl <= 0 {
		return Binding{}, fmt.Errorf("bind key: %w: owner, node and a positive ttl are required", ErrInvalidArgument)
	}
	k := IdemKey(scope, owner, key)
	ctx, cancel := n.op(ctx)
	defer cancel()
	g, err := n.cli.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return Binding{}, unavailable("bind key: grant lease", err)
	}
	resp, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, encodeBinding(Binding{Node: node}), clientv3.WithLease(g.ID))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return Binding{}, unknownOutcome("bind key", err)
	}
	if resp.Succeeded {
		return Binding{Node: node}, nil
	}
	// The lease holds nothing: revoke it rather than keep it for ttl. A
	// failure here costs nothing but etcd's memory until it expires.
	_, _ = n.cli.Revoke(ctx, g.ID)
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return Binding{}, fmt.Errorf("bind key: %w: the binding vanished", ErrConflict)
	}
	var b Binding
	if err := json.Unmarshal(kvs[0].Value, &b); err != nil {
		return Binding{}, fmt.Errorf("bind key: %w", err)
	}
	return b, nil
}

// RebindKey moves BindKey's key from binding from (its node departed, and
// the first attempt with it or its sandbox was lost) to node to, without a
// sandbox, keeping its lease, in one transaction that holds only while the
// key still says from: of racing callers one moves it and every one
// returns the binding as it is now. An absent binding is bound to to
// afresh (as BindKey). Failure modes: ErrUnavailable.
func (n *Node) RebindKey(ctx context.Context, scope, owner, key string, from Binding, to string, ttl time.Duration) (Binding, error) {
	if err := segment("scope", scope); err != nil {
		return Binding{}, fmt.Errorf("rebind key: %w", err)
	}
	k := IdemKey(scope, owner, key)
	tctx, cancel := n.op(ctx)
	resp, err := n.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.Value(k), "=", encodeBinding(from))).
		Then(clientv3.OpPut(k, encodeBinding(Binding{Node: to}), clientv3.WithIgnoreLease())).
		Else(clientv3.OpGet(k)).Commit()
	cancel()
	if err != nil {
		return Binding{}, unknownOutcome("rebind key", err)
	}
	if resp.Succeeded {
		return Binding{Node: to}, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return n.BindKey(ctx, scope, owner, key, to, ttl)
	}
	var b Binding
	if err := json.Unmarshal(kvs[0].Value, &b); err != nil {
		return Binding{}, fmt.Errorf("rebind key: %w", err)
	}
	return b, nil
}

// LookupName returns the id of the sandbox that names/<owner>/<name>
// names, from the node's watch-fed copy of names/ (no etcd call on the
// request path), or ErrNotFound.
func (n *Node) LookupName(_ context.Context, owner, name string) (string, error) {
	id, ok := n.nameTarget(owner, name)
	if !ok {
		return "", fmt.Errorf("lookup name %q of %s: %w", name, owner, ErrNotFound)
	}
	return id, nil
}
