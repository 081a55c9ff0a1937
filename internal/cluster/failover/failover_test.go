package failover_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/cluster/failover"
	"github.com/sandboxd/sandboxd/internal/service"
)

// dir is a directory of placements in memory; its transactions apply at
// once. Only what Failover calls is real.
type dir struct {
	mu         sync.Mutex
	departed   chan string
	live       []cluster.NodeInfo
	placements map[string]cluster.Placement
	// lagging are the watch's copies that lag the cluster: Placement
	// answers them, the transactions see placements.
	lagging map[string]cluster.Placement
}

func (d *dir) Departed() <-chan string { return d.departed }
func (d *dir) Nodes() []cluster.NodeInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]cluster.NodeInfo(nil), d.live...)
}

func (d *dir) Placement(id string) (cluster.Placement, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.lagging[id]; ok {
		return p, true
	}
	p, ok := d.placements[id]
	return p, ok
}

func (d *dir) PlacementsOf(node string) []cluster.Placement {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []cluster.Placement
	for id, p := range d.placements {
		if l, ok := d.lagging[id]; ok {
			p = l
		}
		if p.Node == node {
			out = append(out, p)
		}
	}
	return out
}

func (d *dir) PlacementNodes() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]bool{}
	for _, p := range d.placements {
		out[p.Node] = true
	}
	return out
}

func (d *dir) UpdatePlacement(_ context.Context, id string, f func(*cluster.Placement) error) (cluster.Placement, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.placements[id]
	if !ok {
		return p, cluster.ErrNotFound
	}
	if err := f(&p); err != nil {
		return p, err
	}
	p.Revision++ // every write moves it, as etcd's
	d.placements[id] = p
	return p, nil
}

func (d *dir) ReleasePlacementOf(_ context.Context, id, node string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.placements[id].Node == node {
		delete(d.placements, id)
	}
	return nil
}

func (d *dir) TakeOver(_ context.Context, p cluster.Placement, to string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.placements[p.ID]
	if q.Node != p.Node {
		return false, nil
	}
	q.Node, q.State = to, cluster.StateCreating
	d.placements[p.ID] = q
	return true, nil
}

func (d *dir) Open(sealed, _ []byte) ([]byte, error) { return sealed, nil }

// svc records the recreates; its other calls succeed.
type svc struct {
	mu         sync.Mutex
	recreated  []string
	exposed    []int
	recreating func(id string) bool // asked during each Recreate
	busy       []bool
	local      []string // LocalSandboxIDs
	destroyed  []string // DestroyLocal's ids
}

func (s *svc) Recreate(_ context.Context, id string, _ []byte) (*service.Created, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recreated = append(s.recreated, id)
	s.busy = append(s.busy, s.recreating(id))
	return &service.Created{}, nil
}

func (s *svc) ExposePort(_ context.Context, _ service.Caller, _ string, port int, _ string, _ bool) (service.Exposure, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exposed = append(s.exposed, port)
	return service.Exposure{}, nil
}
func (s *svc) ReplayDomain(context.Context, string, string, int) error { return nil }
func (s *svc) LocalSandboxIDs(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.local...), nil
}

func (s *svc) DestroyLocal(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.destroyed = append(s.destroyed, id)
	return nil
}
func (s *svc) Get(context.Context, service.Caller, string) (service.Sandbox, error) {
	return service.Sandbox{}, errors.New("unused")
}

