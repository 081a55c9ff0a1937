package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"maps"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Failover policies of a sandbox (CreateRequest.Failover): what a cluster
// does with it when its node is lost.
const (
	// FailoverNone (the default) leaves a sandbox whose node was lost
	// "lost": reads say so, its owner's quota stops counting it.
	FailoverNone = ""
	// FailoverRecreate makes it again on a live node with the same id,
	// name, env and secret env, its port intents and custom domains
	// replayed. Its filesystem and processes are not carried over.
	FailoverRecreate = "recreate"
)

// Cluster is what the service needs of cluster mode (docs/cluster.md):
// the cluster-wide keys of the sandboxes this node owns. It is nil on a
// single node. Every call is bounded; a cluster that cannot answer is an
// error matching ErrUnavailable, and the caller undoes its local work.
type Cluster interface {
	// ClaimSandbox records that this node owns p.ID and takes p.Name for
	// p.Owner cluster-wide, in one transaction: an error matching
	// ErrNameConflict when another sandbox holds the name. Repeating it
	// for the same sandbox on the same node succeeds.
	ClaimSandbox(ctx context.Context, p Placement) error
	// ReleaseSandbox removes the placement and the name of id, each only
	// while it still names id on this node: a node that lost a sandbox to
	// a failover never releases the new owner's keys. Absent keys are not
	// an error.
	ReleaseSandbox(ctx context.Context, id string) error
	// ClaimHostname takes hostname for id cluster-wide (ErrHostnameConflict
	// when another sandbox holds it); ReleaseHostname gives it back while
	// it still names id.
	ClaimHostname(ctx context.Context, hostname, id string) error
	ReleaseHostname(ctx context.Context, hostname, id string) error
	// SetIntents records id's exposures and custom domains on its
	// placement, for a failover to replay.
	SetIntents(ctx context.Context, id string, in Intents) error
	// Ready is nil when the cluster can commit a write now (it answers a
	// linearizable read): a destroy asks before it commits, since its
	// keys' release cannot be undone.
	Ready(ctx context.Context) error
	// Place picks the node for a create that a (PlaceCreate) describes:
	// here=true for this node. It prefers a.Template's holders that have
	// room, else two random live nodes, the one with more free memory;
	// an a.Key is bound cluster-wide to the node of its first attempt
	// (for a.KeyTTL), and every retry goes there. An error is retryable
	// (ErrUnavailable): no quorum, the key's node is down, the key's
	// sandbox is being recreated.
	Place(ctx context.Context, a Ask) (n Node, here bool, err error)
}

// Ask is what cluster placement reads of a create: never a wire body,
// always the request a facade decoded (PlaceCreate).
type Ask struct {
	Owner string
	// Template is the id of the template the create is from ("" for
	// none): its holders are preferred.
	Template string
	// Key is the create's idempotency or dedupe key (zero for none), and
	// KeyTTL how long its binding to one node must hold.
	Key    KeyRef
	KeyTTL time.Duration
}

// Node is a cluster node a create is sent to.
type Node struct {
	ID  string
	URL string // its API base URL
}

// Placement is what the cluster keeps of a sandbox this node creates.
type Placement struct {
	ID, Owner, Name string
	// Key is the idempotency key of the create that made it (zero for
	// none): the cluster's binding of that key (scope, Owner and
	// fingerprint) names the sandbox from its claim on, so that a retry
	// of the create after a failover finds it.
	Key KeyRef
	// Failover is FailoverNone or FailoverRecreate.
	Failover string
	// Template is the template the sandbox was made from ("" for none):
	// a template in use on any node is not deleted.
	Template string
	// Recovery is the normalized create request (Recovery), in the clear:
	// the cluster seals it with a key every node can open, since the node
	// that recreates it is another one.
	Recovery []byte
	// Annotations are the create's (the facades' marks), for the cluster
	// to publish what other nodes need of them; not stored whole.
	Annotations map[string]string
}

// KeyRef names an idempotency key: OnceKey's Scope and Fingerprint (the
// owner is the placement's).
type KeyRef struct{ Scope, Fingerprint string }

// recoveryKey is the idempotency key a recreate claims on its new node, so
// that a retry of the create that made the sandbox answers it there.
type recoveryKey struct {
	Scope        string        `json:"scope"`
	Fingerprint  string        `json:"fingerprint"`
	RequestHash  string        `json:"request_hash,omitempty"`
	PendingTTL   time.Duration `json:"pending_ttl"`
	ReplayWindow time.Duration `json:"replay_window"`
}

