package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// The lifecycle part of the service is four files: this one (lookup,
// list, destroy, stop, start and update of one sandbox), pause.go (pause
// and resume, and the per-sandbox transition lock every state change
// takes), rules.go (the lifecycle rules the background loop applies:
// auto-stop, auto-delete, auto-archive, pause on timeout) and, for what a
// crash or the engine leaves behind, decide.go and reconcile.go. What it
// needs of the rest: SandboxStore (the row is the truth; every transition
// is a conditional write first), Runtime (the engine call after it),
// Router (routes go with a destroy), Admission (a start reserves, a stop
// parks: the disk still counts, a destroy releases) and the network part's
// applyRowPolicy and removeRowPolicy; the create chain is create.go's.

// Caller is who is asking: a user sees only the sandboxes it owns (others
// are ErrNotFound, never ErrPermission: existence is not leaked); an admin
// sees all.
type Caller struct {
	Owner string
	Admin bool
	// Quota bounds what Owner may hold when this caller creates or starts
	// a sandbox (the caller's token's); zero is unlimited, as for admins.
	Quota Quota
}

// Quota bounds what one owner holds at once: running sandboxes, their
// CPU and their memory. A zero field is unlimited.
type Quota = admission.Quota

// canSee reports whether c may see a sandbox of owner. Nobody sees the
// warm pool's idle sandboxes (store.PoolOwner's) through a lookup, admins
// included: they belong to no tenant until a create claims one, and the
// pool alone manages them.
func (c Caller) canSee(owner string) bool {
	return owner != store.PoolOwner && (c.Admin || c.Owner == owner)
}

// Get returns a sandbox by id or by name; names are per owner (lookupName).
func (s *Service) Get(ctx context.Context, c Caller, idOrName string) (Sandbox, error) {
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return Sandbox{}, err
	}
	return fromRow(row), nil
}

func (s *Service) lookup(ctx context.Context, c Caller, idOrName string) (store.Sandbox, error) {
	row, err := s.lookupAny(ctx, c, idOrName)
	if err == nil && !row.DestroyingSince.IsZero() {
		// A sandbox whose destroy began is gone to its callers.
		return store.Sandbox{}, fmt.Errorf("sandbox %q: %w", idOrName, ErrNotFound)
	}
	return row, err
}

// lookupAny is lookup that also finds, by id, a sandbox whose destroy began
// (Destroy finishes it).
func (s *Service) lookupAny(ctx context.Context, c Caller, idOrName string) (store.Sandbox, error) {
	if idOrName == "" || strings.ContainsRune(idOrName, 0) {
		return store.Sandbox{}, fmt.Errorf("sandbox %q: %w", idOrName, ErrNotFound)
	}
	var (
		row store.Sandbox
		err error
	)
	if IsID(idOrName) {
		row, err = s.Store.GetSandbox(ctx, idOrName)
	} else {
		row, err = s.lookupName(ctx, c, idOrName)
	}
	if err != nil {
		return store.Sandbox{}, s.mapStoreErr(err, idOrName)
	}
	if !c.canSee(row.Owner) {
		return store.Sandbox{}, fmt.Errorf("sandbox %q: %w", idOrName, ErrNotFound)
	}
	return row, nil
}

// IsID reports whether s is spelled as a sandbox id ("sb-…") rather than
// a name. Names may not start with "sb-" (normalize refuses them), so an
// id is never taken for a name nor a name for an id.
func IsID(s string) bool { return strings.HasPrefix(s, "sb-") }

