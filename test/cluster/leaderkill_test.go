package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Bounds of the leader-kill test.
const (
	// keyDeadline bounds one key's create and its retries: the dead
	// leader's lease (10 s) runs out, etcd elects another leader, and the
	// key is rebound to a live node, on a busy 2-core machine.
	keyDeadline = 3 * time.Minute
	// retryPause is the pause between a key's attempts after a retryable
	// answer (503 or no answer): the key is bound to the dead node until
	// its lease runs out, so a faster retry only adds load.
	retryPause = 500 * time.Millisecond
)

// keyRun is what the creates of one Idempotency-Key answered.
type keyRun struct {
	Key string
	// IDs are the sandboxes of the key's 201 answers, in order.
	IDs []string
	// Attempts counts every call; Retryable the 503s and calls with no
	// answer among them.
	Attempts, Retryable int
	// Err is why the key did not end with a 201: a non-retryable answer,
	// or the last retryable one when the deadline passed.
	Err error
}

// createUntil201 sends the create body with Idempotency-Key key to nodes,
// round robin from nodes[first], until one answers 201, retrying 503s and
// calls that got no answer, for at most keyDeadline.
func createUntil201(ctx context.Context, nodes []*daemontest.Daemon, first int, key string, body map[string]any) keyRun {
	run := keyRun{Key: key}
	deadline := time.Now().Add(keyDeadline)
	for i := first; ; i++ {
		d := nodes[i%len(nodes)]
		run.Attempts++
		a, err := call(ctx, d, http.MethodPost, "/v1/sandboxes", body, "Idempotency-Key", key)
		switch {
		case err == nil && a.Status == http.StatusCreated:
			var sb sandbox
			if err := json.Unmarshal(a.Body, &sb); err != nil || sb.ID == "" {
				run.Err = fmt.Errorf("create through %s: 201 without a sandbox: %s", d.NodeID(), a.Body)
				return run
			}
			run.IDs = append(run.IDs, sb.ID)
			run.Err = nil
			return run
		case err != nil:
			run.Retryable++
			run.Err = err
		case a.Status == http.StatusServiceUnavailable:
			run.Retryable++
			run.Err = fmt.Errorf("create through %s: %v", d.NodeID(), a)
		default:
			run.Err = fmt.Errorf("create through %s: %v, want 201 or a retryable 503", d.NodeID(), a)
			return run
		}
		if time.Now().After(deadline) {
			run.Err = fmt.Errorf("no 201 in %v (%d attempts); last: %w", keyDeadline, run.Attempts, run.Err)
			return run
		}
		select {
		case <-ctx.Done():
			run.Err = fmt.Errorf("%w; last: %w", ctx.Err(), run.Err)
			return run
		case <-time.After(retryPause):
		}
	}
}

// etcdLeader is the node of c whose etcd member leads, as `sandboxd
// cluster members` on d prints it (the LEADER column).
func etcdLeader(ctx context.Context, c *daemontest.Cluster, d *daemontest.Daemon) (*daemontest.Daemon, error) {
	var leader *daemontest.Daemon
	err := testenv.Poll(ctx, testenv.Deadline, func() error {
		table, err := c.Members(ctx, d)
		if err != nil {
			return fmt.Errorf("cluster members on %s: %w: %s", d.NodeID(), err, table)
		}
		for line := range strings.Lines(table) {
			f := strings.Fields(line)
			if len(f) < 3 || f[2] != "true" {
				continue
			}
			for _, n := range c.Nodes {
				if n.NodeID() == f[0] {
					leader = n
					return nil
				}
			}
			return fmt.Errorf("the leader %s is no node of this cluster:\n%s", f[0], table)
		}
		return fmt.Errorf("no etcd leader yet:\n%s", table)
	})
	return leader, err
}

// waitDeparted waits until every one of nodes lists gone as down (its
// lease expired: `sandboxd cluster members` shows no API for it).
func waitDeparted(ctx context.Context, c *daemontest.Cluster, gone *daemontest.Daemon, nodes ...*daemontest.Daemon) error {
	return testenv.Poll(ctx, failoverDeadline, func() error {
		for _, d := range nodes {
			table, err := c.Members(ctx, d)
			if err != nil {
				return fmt.Errorf("cluster members on %s: %w: %s", d.NodeID(), err, table)
			}
			for line := range strings.Lines(table) {
				if f := strings.Fields(line); len(f) >= 4 && f[0] == gone.NodeID() && f[3] != "(down)" {
					return fmt.Errorf("%s still lists %s as live:\n%s", d.NodeID(), gone.NodeID(), table)
				}
			}
		}
		return nil
	})
}