// When a node departs, its sandbox that asks to be recreated is recreated
// here (marked as being recreated meanwhile, its ports replayed, then
// running on this node) and the one that does not is marked lost.
func TestFailover_RecreatesWhatAsksAndMarksTheRestLost(t *testing.T) {
	d := &dir{departed: make(chan string, 1), live: []cluster.NodeInfo{{ID: "n1"}}, placements: map[string]cluster.Placement{
		"sb-1": {ID: "sb-1", Node: "n2", State: cluster.StateRunning, Failover: service.FailoverRecreate, Spec: []byte("{}"),
			Ports: []cluster.PortIntent{{Port: 8080, Protocol: "http"}}},
		"sb-2": {ID: "sb-2", Node: "n2", State: cluster.StateRunning},
		"sb-3": {ID: "sb-3", Node: "n3", State: cluster.StateRunning, Failover: service.FailoverRecreate, Spec: []byte("{}")},
	}}
	s := &svc{}
	f := &failover.Failover{Dir: d, Service: s, Self: "n1", Started: time.Now(), Healthy: func() bool { return true }}
	s.recreating = f.Recreating
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	d.departed <- "n2"
	deadline := time.Now().Add(30 * time.Second)
	for {
		p1, _ := d.Placement("sb-1")
		p2, _ := d.Placement("sb-2")
		if p1.Node == "n1" && p1.State == cluster.StateRunning && p2.State == cluster.StateLost {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after n2 departed: sb-1 %+v, sb-2 %+v; want sb-1 running on n1, sb-2 lost", p1, p2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recreated) != 1 || s.recreated[0] != "sb-1" || !s.busy[0] {
		t.Errorf("recreated %v (being recreated meanwhile: %v), want [sb-1] marked", s.recreated, s.busy)
	}
	if len(s.exposed) != 1 || s.exposed[0] != 8080 {
		t.Errorf("ports replayed %v, want [8080]", s.exposed)
	}
	if f.Recreating("sb-1") {
		t.Error("sb-1 still marked as being recreated")
	}
	if p3, _ := d.Placement("sb-3"); p3.Node != "n3" {
		t.Errorf("sb-3 of a node that did not depart moved: %+v", p3)
	}
}

// A node that comes back reads the watch's copy of the placements, which
// lags the cluster: there its sandbox is still lost, while its owner has
// deleted it since (a tombstone). DropStale used to revive it from the
// stale copy, writing "running" over the tombstone: the deleted sandbox
// ran on under its old placement (seen in test/cluster's
// TestCluster_FailoverRecreatesOnAnotherNode, the victim restarted a few
// seconds after the owner's delete). It is destroyed instead, and the
// tombstone stays for the destroy to release; a lost one is still revived.
func TestDropStale_LostInTheLaggingCopyButDeletedSinceIsDestroyed(t *testing.T) {
	d := &dir{departed: make(chan string), live: []cluster.NodeInfo{{ID: "n1"}}, placements: map[string]cluster.Placement{
		"sb-del":  {ID: "sb-del", Node: "n1", State: cluster.StateDeleted},
		"sb-lost": {ID: "sb-lost", Node: "n1", State: cluster.StateLost},
	}, lagging: map[string]cluster.Placement{
		"sb-del":  {ID: "sb-del", Node: "n1", State: cluster.StateLost},
		"sb-lost": {ID: "sb-lost", Node: "n1", State: cluster.StateLost},
	}}
	s := &svc{local: []string{"sb-del", "sb-lost"}}
	f := &failover.Failover{Dir: d, Service: s, Self: "n1", Started: time.Now(), Healthy: func() bool { return true }}
	if err := f.DropStale(t.Context()); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	del, lost := d.placements["sb-del"], d.placements["sb-lost"]
	d.mu.Unlock()
	if del.State != cluster.StateDeleted {
		t.Errorf("the deleted sandbox's placement: %+v, want its tombstone (deleted) kept", del)
	}
	if lost.State != cluster.StateRunning {
		t.Errorf("the lost sandbox's placement: %+v, want running again", lost)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.destroyed) != 1 || s.destroyed[0] != "sb-del" {
		t.Errorf("destroyed %v, want [sb-del]", s.destroyed)
	}
}

// Every surviving node marks a departed node's sandboxes lost from its
// own copy of the directory, which lags the cluster. markLost used to
// write "lost" whatever the fresh placement said: over a tombstone (its
// owner deleted it since, and its node, when it returns, would then
// revive it), and again over one another survivor had marked, a needless
// change that made the owner's delete (a transaction on the placement's
// revision) answer 503 "the cluster did not record the delete"
// (test/cluster's TestCluster_FailoverRecreatesOnAnotherNode, once in
// three runs). Neither is written now.
func TestFailover_MarkLostLeavesAMarkedOrDeletedPlacementAlone(t *testing.T) {
	d := &dir{departed: make(chan string), live: []cluster.NodeInfo{{ID: "n1"}}, placements: map[string]cluster.Placement{
		"sb-del":  {ID: "sb-del", Node: "n2", State: cluster.StateDeleted},
		"sb-lost": {ID: "sb-lost", Node: "n2", State: cluster.StateLost, Revision: 7},
		"sb-run":  {ID: "sb-run", Node: "n2", State: cluster.StateRunning},
	}, lagging: map[string]cluster.Placement{
		"sb-del":  {ID: "sb-del", Node: "n2", State: cluster.StateRunning},
		"sb-lost": {ID: "sb-lost", Node: "n2", State: cluster.StateRunning},
	}}
	s := &svc{}
	f := &failover.Failover{Dir: d, Service: s, Self: "n1", Started: time.Now(), Healthy: func() bool { return true }}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	d.departed <- "n2"
	d.departed <- "n3" // taken once n2's departure is handled
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.placements["sb-del"]; p.State != cluster.StateDeleted {
		t.Errorf("deleted since the copy: %+v, want its tombstone kept", p)
	}
	if p := d.placements["sb-lost"]; p.State != cluster.StateLost || p.Revision != 7 {
		t.Errorf("marked lost by another node: %+v, want it unwritten (lost, revision 7)", p)
	}
	if p := d.placements["sb-run"]; p.State != cluster.StateLost {
		t.Errorf("running: %+v, want lost", p)
	}
}