// lookupName finds a sandbox by name. Names are unique per owner, so a
// user's name is looked up among its own sandboxes only: another tenant's
// name is not found exactly like a name nobody holds, and its existence
// never shows. An admin's name means its own sandbox of that name if it
// has one, else the one sandbox of any owner with that name; a name that
// several owners hold is ambiguous and refused (ErrConflict: use the id).
func (s *Service) lookupName(ctx context.Context, c Caller, name string) (store.Sandbox, error) {
	if !c.Admin || c.Owner != "" {
		row, err := s.Store.GetSandboxByName(ctx, c.Owner, name)
		if !c.Admin || !errors.Is(err, store.ErrNotFound) {
			return row, err
		}
	}
	rows, _, err := s.Store.ListSandboxes(ctx, store.ListFilter{Name: name, Limit: 2})
	switch {
	case err != nil:
		return store.Sandbox{}, err
	case len(rows) == 0:
		return store.Sandbox{}, fmt.Errorf("get sandbox by name %q: %w", name, store.ErrNotFound)
	case len(rows) > 1:
		return store.Sandbox{}, fmt.Errorf("sandboxes of several owners are named %q; use the id: %w", name, ErrConflict)
	}
	return rows[0], nil
}

// ListFilter selects sandboxes for List.
type ListFilter struct {
	Name   string
	Tags   map[string]string
	States []State
	// Annotations must all match the sandbox's (a facade's own data).
	Annotations map[string]string
	// CreatedFrom and CreatedUntil bound CreatedAt, inclusive; zero: none.
	CreatedFrom, CreatedUntil time.Time
	// NewestFirst lists newest first (default oldest first).
	NewestFirst bool
	Limit       int
	PageToken   string
}

// List returns one page of the caller's sandboxes, oldest first (newest
// first with f.NewestFirst), and the token of the next page ("" on the
// last). Pages are keyed by creation, so a sandbox that changes state
// between pages is listed once.
//
// In cluster mode the page is the cluster's: every other live node lists
// its own page of f (Peers), and the pages are merged in the same order
// (see mergePages). A live node that does not answer fails the list with
// ErrUnavailable (retryable): a page without its rows would page past
// them for good. A node whose lease ended is not asked (its sandboxes
// fail over or are lost).
func (s *Service) List(ctx context.Context, c Caller, f ListFilter) ([]Sandbox, string, error) {
	local, next, err := s.ListLocal(ctx, c, f)
	if err != nil || s.Peers == nil {
		return local, next, err
	}
	pages, err := s.Peers.ListPeers(ctx, c, f)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	items, next := mergePages(f, append(pages, Page{Items: local, Next: next}))
	return items, next, nil
}

