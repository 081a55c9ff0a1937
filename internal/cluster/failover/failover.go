// Package failover is what a cluster node does when another node's lease
// ends (docs/cluster.md, "Failover"): it recreates, on this node, the
// sandboxes of the departed node whose policy asks for it (one winner per
// sandbox across the cluster, by a takeover transaction) and marks the
// others lost; and it sweeps what a node cut off from the cluster left
// behind: local sandboxes the cluster moved elsewhere or deleted while it
// was away, and placements of this node with no sandbox behind them.
//
// It sees the cluster through Directory (*cluster.Node's watch-fed
// directory and its key transactions) and the domain through Service
// (*service.Service); the daemon only wires it.
package failover

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Directory is what failover needs of the cluster: *cluster.Node.
type Directory interface {
	Departed() <-chan string
	Nodes() []cluster.NodeInfo
	Placement(id string) (cluster.Placement, bool)
	PlacementsOf(node string) []cluster.Placement
	PlacementNodes() map[string]bool
	UpdatePlacement(ctx context.Context, id string, f func(*cluster.Placement) error) (cluster.Placement, error)
	ReleasePlacementOf(ctx context.Context, id, node string) error
	TakeOver(ctx context.Context, p cluster.Placement, newNode string) (bool, error)
	Open(sealed, ad []byte) ([]byte, error)
}

var _ Directory = (*cluster.Node)(nil)

// Service is what failover needs of the domain: *service.Service.
type Service interface {
	Recreate(ctx context.Context, id string, spec []byte) (*service.Created, error)
	ExposePort(ctx context.Context, c service.Caller, idOrName string, port int, protocol string, public bool) (service.Exposure, error)
	ReplayDomain(ctx context.Context, id, hostname string, port int) error
	LocalSandboxIDs(ctx context.Context) ([]string, error)
	DestroyLocal(ctx context.Context, id string) error
	Get(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
}

var _ Service = (*service.Service)(nil)

// failoverTimeout bounds one sandbox's recreate.
const failoverTimeout = 2 * time.Minute

// RecoveryAD binds a sealed recovery spec to its sandbox: the cluster
// keys seal it under this, and a recreate opens it.
func RecoveryAD(id string) []byte { return []byte("sandboxd recovery spec " + id) }

// Failover is one node's failover. Set the exported fields, then Run.
type Failover struct {
	Dir     Directory
	Service Service
	// Self is this node's id.
	Self string
	// Healthy reports whether this node's view of the cluster is
	// current (the cluster answers): a node cut off sees every other node
	// as gone, and fails over nothing it missed.
	Healthy func() bool
	// Started is when the node joined (failoverMissed's grace).
	Started time.Time
	Logger  *slog.Logger

	// recreating holds the ids of the sandboxes this node took over and
	// is recreating (failOne): from the takeover until the local row
	// exists the placement names this node but the service knows nothing
	// of the id, and a call for it is a retryable 503, not a 404.
	recreating sync.Map
	// inFlight counts recreating's entries: a call finds in one atomic
	// load that nothing is being recreated, the common case.
	inFlight atomic.Int64
}

// Recreating reports whether this node is recreating sandbox id now.
func (f *Failover) Recreating(id string) bool {
	if f.inFlight.Load() == 0 {
		return false
	}
	_, busy := f.recreating.Load(id)
	return busy
}

// RecreatingAny reports whether this node is recreating any sandbox now.
func (f *Failover) RecreatingAny() bool { return f.inFlight.Load() > 0 }

// Run fails over the sandboxes of departed nodes and sweeps stale ones
// every staleEvery until ctx ends.
func (f *Failover) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { f.sweepStale(ctx) })
	f.failover(ctx)
	wg.Wait()
}

func (f *Failover) logger() *slog.Logger {
	if f.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.Logger
}

// failover recreates, on this node, the sandboxes of nodes that left
// (their lease expired) whose policy asks for it, one winner per sandbox
// across the cluster; it marks the others lost.
func (f *Failover) failover(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case gone := <-f.Dir.Departed():
			if gone == f.Self {
				continue
			}
			for _, p := range f.Dir.PlacementsOf(gone) {
				f.failOne(ctx, p)
			}
		}
	}
}