// containersOn lists the containers (any state) of nodes, by sandbox id.
func containersOn(ctx context.Context, nodes ...*daemontest.Daemon) (map[string][]ctr, error) {
	out := map[string][]ctr{}
	if engineFree() {
		all, err := ociContainers(ctx)
		for id, l := range all {
			for _, x := range l {
				if slices.ContainsFunc(nodes, func(d *daemontest.Daemon) bool { return d.NodeID() == x.Node }) {
					out[id] = append(out[id], x)
				}
			}
		}
		return out, err
	}
	for _, d := range nodes {
		list, err := docker(ctx, "ps", "-a", "--no-trunc", "--filter", "label="+labelNode+"="+d.NodeID(),
			"--format", `{{.Label "`+labelSandbox+`"}} {{.Names}} {{.State}}`)
		if err != nil {
			return nil, err
		}
		for line := range strings.Lines(list) {
			if f := strings.Fields(line); len(f) == 3 {
				out[f[0]] = append(out[f[0]], ctr{Name: f[1], Node: d.NodeID(), State: f[2]})
			}
		}
	}
	return out, nil
}

// doubled lists the sandbox ids of cs with more than one running
// container.
func doubled(cs map[string][]ctr) []string {
	var ids []string
	for id, list := range cs {
		n := 0
		for _, x := range list {
			if x.State == "running" {
				n++
			}
		}
		if n > 1 {
			ids = append(ids, fmt.Sprintf("%s %+v", id, list))
		}
	}
	slices.Sort(ids)
	return ids
}