// ListLocal is List of this node's sandboxes only: what a node answers
// another's List with.
func (s *Service) ListLocal(ctx context.Context, c Caller, f ListFilter) ([]Sandbox, string, error) {
	sf := store.ListFilter{
		Name: f.Name, Tags: f.Tags, States: f.States, Annotations: f.Annotations,
		CreatedFrom: f.CreatedFrom, CreatedUntil: f.CreatedUntil, NewestFirst: f.NewestFirst,
		Limit: f.Limit, PageToken: f.PageToken,
	}
	if !c.Admin {
		sf.Owner = c.Owner
	}
	rows, next, err := s.Store.ListSandboxes(ctx, sf)
	if err != nil {
		return nil, "", s.mapStoreErr(err, "")
	}
	out := make([]Sandbox, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, next, nil
}

// Page is one node's page of a listing.
type Page struct {
	Items []Sandbox `json:"items"`
	Next  string    `json:"next,omitempty"`
}

// PeerLister lists what the cluster's other nodes have (cluster mode).
type PeerLister interface {
	// ListPeers returns the page of f for c (ListLocal) of every other
	// live node, or an error naming one that did not answer.
	ListPeers(ctx context.Context, c Caller, f ListFilter) ([]Page, error)
	// PeerPools returns the warm pool (PoolStatus) of every other live
	// node that answered, by node id.
	PeerPools(ctx context.Context) []NodePools
}

// NodePools is one node's warm pool.
type NodePools struct {
	Node  string       `json:"node"`
	Pools []PoolStatus `json:"pools"`
}

// mergePages merges pages listed with the same filter on several nodes
// into the cluster's page. Paging is keyset-based on (created, id) on
// every node, so the merge is exact: each node's page holds its first
// rows after the token, the merged page is the first Limit of their
// union in the listing's order, and the next token is the last row's
// position, from which every node goes on. An id listed by two nodes (a
// failed-over sandbox whose old node has not dropped its copy yet) is
// listed once.
func mergePages(f ListFilter, pages []Page) ([]Sandbox, string) {
	limit := store.ListLimit(f.Limit)
	more := false
	var all []Sandbox
	for _, p := range pages {
		all = append(all, p.Items...)
		more = more || p.Next != ""
	}
	slices.SortFunc(all, func(a, b Sandbox) int {
		c := cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
		if f.NewestFirst {
			return -c
		}
		return c
	})
	seen := make(map[string]bool, len(all))
	all = slices.DeleteFunc(all, func(sb Sandbox) bool {
		dup := seen[sb.ID]
		seen[sb.ID] = true
		return dup
	})
	if len(all) > limit {
		all, more = all[:limit], true
	}
	if !more || len(all) == 0 {
		return all, ""
	}
	last := all[len(all)-1]
	return all, store.PageTokenAfter(last.CreatedAt, last.ID)
}

// Destroy removes a sandbox: its route, container, mounts, row (and with it
// its ports and domains) and its admission reservation. It is safe to
// repeat and to race: the first call marks the row (from then on the
// sandbox is gone to every other call), every step tolerates a concurrent
// Destroy having done it first, and a repeat of a destroy that was cut
// short finishes it. A sandbox that no longer exists, or whose destroy
// had already begun (the reaper's, say), is ErrNotFound: one call wins.
//
// It is all or nothing. Before the mark (the commit) it checks what the
// teardown needs: the container engine answers about the sandbox, and in
// cluster mode the cluster can commit (its keys are released next). When
// either does not, the answer is a retryable *UnavailableError naming the
// cause, and the sandbox is as it was: visible, running, its name held.
// Once marked, the destroy is committed: a step that fails after it (the
// engine or the cluster went away in between) is logged and left to the
// reconciler, which finishes marked rows, and the call succeeds.
func (s *Service) Destroy(ctx context.Context, c Caller, idOrName string) error {
	if err := s.requireReady(); err != nil {
		return err
	}
	row, err := s.lookupAny(ctx, c, idOrName)
	if err != nil {
		return err
	}
	if !row.DestroyingSince.IsZero() {
		// Gone to callers already (the reaper's, another caller's or a cut
		// short destroy): this call finishes the work but is not the one
		// that destroyed it, as a GET would have said.
		if err := s.destroy(ctx, row.ID); err != nil {
			return err
		}
		return fmt.Errorf("sandbox %q: %w", idOrName, ErrNotFound)
	}
	if err := s.destroyPrecheck(ctx, row.ID); err != nil {
		return err
	}
	if _, err := s.Store.BeginDestroy(ctx, row.ID); err != nil {
		return s.mapStoreErr(err, row.ID)
	}
	if err := s.finishDestroy(ctx, row.ID); err != nil {
		s.Logger.Warn("destroy: committed, but a step failed; the reconciler finishes it", "sandbox", row.ID, "err", err)
	}
	return nil
}

// precheckTimeout bounds each of destroyPrecheck's questions.
const precheckTimeout = 10 * time.Second

// destroyPrecheck asks, before a destroy commits, whether its teardown can
// run: the engine answers about sandbox id (a container that is not there
// is an answer), and the cluster, in cluster mode, can commit the release
// of its keys. It changes nothing.
func (s *Service) destroyPrecheck(ctx context.Context, id string) error {
	if s.Cluster != nil {
		cctx, cancel := context.WithTimeout(ctx, precheckTimeout)
		err := s.Cluster.Ready(cctx)
		cancel()
		if err != nil {
			return Unavailable(ReasonNoQuorum, err)
		}
	}
	ectx, cancel := context.WithTimeout(ctx, precheckTimeout)
	_, err := s.Runtime.Inspect(ectx, id)
	cancel()
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return Unavailable(ReasonEngineUnreachable, err)
	}
	return nil
}