// recovery is what a failover needs to make a sandbox again: its request
// as this node normalized it, secret env included (sealed by the cluster,
// never stored in the clear). Mounts are never part of it: volumes are
// directories of one host, and a create that has them cannot ask for
// FailoverRecreate.
type recovery struct {
	Owner       string            `json:"owner"`
	Image       string            `json:"image"`
	Name        string            `json:"name,omitempty"`
	MilliCPU    int64             `json:"milli_cpu"`
	MemoryMB    int64             `json:"memory_mb"`
	DiskMB      int64             `json:"disk_mb,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	SecretEnv   map[string]string `json:"secret_env,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	TimeoutMS   int64             `json:"timeout_ms,omitempty"`
	Network     bool              `json:"network,omitempty"`
	Policy      netpolicy.Policy  `json:"network_policy,omitzero"`
	Runtime     string            `json:"runtime,omitempty"`
	Quota       Quota             `json:"quota"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Key         *recoveryKey      `json:"key,omitempty"`
	Lifecycle   *recoveryRules    `json:"lifecycle,omitempty"`
}

// recoveryRules is a recovery spec's Lifecycle (milliseconds).
type recoveryRules struct {
	AutoStopMS     int64     `json:"auto_stop_ms,omitempty"`
	AutoDeleteMS   int64     `json:"auto_delete_ms,omitempty"`
	DeleteOnStop   bool      `json:"delete_on_stop,omitempty"`
	AutoArchiveMS  int64     `json:"auto_archive_ms,omitempty"`
	PauseOnTimeout bool      `json:"pause_on_timeout,omitempty"`
	TimeoutPause   PauseKind `json:"timeout_pause,omitempty"`
	AutoResume     bool      `json:"auto_resume,omitempty"`
}

// placementOf is the placement a create of id records, with its recovery
// spec when the request asks to be recreated (a sandbox that is not
// recreated needs none, and its secret env then never leaves the node).
func placementOf(id string, req CreateRequest) (Placement, error) {
	p := Placement{ID: id, Owner: req.Owner, Name: req.Name, Failover: req.Failover, Annotations: req.Annotations}
	if isTemplateImage(req.Image) {
		p.Template = templateIDOf(req.Image)
	}
	var key *recoveryKey
	if k := req.Once; k != nil && !k.Delivery {
		p.Key = KeyRef{Scope: k.Scope, Fingerprint: k.Fingerprint}
		key = &recoveryKey{Scope: k.Scope, Fingerprint: k.Fingerprint, RequestHash: k.RequestHash, PendingTTL: k.PendingTTL, ReplayWindow: k.ReplayWindow}
	}
	if req.Failover != FailoverRecreate {
		return p, nil
	}
	spec, err := json.Marshal(recovery{
		Owner: req.Owner, Image: req.Image, Name: req.Name, MilliCPU: req.MilliCPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB,
		Env: req.Env, SecretEnv: req.SecretEnv, Tags: req.Tags, TimeoutMS: req.Timeout.Milliseconds(),
		Network: req.Network, Policy: req.NetworkPolicy, Runtime: req.Runtime, Quota: req.Quota, Annotations: req.Annotations,
		Key: key,
	}.withRules(req.Lifecycle))
	if err != nil {
		return Placement{}, fmt.Errorf("recovery spec of %s: %w", id, err)
	}
	p.Recovery = spec
	return p, nil
}

// withRules is r carrying l (nothing for no rules).
func (r recovery) withRules(l Lifecycle) recovery {
	if l != (Lifecycle{}) {
		r.Lifecycle = &recoveryRules{
			AutoStopMS: l.AutoStop.Milliseconds(), AutoDeleteMS: l.AutoDelete.Milliseconds(), DeleteOnStop: l.DeleteOnStop,
			AutoArchiveMS: l.AutoArchive.Milliseconds(), PauseOnTimeout: l.PauseOnTimeout,
			TimeoutPause: l.TimeoutPause, AutoResume: l.AutoResume,
		}
	}
	return r
}

// requestOf is the inverse of placementOf's recovery spec.
func requestOf(spec []byte) (CreateRequest, error) {
	var r recovery
	if err := json.Unmarshal(spec, &r); err != nil {
		return CreateRequest{}, fmt.Errorf("recovery spec: %w", err)
	}
	req := CreateRequest{
		Owner: r.Owner, Image: r.Image, Name: r.Name, MilliCPU: r.MilliCPU, MemoryMB: r.MemoryMB, DiskMB: r.DiskMB,
		Env: maps.Clone(r.Env), SecretEnv: maps.Clone(r.SecretEnv), Tags: maps.Clone(r.Tags),
		Timeout: time.Duration(r.TimeoutMS) * time.Millisecond, Network: r.Network, NetworkPolicy: r.Policy, Runtime: r.Runtime,
		Quota: r.Quota, Annotations: maps.Clone(r.Annotations), Failover: FailoverRecreate,
	}
	if l := r.Lifecycle; l != nil {
		req.Lifecycle = Lifecycle{
			AutoStop: time.Duration(l.AutoStopMS) * time.Millisecond, AutoDelete: time.Duration(l.AutoDeleteMS) * time.Millisecond,
			DeleteOnStop: l.DeleteOnStop, AutoArchive: time.Duration(l.AutoArchiveMS) * time.Millisecond, PauseOnTimeout: l.PauseOnTimeout,
			TimeoutPause: l.TimeoutPause, AutoResume: l.AutoResume,
		}
		req.PauseOnTimeout = l.PauseOnTimeout
	}
	if k := r.Key; k != nil {
		req.Once = &OnceKey{Scope: k.Scope, Fingerprint: k.Fingerprint, RequestHash: k.RequestHash, PendingTTL: k.PendingTTL, ReplayWindow: k.ReplayWindow}
	}
	return req, nil
}

// PlaceCreate says which node r, a create that an edge decoded for c,
// belongs on: here=true for this node, always on a single node. A create
// that mounts volumes stays here (volumes are this node's directories,
// made by its caller here). Otherwise the cluster picks (Cluster.Place):
// the holders of the template it names (resolved here, per owner, from
// this node's copy of the catalog) are preferred, a template that is this
// node's alone (one with memory) keeps it here, and a keyed create
// (r.Key: an Idempotency-Key, or the E2B facade's dedupe key) is bound to
// one node for the key's pending time and replay window, so that every
// retry reaches the node that has the first attempt. It reads memory and,
// for a keyed create, the cluster (one transaction); it changes nothing
// else. An error is retryable (ErrUnavailable).
func (s *Service) PlaceCreate(ctx context.Context, c Caller, r CreateOnceRequest) (n Node, here bool, err error) {
	if s.Cluster == nil || len(r.Create.Mounts) > 0 {
		return Node{}, true, nil
	}
	a := Ask{Owner: c.Owner}
	if ref := r.Create.Template; ref != "" {
		// This node's copy of the catalog only: most creates name no
		// template, and a miss costs the cluster a read.
		t, err := s.findTemplate(ctx, Caller{Owner: c.Owner}, ref, false)
		if err == nil && nodeLocal(t) {
			// A template with memory is this node's alone (its image
			// is never copied): its creates restore here.
			return Node{}, true, nil
		}
		if err == nil && t.State == store.TemplateReady {
			a.Template = t.ID
		}
	}
	if k := r.Key; k.Scope != "" {
		a.Key = KeyRef{Scope: k.Scope, Fingerprint: k.Fingerprint}
		a.KeyTTL = k.PendingTTL + k.ReplayWindow
	}
	n, here, err = s.Cluster.Place(ctx, a)
	if err != nil {
		return Node{}, false, clusterErr(err, "")
	}
	return n, here, nil
}

// claimCluster is the create chain's cluster step: after the row's insert
// (so a local name conflict costs nothing cluster-wide), before anything
// costly (so a cluster-wide conflict costs no container). The idle
// sandboxes of the pool have no placement: they are the node's, not a
// tenant's, until claimed.
func (s *Service) claimCluster(ctx context.Context, id string, req CreateRequest) error {
	if s.Cluster == nil || req.Owner == store.PoolOwner {
		return nil
	}
	p, err := placementOf(id, req)
	if err != nil {
		return err
	}
	if p.Template != "" {
		// Only a template the catalog has is kept in use by the claim
		// (its record must exist); one made here while the cluster could
		// not take it is this node's alone.
		if t, ok := s.templateOfImage(ctx, req.Image); !ok || (!t.Shared && t.Origin == "") {
			p.Template = ""
		}
	}
	if err := s.Cluster.ClaimSandbox(ctx, p); err != nil {
		return clusterErr(err, req.Name)
	}
	return nil
}

// releaseCluster undoes claimCluster, and ends a destroyed sandbox's
// cluster-wide keys.
func (s *Service) releaseCluster(ctx context.Context, id string) error {
	if s.Cluster == nil {
		return nil
	}
	domains, err := s.Store.ListCustomDomains(ctx, id)
	if err != nil {
		return s.mapStoreErr(err, id)
	}
	for _, d := range domains {
		if err := s.Cluster.ReleaseHostname(ctx, d.Hostname, id); err != nil {
			return fmt.Errorf("release the cluster hostname %s of %s: %w", d.Hostname, id, clusterErr(err, ""))
		}
	}
	if err := s.Cluster.ReleaseSandbox(ctx, id); err != nil {
		return fmt.Errorf("release the cluster keys of %s: %w", id, clusterErr(err, ""))
	}
	return nil
}

// clusterErr makes sure a cluster failure reads as the domain's error: a
// name held elsewhere is the same conflict as on one node, and anything
// else that is not already a domain error is the cluster being unable to
// answer (retryable).
func clusterErr(err error, name string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNameConflict):
		return fmt.Errorf("name %q: %w", name, ErrNameConflict)
	case errors.Is(err, ErrHostnameConflict), errors.Is(err, ErrUnavailable),
		errors.Is(err, ErrConflict), errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalidArgument):
		return err // the cluster's refusal, already typed (a template in use, or gone)
	}
	return fmt.Errorf("%w: cluster: %w", ErrUnavailable, err)
}

// Recreate makes a sandbox of a lost node again on this one (cluster
// failover), under the same id, from the recovery spec its placement
// kept; ports and domains are the caller's to replay (ReplayExposure,
// ReplayDomain). The caller has won the placement for this node. A sandbox
// of that id already here (a retry) is returned as it is.
//
// A sandbox made by a create with an idempotency key is recreated under
// that key's claim on this node (the key's cluster binding moved here
// with the placement): a retry of the create that arrives meanwhile waits
// for the recreate, and one after it replays the sandbox, as on the node
// that made it.
func (s *Service) Recreate(ctx context.Context, id string, spec []byte) (*Created, error) {
	if !runtime.ValidSandboxID(id) {
		return nil, invalid("id", "%q is not a valid sandbox id", id)
	}
	req, err := requestOf(spec)
	if err != nil {
		return nil, err
	}
	if isTemplateImage(req.Image) {
		// The image is the old node's reference of a template: this node
		// creates from its own (a copy, pulled if need be), and runs the
		// template's start command again, as at any create.
		req.Template, req.Image = templateIDOf(req.Image), ""
	}
	k := req.Once
	if k == nil {
		return s.CreateSandboxWithID(ctx, id, req)
	}
	creq := store.ClaimRequest{Scope: k.Scope, Fingerprint: k.Fingerprint, RequestHash: k.RequestHash, PendingTTL: k.PendingTTL}
	acquiredAt := time.Now()
	cl, err := s.Store.Claim(ctx, creq)
	if err != nil || cl.Outcome != store.ClaimAcquired {
		// This node has the key already (a repeat of this recreate, whose
		// claim names the sandbox), or cannot say: the sandbox comes first.
		if err != nil {
			s.Logger.Warn("failover: claim the idempotency key of a recreated sandbox", "sandbox", id, "err", err)
		}
		return s.CreateSandboxWithID(ctx, id, req)
	}
	hold := s.holdClaim(ctx, cl, k.PendingTTL, acquiredAt)
	created, err := s.createWithID(ctx, req, id, &cl)
	hold.stop()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if err != nil {
		if _, derr := s.Store.DeleteClaim(dctx, cl); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete idempotency claim: %w", derr))
		}
		return nil, err
	}
	if err := s.Store.Complete(dctx, cl, created.ID, k.ReplayWindow); err != nil {
		s.Logger.Warn("failover: complete the idempotency claim of a recreated sandbox", "sandbox", id, "err", err)
	}
	return created, nil
}

// ExposePort is exposePort (ports.go), recorded on the sandbox's placement
// in cluster mode so that a failover replays it.
func (s *Service) ExposePort(ctx context.Context, c Caller, idOrName string, port int, protocol string, public bool) (Exposure, error) {
	e, err := s.exposePort(ctx, c, idOrName, port, protocol, public)
	if err == nil {
		s.recordIntentsOf(ctx, c, idOrName)
	}
	return e, err
}

// UnexposePort is unexposePort (ports.go), recorded as ExposePort is.
func (s *Service) UnexposePort(ctx context.Context, c Caller, idOrName string, port int) error {
	err := s.unexposePort(ctx, c, idOrName, port)
	if err == nil {
		s.recordIntentsOf(ctx, c, idOrName)
	}
	return err
}

// AddDomain is addDomain (domains.go), recorded as ExposePort is.
func (s *Service) AddDomain(ctx context.Context, c Caller, idOrName, hostname string, port int) (Domain, error) {
	d, err := s.addDomain(ctx, c, idOrName, hostname, port)
	if err == nil {
		s.recordIntents(ctx, d.SandboxID)
	}
	return d, err
}

// VerifyDomain is verifyDomain (domains.go); a verified binding is
// recorded as ExposePort is (promote does it).
func (s *Service) VerifyDomain(ctx context.Context, c Caller, idOrName, hostname string) (Domain, error) {
	return s.verifyDomain(ctx, c, idOrName, hostname)
}

// RemoveDomain is removeDomain (domains.go), recorded as ExposePort is.
func (s *Service) RemoveDomain(ctx context.Context, c Caller, idOrName, hostname string) error {
	err := s.removeDomain(ctx, c, idOrName, hostname)
	if err == nil {
		s.recordIntentsOf(ctx, c, idOrName)
	}
	return err
}

func (s *Service) recordIntentsOf(ctx context.Context, c Caller, idOrName string) {
	if s.Cluster == nil {
		return
	}
	if row, err := s.lookup(ctx, c, idOrName); err == nil {
		s.recordIntents(ctx, row.ID)
	}
}

// recordIntents writes the sandbox's exposures and custom domains, as the
// store has them now, on its placement. It is best effort: the exposure
// itself is this node's and already works; a failure only means a
// failover would not replay it, and is logged.
func (s *Service) recordIntents(ctx context.Context, id string) {
	if s.Cluster == nil {
		return
	}
	eps, err := s.Store.ListExposedPorts(ctx, id)
	if err == nil {
		var ds []store.CustomDomain
		if ds, err = s.Store.ListCustomDomains(ctx, id); err == nil {
			in := Intents{}
			for _, ep := range eps {
				in.Ports = append(in.Ports, PortIntent{Port: ep.Port, Protocol: string(ep.Protocol), Public: ep.Public})
			}
			for _, d := range ds {
				if d.Verified() { // a pending claim is not replayed: it routes nothing
					in.Domains = append(in.Domains, DomainIntent{Hostname: d.Hostname, Port: d.Port})
				}
			}
			err = s.Cluster.SetIntents(ctx, id, in)
		}
	}
	if err != nil {
		s.Logger.Warn("cluster: record the ports and domains a failover replays", "sandbox", id, "err", err)
	}
}

// Intents are what a failover replays of a sandbox: its exposed ports and
// custom domains.
type Intents struct {
	Ports   []PortIntent
	Domains []DomainIntent
}

// PortIntent is one exposure to replay.
type PortIntent struct {
	Port     int
	Protocol string
	Public   bool
}

// DomainIntent is one verified custom domain to replay (ReplayDomain).
type DomainIntent struct {
	Hostname string
	Port     int
}

// LocalSandboxIDs lists the ids of every tenant sandbox this node has
// (the pool's idle ones and those being destroyed left out).
func (s *Service) LocalSandboxIDs(ctx context.Context) ([]string, error) {
	var ids []string
	token := ""
	for {
		rows, next, err := s.Store.ListSandboxes(ctx, store.ListFilter{Limit: 1000, PageToken: token})
		if err != nil {
			return nil, s.mapStoreErr(err, "")
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		if next == "" {
			return ids, nil
		}
		token = next
	}
}

// DestroyLocal destroys sandbox id on this node, whoever owns it: a
// cluster node's stale copy of a sandbox another node has now. Its
// cluster keys are released only while they are still this node's.
func (s *Service) DestroyLocal(ctx context.Context, id string) error {
	return s.destroy(ctx, id)
}