func (f *Failover) failOne(ctx context.Context, p cluster.Placement) {
	log := f.logger().With("sandbox", p.ID, "lost_node", p.Node)
	if f.live(p.Node) {
		// Back already (a restart whose old lease ran out after the new
		// one was granted): nothing departed.
		return
	}
	if p.State == cluster.StateLost || p.State == cluster.StateDeleted {
		return
	}
	if p.Failover != service.FailoverRecreate || len(p.Spec) == 0 {
		f.markLost(ctx, log, p.ID, p.Node)
		return
	}
	// Marked before the takeover commits, so that no call sees this
	// node named without the mark; a lost takeover clears it at once.
	// A second failOne of the same sandbox on this node (the watch and
	// the sweep of missed departures may both see it) leaves it to the
	// first: its lost takeover must not clear the mark the first one's
	// recreate stands behind (a call then found this node named, no mark
	// and no row yet: a 404 in the middle of a failover).
	f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	if _, busy := f.recreating.LoadOrStore(p.ID, struct{}{}); busy {
		return
	}
	unmark := sync.OnceFunc(func() { f.recreating.Delete(p.ID) })
	defer unmark()
	won, err := f.Dir.TakeOver(ctx, p, f.Self)
	if err != nil || !won {
		if err != nil {
			log.Warn("failover: take over", "err", err)
		}
		return
	}
	spec, err := f.Dir.Open(p.Spec, RecoveryAD(p.ID))
	if err != nil {
		log.Error("failover: open the recovery spec; the sandbox is lost", "err", err)
		f.markLost(ctx, log, p.ID, f.Self)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	start := time.Now()
	if _, err := f.Service.Recreate(rctx, p.ID, spec); err != nil {
		log.Error("failover: recreate; the sandbox is lost", "err", err)
		f.markLost(ctx, log, p.ID, f.Self)
		return
	}
	// The local row exists and runs: the service answers for the
	// sandbox from here on (its ports and domains follow). A mark kept
	// longer would answer 503 to calls that the sandbox already serves.
	unmark()
	caller := service.Caller{Owner: p.Owner}
	for _, port := range p.Ports {
		if _, err := f.Service.ExposePort(rctx, caller, p.ID, port.Port, port.Protocol, port.Public); err != nil {
			log.Warn("failover: replay a port", "port", port.Port, "err", err)
		}
	}
	for _, d := range p.Domains {
		host, port, _ := strings.Cut(d, ":")
		n, _ := strconv.Atoi(port)
		if err := f.Service.ReplayDomain(rctx, p.ID, host, n); err != nil {
			log.Warn("failover: replay a domain", "hostname", host, "err", err)
		}
	}
	if _, err := f.Dir.UpdatePlacement(rctx, p.ID, func(q *cluster.Placement) error { q.State = cluster.StateRunning; return nil }); err != nil {
		log.Warn("failover: mark running", "err", err)
	}
	log.Info("failover: recreated here", "took", time.Since(start).Round(time.Millisecond))
}

// markLost marks id's placement lost while node still holds it. Every
// surviving node does so from its own copy of the directory, which lags
// the cluster: one already lost (another node marked it) is not written
// again, so its owner's delete (a tombstone, a transaction on the
// placement's revision) does not meet a needless change, and one its
// owner deleted meanwhile keeps its tombstone.
func (f *Failover) markLost(ctx context.Context, log *slog.Logger, id, node string) {
	_, err := f.Dir.UpdatePlacement(ctx, id, func(q *cluster.Placement) error {
		if q.Node != node {
			return cluster.ErrConflict // moved meanwhile
		}
		if q.State == cluster.StateLost || q.State == cluster.StateDeleted {
			return cluster.ErrConflict // marked, or deleted, since the copy
		}
		q.State = cluster.StateLost
		return nil
	})
	if err != nil && !errors.Is(err, cluster.ErrConflict) && !errors.Is(err, cluster.ErrNotFound) {
		log.Warn("failover: mark lost", "err", err)
	}
}

// live reports whether node holds a membership lease now.
func (f *Failover) live(node string) bool {
	for _, n := range f.Dir.Nodes() {
		if n.ID == node {
			return true
		}
	}
	return false
}

// dropStale destroys, at startup, the local sandboxes whose placement
// another node holds now (moved by a failover while this node was away).
// Their containers carry this node's name and label; the new owner's are
// never touched, nor its keys (clusterKeys releases only this node's).
// Those the cluster declared lost while the node was away, and that are
// still here, are running again: their placement says so. The directory
// is the watch's copy, which lags the cluster (a node that has just
// restarted reads its own member, still catching up): a sandbox it shows
// lost may have been deleted by its owner since, so the revive holds only
// while the fresh placement still says lost, and one deleted meanwhile is
// destroyed here, as one the directory shows deleted is.
func (f *Failover) DropStale(ctx context.Context) error {
	ids, err := f.Service.LocalSandboxIDs(ctx)
	if err != nil {
		return err
	}
	local := make(map[string]bool, len(ids))
	for _, id := range ids {
		local[id] = true
		p, ok := f.Dir.Placement(id)
		if !ok {
			continue
		}
		if p.Node == f.Self && p.State == cluster.StateDeleted {
			f.destroyDeleted(ctx, id)
			continue
		}
		if p.Node == f.Self {
			if p.State == cluster.StateLost {
				deleted := false
				_, err := f.Dir.UpdatePlacement(ctx, id, func(q *cluster.Placement) error {
					if q.Node != f.Self || q.State != cluster.StateLost {
						// Moved, revived, or deleted by its owner since
						// the directory's copy.
						deleted = q.Node == f.Self && q.State == cluster.StateDeleted
						return cluster.ErrConflict
					}
					q.State = cluster.StateRunning
					return nil
				})
				switch {
				case deleted:
					f.destroyDeleted(ctx, id)
				case err != nil && !errors.Is(err, cluster.ErrConflict):
					f.logger().Warn("cluster: revive a sandbox declared lost", "sandbox", id, "err", err)
				}
			}
			continue
		}
		f.logger().Info("cluster: destroying a stale sandbox", "sandbox", id, "owner_node", p.Node, "state", p.State)
		if err := f.Service.DestroyLocal(ctx, id); err != nil {
			f.logger().Warn("cluster: destroy a stale sandbox", "sandbox", id, "err", err)
		}
	}
	// Placements of this node with no sandbox behind them: a create or a
	// destroy whose release the cluster did not answer. A create claims
	// after its row exists and a destroy releases before deleting it, so
	// a running placement without a row is nobody's work in progress (a
	// failover's is "creating" until its sandbox exists).
	for _, p := range f.Dir.PlacementsOf(f.Self) {
		if local[p.ID] || (p.State != cluster.StateRunning && p.State != cluster.StateCreating) {
			continue
		}
		if _, busy := f.recreating.Load(p.ID); busy {
			continue // a failover of this process's is making it
		}
		if _, err := f.Service.Get(ctx, service.Caller{Admin: true}, p.ID); !errors.Is(err, service.ErrNotFound) {
			continue // there after all (a create that finished since the list), or unknown
		}
		if p.State == cluster.StateCreating {
			// A recreate this node took over and a previous process of
			// it did not finish: the sandbox is lost (its owner's delete
			// ends it, and frees its name and template), not left
			// "being recreated" for good.
			f.logger().Info("cluster: a recreate cut short by a restart; the sandbox is lost", "sandbox", p.ID)
			f.markLost(ctx, f.logger().With("sandbox", p.ID), p.ID, f.Self)
			continue
		}
		f.logger().Info("cluster: releasing the keys of a sandbox this node does not have", "sandbox", p.ID)
		if err := f.Dir.ReleasePlacementOf(ctx, p.ID, f.Self); err != nil {
			f.logger().Warn("cluster: release orphaned keys", "sandbox", p.ID, "err", err)
		}
	}
	return nil
}

// destroyDeleted destroys the local copy of sandbox id, which its owner
// deleted while this node was away (its placement is a tombstone naming
// this node; the destroy releases it).
func (f *Failover) destroyDeleted(ctx context.Context, id string) {
	f.logger().Info("cluster: destroying a sandbox deleted while this node was away", "sandbox", id)
	if err := f.Service.DestroyLocal(ctx, id); err != nil {
		f.logger().Warn("cluster: destroy a deleted sandbox", "sandbox", id, "err", err)
	}
}

// missedGrace is how long a node waits after its start before it fails
// over sandboxes of nodes it never saw depart: after a restart of the
// whole cluster the other nodes are simply not up yet.
const missedGrace = time.Minute

// staleEvery is how often a running node looks for local sandboxes that
// the cluster moved elsewhere (it was cut off from the cluster for longer
// than its lease while its sandboxes ran on).
const staleEvery = 10 * time.Second

// sweepStale runs dropStale every staleEvery until ctx ends, and fails
// over the sandboxes of nodes that are gone but whose departure this node
// did not act on (it was missed, or a failover attempt failed).
func (f *Failover) sweepStale(ctx context.Context) {
	t := time.NewTicker(staleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := f.DropStale(ctx); err != nil && ctx.Err() == nil {
				f.logger().Warn("cluster: look for stale sandboxes", "err", err)
			}
			f.failoverMissed(ctx)
		}
	}
}

// failoverMissed runs failOne for every placement whose node holds no
// lease and that is not lost yet. It only runs while the cluster answers
// (a node cut off from it sees every other node as gone).
func (f *Failover) failoverMissed(ctx context.Context) {
	if !f.Healthy() || time.Since(f.Started) < missedGrace {
		return
	}
	live := map[string]bool{}
	for _, n := range f.Dir.Nodes() {
		live[n.ID] = true
	}
	for node := range f.Dir.PlacementNodes() {
		if live[node] {
			continue
		}
		for _, p := range f.Dir.PlacementsOf(node) {
			if p.State != cluster.StateLost && p.State != cluster.StateDeleted {
				f.failOne(ctx, p)
			}
		}
	}
}