// destroy marks the row (store.BeginDestroy), then tears the sandbox down
// in the reverse order of create, the row last: a destroy interrupted by a
// crash leaves a marked row that the reconciler finishes (finishDestroy),
// never a container without a row or a row that still routes.
func (s *Service) destroy(ctx context.Context, id string) error {
	if _, err := s.Store.BeginDestroy(ctx, id); err != nil {
		return s.mapStoreErr(err, id)
	}
	return s.finishDestroy(ctx, id)
}

// finishDestroy tears down a sandbox whose row is marked for destroy. Each
// step is idempotent, so it may run again after any failure.
func (s *Service) finishDestroy(ctx context.Context, id string) error {
	// The cluster's keys first, then the local teardown, the row last: a
	// destroy the cluster cannot finish leaves a marked row (and the
	// container) that the reconciler finishes later, and the name is free
	// as soon as the cluster has committed the destroy.
	if err := s.releaseCluster(ctx, id); err != nil {
		return err
	}
	if err := s.Router.Remove(ctx, id); err != nil {
		return fmt.Errorf("remove route of %s: %w", id, err)
	}
	if err := s.removeRowPolicy(ctx, id); err != nil {
		return fmt.Errorf("remove the network policy of %s: %w", id, err)
	}
	if err := s.Runtime.Destroy(ctx, id); err != nil {
		return fmt.Errorf("destroy container of %s: %w", id, err)
	}
	s.dropImage(id)
	if err := s.Volumes.Release(ctx, id); err != nil {
		return fmt.Errorf("release mounts of %s: %w", id, err)
	}
	s.forgetClient(id)
	if err := s.Store.DeleteSandbox(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return s.mapStoreErr(err, id)
	}
	s.forgetClient(id) // again: a lookup racing this destroy may have cached one
	s.stopped.drop(id)
	s.Admission.Release(id)
	return nil
}

// Stop stops a running (or paused) sandbox, keeping its filesystem.
// Stopping a stopped sandbox returns it unchanged. Its capacity is
// released until Start. A sandbox whose Lifecycle has DeleteOnStop is
// destroyed by its stop (by a repeated stop too, should the first have
// failed after the stop): the answer is its last view, and it is gone.
func (s *Service) Stop(ctx context.Context, c Caller, idOrName string) (Sandbox, error) {
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return Sandbox{}, err
	}
	defer unlock()
	var sb Sandbox
	switch row.State {
	case store.StateStopped:
		sb = fromRow(row)
	case store.StateCreating:
		return Sandbox{}, fmt.Errorf("sandbox %s is still being created: %w", row.ID, ErrConflict)
	default:
		if sb, err = s.stopLocked(ctx, row, keepLogs); err != nil {
			return Sandbox{}, err
		}
	}
	if sb.Lifecycle.DeleteOnStop {
		return sb, s.deleteOnStop(ctx, sb.ID)
	}
	return sb, nil
}

// Whether a stop keeps a snapshot of the sandbox's logs (stopLocked).
const (
	keepLogs = true
	dropLogs = false
)

// stopLocked is Stop under the sandbox's transition lock. With keep
// (keepLogs), what the sandbox's logs hold is read before the stop (at
// most stopLogsTimeout) and kept once the stop succeeded; never for a
// sandbox its stop destroys.
func (s *Service) stopLocked(ctx context.Context, row store.Sandbox, keep bool) (Sandbox, error) {
	if row.State == store.StatePaused {
		// Thawed first: a frozen agent cannot take its SIGTERM, and would
		// get the whole grace period and then SIGKILL.
		if err := s.Runtime.Resume(ctx, row.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) && !errors.Is(err, runtime.ErrNotRunning) {
			s.Logger.Warn("stop: thaw before stopping", "sandbox", row.ID, "err", err)
		}
	}
	// Its agent keeps its logs, and stops with it: what they hold now
	// stays readable until it starts again, once it did stop (a failed
	// stop leaves the sandbox running, its agent keeping its logs).
	s.stopped.drop(row.ID)
	var kept []LogLine
	if keep && !row.Lifecycle.DeleteOnStop {
		kept = s.readLogsForStop(ctx, row)
	}
	if err := s.removeRowPolicy(ctx, row.ID); err != nil {
		return Sandbox{}, fmt.Errorf("stop %s: remove its network policy: %w", row.ID, err)
	}
	if err := s.Runtime.Stop(ctx, row.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return Sandbox{}, fmt.Errorf("stop %s: %w", row.ID, err)
	}
	if kept != nil {
		s.stopped.put(row.ID, row.Owner, kept)
	}
	updated, err := s.Store.UpdateSandboxState(ctx, row.ID, nil, store.StateStopped, "")
	if err != nil {
		return Sandbox{}, s.mapStoreErr(err, row.ID)
	}
	s.dropImage(row.ID)      // a hibernated sandbox's processes end with its stop
	s.Admission.Park(row.ID) // its files stay: its disk still counts
	return fromRow(updated), nil
}