// When the node whose etcd member leads is killed (SIGKILL) while creates,
// each with its own Idempotency-Key, are in flight through the two other
// nodes, every create retried with its key (503s and calls without an
// answer are retryable) ends with a 201 once etcd has a new leader and the
// dead node's lease ran out (a key bound to it is rebound to a live node);
// each key names one sandbox, no two keys the same; the survivors run
// exactly one container per key and nothing else. A sandbox the dead node
// made before it died is lost, not doubled: a retry of its key makes a
// new one on a survivor (the rebind). When the dead node comes back no
// sandbox id runs twice, and every key still resolves to its running
// sandbox.
func TestCluster_LeaderKillDuringCreates(t *testing.T) {
	requireDocker(t)
	c := env.dt.StartCluster(t, daemontest.Nodes("la", "lb", "lc"))
	ctx := testContext(t, 15*time.Minute)

	victim, err := etcdLeader(ctx, c, c.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	var survivors []*daemontest.Daemon
	for _, d := range c.Nodes {
		if d != victim {
			survivors = append(survivors, d)
		}
	}
	t.Logf("etcd leader: %s; creates go to %s and %s", victim.NodeID(), survivors[0].NodeID(), survivors[1].NodeID())

	// n creates, inFlight at a time; the leader dies once killAfter of
	// them answered, with the next ones under way.
	const n, inFlight, killAfter = 12, 3, 3
	bodies := make([]map[string]any, n)
	runs := make([]keyRun, n)
	for i := range n {
		key := sandboxd.NewIdempotencyKey()
		runs[i].Key = key
		bodies[i] = createBody("", map[string]string{"KEY": key}, "")
	}
	slots := make(chan struct{}, inFlight)
	answered := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			runs[i] = createUntil201(ctx, survivors, i, runs[i].Key, bodies[i])
			answered <- i
		})
	}
	killed := false
	for range killAfter {
		select {
		case <-answered:
		case <-ctx.Done():
		}
	}
	if ctx.Err() == nil {
		// Still the leader? An election on a busy machine could have
		// moved it; then this is no leader kill.
		if now, err := etcdLeader(ctx, c, survivors[0]); err != nil || now != victim {
			t.Errorf("the etcd leader moved from %s before the kill (now %v, %v)", victim.NodeID(), now, err)
		}
		victim.Kill()
		killed = true
	}
	killedAt := time.Now()
	wg.Wait()
	if !killed {
		t.Fatalf("the leader was not killed: %v", ctx.Err())
	}
	t.Logf("every key answered %v after the kill", time.Since(killedAt).Round(time.Second))

	ids := map[string]int{} // sandbox id → key index
	for i, r := range runs {
		t.Logf("key %d: %d attempts (%d retryable), ids %v", i, r.Attempts, r.Retryable, r.IDs)
		if r.Err != nil || len(r.IDs) != 1 {
			t.Errorf("key %d (%s): %v, ids %v; want one 201", i, r.Key, r.Err, r.IDs)
			continue
		}
		if j, dup := ids[r.IDs[0]]; dup {
			t.Errorf("keys %d and %d both answered sandbox %s", j, i, r.IDs[0])
		}
		ids[r.IDs[0]] = i
	}
	if t.Failed() {
		t.FailNow()
	}

	// Settle: the survivors see the leader gone; each key's sandbox is a
	// survivor's (one container) or the dead node's (none on a survivor).
	if err := waitDeparted(ctx, c, victim, survivors...); err != nil {
		t.Fatal(err)
	}
	var onVictim []int
	for i, r := range runs {
		cs, err := containersOf(ctx, r.IDs[0])
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(cs, func(x ctr) bool { return x.Node == victim.NodeID() }) {
			onVictim = append(onVictim, i)
		}
	}
	t.Logf("keys whose sandbox the dead leader made: %v", onVictim)

	// A key whose sandbox died with the leader reads as lost through a
	// survivor; its retry is rebound to a survivor and makes a sandbox
	// there. Every other key's retry answers its one sandbox again.
	for _, i := range onVictim {
		id := runs[i].IDs[0]
		err := testenv.Poll(ctx, failoverDeadline, func() error {
			a, err := call(ctx, survivors[i%2], http.MethodGet, "/v1/sandboxes/"+id, nil)
			if err != nil {
				return err
			}
			if a.Status == http.StatusNotFound || a.Status == http.StatusGone {
				return nil
			}
			return fmt.Errorf("GET %s (made by the dead leader): %v, want 404 or 410 lost", id, a)
		})
		if err != nil {
			t.Error(err)
		}
	}
	for i := range runs {
		again := createUntil201(ctx, survivors, i+1, runs[i].Key, bodies[i])
		if again.Err != nil {
			t.Errorf("key %d again: %v", i, again.Err)
			continue
		}
		runs[i].IDs = append(runs[i].IDs, again.IDs...)
		if slices.Contains(onVictim, i) {
			t.Logf("key %d, whose %s the dead leader made, retried: %s (%d attempts)", i, runs[i].IDs[0], again.IDs[0], again.Attempts)
		}
		if !slices.Contains(onVictim, i) && again.IDs[0] != runs[i].IDs[0] {
			t.Errorf("key %d: a retry answered %s, the first 201 %s: want one sandbox per key", i, again.IDs[0], runs[i].IDs[0])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// final is each key's sandbox now: its last answer.
	final := map[string]int{}
	for i, r := range runs {
		id := r.IDs[len(r.IDs)-1]
		if j, dup := final[id]; dup {
			t.Errorf("keys %d and %d both answered sandbox %s", j, i, id)
		}
		final[id] = i
	}
	if t.Failed() {
		t.FailNow()
	}

	// The survivors run exactly the keys' sandboxes, one running
	// container each, and nothing else (an undone create's leftovers
	// go within the wait).
	err = testenv.Poll(ctx, testenv.Deadline, func() error {
		cs, err := containersOn(ctx, survivors...)
		if err != nil {
			return err
		}
		var bad []string
		for id := range final {
			if l := cs[id]; len(l) != 1 || l[0].State != "running" || !qualifiedName(l[0], id) {
				bad = append(bad, fmt.Sprintf("key %d's %s: %+v", final[id], id, l))
			}
		}
		for id, l := range cs {
			if _, ok := final[id]; !ok {
				bad = append(bad, fmt.Sprintf("%s, no key's: %+v", id, l))
			}
		}
		if len(bad) > 0 {
			slices.Sort(bad)
			return fmt.Errorf("the survivors' containers, want one running per key and no other:\n\t%s", strings.Join(bad, "\n\t"))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	resolves := func(when string) {
		t.Helper()
		for _, id := range slices.Sorted(maps.Keys(final)) {
			i := final[id]
			d := survivors[i%2]
			a, err := call(ctx, d, http.MethodGet, "/v1/sandboxes/"+id, nil)
			if err != nil {
				t.Errorf("%s: %v", when, err)
				continue
			}
			var sb struct {
				ID, State string
			}
			_ = json.Unmarshal(a.Body, &sb)
			if a.Status != http.StatusOK || sb.ID != id || sb.State != "running" {
				t.Errorf("%s: key %d: GET %s through %s: %v, want 200 running", when, i, id, d.NodeID(), a)
			}
		}
	}
	resolves("with the leader dead")

	// The dead node comes back: it drops or revives its own copies, and
	// no sandbox runs twice.
	sctx, cancel := context.WithTimeout(ctx, daemontest.StartTimeout)
	err = victim.Start(sctx)
	cancel()
	if err != nil {
		t.Fatalf("restart %s: %v", victim.NodeID(), err)
	}
	if err := c.WaitReady(ctx, c.Nodes...); err != nil {
		t.Fatal(err)
	}
	err = testenv.Poll(ctx, testenv.Deadline, func() error {
		cs, err := containersOn(ctx, c.Nodes...)
		if err != nil {
			return err
		}
		if d := doubled(cs); len(d) > 0 {
			return fmt.Errorf("sandboxes with more than one running container:\n\t%s", strings.Join(d, "\n\t"))
		}
		for id, i := range final {
			if !slices.ContainsFunc(cs[id], func(x ctr) bool { return x.State == "running" && x.Node != victim.NodeID() }) {
				return fmt.Errorf("key %d's sandbox %s: containers %+v, want its survivor's running", i, id, cs[id])
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	resolves("with the leader back")
	if cs, err := containersOn(ctx, victim); err == nil {
		t.Logf("the returned %s runs %d container(s) of its own: %v", victim.NodeID(), len(cs), slices.Sorted(maps.Keys(cs)))
	}
}