// Start starts a stopped sandbox (or one in error whose container still
// exists) and returns once its agent answers. Starting a running sandbox
// returns it unchanged; a paused one is resumed (Resume). Past the
// capacity budget it is ErrCapacityExhausted and the sandbox stays
// stopped.
func (s *Service) Start(ctx context.Context, c Caller, idOrName string) (Sandbox, error) {
	if err := s.requireReady(); err != nil {
		return Sandbox{}, err // admission is not recomputed yet
	}
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return Sandbox{}, err
	}
	defer unlock()
	switch row.State {
	case store.StateRunning:
		return fromRow(row), nil
	case store.StatePaused:
		r, err := s.resumeLocked(ctx, c, row)
		return r.Sandbox, err
	case store.StateCreating:
		return Sandbox{}, fmt.Errorf("sandbox %s is still being created: %w", row.ID, ErrConflict)
	}
	return s.startLocked(ctx, c, row)
}

// startLocked is Start of a sandbox that is not running, under its
// transition lock.
func (s *Service) startLocked(ctx context.Context, c Caller, row store.Sandbox) (Sandbox, error) {
	req := holding(row)
	if err := s.Admission.ReserveWithin(row.ID, req, c.Quota); err != nil {
		return Sandbox{}, admissionErr(err)
	}
	// A host reboot took the staged subpath mounts the container's
	// configuration names: staged again before it starts, never an empty
	// directory in their place.
	if err := s.restage(ctx, row); err != nil {
		s.Admission.Park(row.ID)
		return Sandbox{}, fmt.Errorf("start %s: stage its mounts: %w", row.ID, err)
	}
	if err := s.Runtime.Start(ctx, row.ID); err != nil {
		// A destroy does not take the transition lock: one that began
		// meanwhile is removing the container under this start, and the
		// sandbox is gone to callers (and holds nothing, whichever of its
		// release and this start's reservation came first).
		if now, gerr := s.Store.GetSandbox(ctx, row.ID); errors.Is(gerr, store.ErrNotFound) || gerr == nil && !now.DestroyingSince.IsZero() {
			s.Admission.Release(row.ID)
			return Sandbox{}, fmt.Errorf("sandbox %s was destroyed while it started: %w", row.ID, ErrNotFound)
		}
		s.Admission.Park(row.ID)
		if errors.Is(err, runtime.ErrNotFound) {
			return Sandbox{}, fmt.Errorf("sandbox %s has no container left (state %s): %w", row.ID, row.State, ErrConflict)
		}
		return Sandbox{}, fmt.Errorf("start %s: %w", row.ID, err)
	}
	// Its network policy: its address may be another one now.
	if err := s.applyRowPolicy(ctx, row); err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
		if serr := s.Runtime.Stop(sctx, row.ID); serr != nil {
			s.Logger.Warn("start: stop after the network policy failed", "sandbox", row.ID, "err", serr)
		}
		cancel()
		s.Admission.Park(row.ID)
		return Sandbox{}, fmt.Errorf("start %s: apply its network policy: %w", row.ID, err)
	}
	// A started agent has lost what the daemon handed it with its memory.
	if err := s.configureAgent(ctx, row); err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
		if serr := s.Runtime.Stop(sctx, row.ID); serr != nil {
			s.Logger.Warn("start: stop after the secret env failed", "sandbox", row.ID, "err", serr)
		}
		cancel()
		s.Admission.Park(row.ID)
		return Sandbox{}, fmt.Errorf("start %s: hand the secret env to the agent: %w", row.ID, err)
	}
	updated, err := s.Store.UpdateSandboxState(ctx, row.ID, nil, store.StateRunning, "")
	if err != nil {
		return Sandbox{}, s.mapStoreErr(err, row.ID)
	}
	s.stopped.drop(row.ID) // its agent keeps its logs again, from empty
	return fromRow(updated), nil
}

// VolumeRestager is what a Volumes that stages subpath mounts outside the
// runtime offers Start: staging again those that are gone.
type VolumeRestager interface {
	Restage(ctx context.Context, owner, sandboxID string, mounts []Mount) error
}

// restage stages again the gone subpath mounts of row's sandbox; a
// sandbox without subpath mounts costs a scan of its mounts, no I/O.
func (s *Service) restage(ctx context.Context, row store.Sandbox) error {
	rs, ok := s.Volumes.(VolumeRestager)
	if !ok {
		return nil
	}
	mounts := fromRow(row).Mounts
	if !slices.ContainsFunc(mounts, func(m Mount) bool { return m.Subpath != "" }) {
		return nil
	}
	return rs.Restage(ctx, row.Owner, row.ID, mounts)
}

// Update changes a sandbox's timeout and tags. A timeout counts from now;
// zero (with SetTimeout) clears it. Repeating an update is harmless.
type Update struct {
	SetTimeout bool
	Timeout    time.Duration
	// ExtendOnly, with SetTimeout, only ever moves the expiry later: a
	// sandbox whose expiry is already past now+Timeout, or that has none,
	// keeps it (decided under the writer).
	ExtendOnly bool
	Tags       map[string]string // nil: unchanged
	// Lifecycle, when not nil, replaces the sandbox's lifecycle rules;
	// its idle time starts again.
	Lifecycle *Lifecycle
}

// UpdateSandbox applies u and returns the sandbox.
func (s *Service) UpdateSandbox(ctx context.Context, c Caller, idOrName string, u Update) (Sandbox, error) {
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return Sandbox{}, err
	}
	var su store.SandboxUpdate
	if u.SetTimeout {
		if u.Timeout < 0 || u.Timeout > maxTimeout {
			return Sandbox{}, invalid("timeout_s", "must be between 0 and %d seconds", int(maxTimeout.Seconds()))
		}
		exp := time.Time{}
		if u.Timeout > 0 {
			exp = s.Clock().Add(u.Timeout)
		}
		su.ExpiresAt = &exp
		su.ExtendOnly = u.ExtendOnly
	}
	if u.Tags != nil {
		probe := CreateRequest{Tags: u.Tags, MilliCPU: defaultMilliCPU, MemoryMB: defaultMemoryMB, Image: "x"}
		if _, err := s.normalize(probe); err != nil {
			return Sandbox{}, err
		}
		su.Tags = &u.Tags
	}
	if l := u.Lifecycle; l != nil {
		if err := l.Validate(); err != nil {
			return Sandbox{}, err
		}
		sl := storeLifecycle(*l)
		su.Lifecycle = &sl
		if spec := specOf(row); spec.PauseOnTimeout != l.PauseOnTimeout || spec.TimeoutPause != l.TimeoutPause || (spec.Wake != nil) != l.AutoResume {
			spec.PauseOnTimeout, spec.TimeoutPause = l.PauseOnTimeout, l.TimeoutPause
			if l.AutoResume && spec.Wake == nil {
				// The caller's quota, as a create's: a wake is held to it.
				spec.Wake = &wakeRule{Quota: c.Quota}
			} else if !l.AutoResume {
				spec.Wake = nil
			}
			su.Spec = marshalSpec(spec)
		}
	}
	updated, err := s.Store.UpdateSandbox(ctx, row.ID, su)
	if err != nil {
		return Sandbox{}, s.mapStoreErr(err, row.ID)
	}
	return fromRow(updated), nil
}
