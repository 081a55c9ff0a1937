// Command clusterbench measures what cluster mode costs, on a
// loopback cluster of sandboxd nodes it starts itself, each figure beside a
// baseline taken in the same run:
//
//			go run ./bench/clusterbench [-exec-n 200] [-create-n 20] [-tx-phase 2s] [-tx-rounds 2] [-workers 8] [-failover=true] [-templates=true] [-bin bin] [-build]
//
//		 1. forwarding: the exec `true` round trip on a sandbox that node B owns,
//		    sent to node A (forwarded to B) beside sent to B, interleaved; then
//		    create → first exec sent to A (both calls forwarded to B) beside
//		    sent to B, keeping only sandboxes that B owns;
//		 2. cluster-wide uniqueness transactions: ClaimPlacement of named
//		    placements and their ReleasePlacement, by W concurrent callers through
//		    an internal/cluster Node on the cluster's etcd, beside a plain etcd Put
//		    and Delete of the same value through the same client, and beside the
//		    node's local SQLite sandbox insert (store.CreateSandbox), in
//		    interleaved rounds;
//		 3. the `cluster` step of the create chain (its etcd transaction) from
//		    the Server-Timing of the creates of 1, beside their `store` step;
//		 4. failover: a third node C joins after 1 (a two-member etcd has no
//		    quorum without B; it joins before 2, whose writes a late member
//		    would have to replay, so 2 runs on three members); two sandboxes
//		    with "failover":"recreate" are made on B, B is killed with SIGKILL,
//		    and the time until exec of each through A succeeds again is printed
//		    beside its parts: the daemon's lease TTL (or B's departure as a
//		    watcher saw it) plus 1's cold create → first exec.
//
//	 5. templates (run first): the first create from a template built on A,
//	    on A beside on B, which pulls it from the cluster's registry (a
//	    loopback docker-registry the bench starts; templates.go).
//
// Every node listens on 127.0.0.1 only, with its data directory in a
// temporary directory. Placement is by free memory, so node A gets a
// smaller memory budget than B and every create of 1 lands on B (C, in
// section 4, gets the creates whose two random choices miss B). Each sample
// is checked by its container's name and label all the same; one that lands
// elsewhere is discarded and counted. The bench is bounded in count and
// time; every container a node made is removed by its node label at the
// end, also on failure or Ctrl-C, and the temporary directory with it.
package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/testenv/registrytest"
)

// Bounds, and the constants the figures are read against.
const (
	// readyTimeout bounds a node's wait for /readyz 200 (its etcd member
	// and the cluster's health) after /healthz.
	readyTimeout = 90 * time.Second
	// joinRetry bounds the retries of `cluster join`, which refuses while
	// the cluster is still settling ("unhealthy cluster").
	joinRetry = 20 * time.Second
	// cmdTimeout bounds one `sandboxd cluster` command.
	cmdTimeout = 45 * time.Second
	// landAttempts bounds the creates made to get one that lands on B.
	landAttempts = 10
	// maxTxOps bounds the operations of one transaction phase.
	maxTxOps = 20000
	// releaseBound bounds a release or delete phase (it undoes what its
	// claim or put phase made, however long that takes).
	releaseBound = 60 * time.Second
	// failoverBound bounds the wait for a failed-over sandbox.
	failoverBound = 90 * time.Second
	// pollEvery is the pace of the exec retries after the kill.
	pollEvery = 100 * time.Millisecond
	// daemonLeaseTTL is internal/daemon's leaseTTL: how long a silent
	// node counts as alive.
	daemonLeaseTTL = 10 * time.Second
	// Memory budgets (MB): B has the most free memory, so placement
	// (power of two choices on free memory) always picks it; C (section 4)
	// is second, A last. The CPU budget is large enough for all sandboxes.
	budgetA, budgetB, budgetC = 16384, 65536, 32768
	cpuBudget                 = "64000"
)

type config struct {
	execN, createN, workers, txRounds int
	txPhase                           time.Duration
	image, binDir                     string
	build, failover, templates        bool
}

func main() {
	var c config
	flag.IntVar(&c.execN, "exec-n", 200, "exec round trips per side (section 1)")
	flag.IntVar(&c.createN, "create-n", 20, "create → first exec samples per side (sections 1 and 3)")
	flag.IntVar(&c.workers, "workers", 8, "concurrent callers of the transaction phases (section 2)")
	flag.IntVar(&c.txRounds, "tx-rounds", 2, "rounds of the transaction phases (section 2)")
	flag.DurationVar(&c.txPhase, "tx-phase", 2*time.Second, "length of one claim, put or insert phase (section 2)")
	flag.BoolVar(&c.failover, "failover", true, "join a third node and time a failover (section 4)")
	flag.BoolVar(&c.templates, "templates", true, "time the first create from a template on a node that lacks it (section 5; runs first)")
	flag.StringVar(&c.image, "image", "sandboxd/busybox:latest", "image of every sandbox")
	flag.StringVar(&c.binDir, "bin", "", "directory holding sandboxd and toolboxd (default: bin/ of this checkout when both are there)")
	flag.BoolVar(&c.build, "build", false, "build sandboxd and toolboxd from this checkout even when -bin has them")
	flag.Parse()
	if c.execN < 1 || c.createN < 1 || c.workers < 1 || c.txRounds < 1 || c.txPhase <= 0 || c.txPhase > time.Minute {
		fmt.Fprintln(os.Stderr, "clusterbench: -exec-n, -create-n, -workers and -tx-rounds must be at least 1, -tx-phase in (0, 1m]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) (err error) {
	tmp, err := os.MkdirTemp("", "clb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sandboxdBin, toolboxdBin, err := benchd.Binaries(ctx, c.binDir, c.build, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	tb := &testbed{sandboxd: sandboxdBin, toolboxd: toolboxdBin, root: tmp}
	if c.templates {
		// Section 5's: the registry the nodes share templates through.
		if why := registrytest.Available(); why != "" {
			fmt.Println("clusterbench: section 5 skipped:", why)
			c.templates = false
		} else {
			reg, err := registrytest.New(filepath.Join(tmp, "registry"), registrytest.Options{})
			if err == nil {
				err = reg.Start()
			}
			if err != nil {
				return fmt.Errorf("template registry: %w", err)
			}
			defer reg.Stop()
			tb.args = []string{"--registry", reg.Host}
		}
	}
	defer tb.close(&err)
	start := time.Now()
	a, err := tb.add(ctx, "cbench-a", budgetA)
	if err != nil {
		return err
	}
	bn, err := tb.add(ctx, "cbench-b", budgetB)
	if err != nil {
		return err
	}
	if err := tb.waitReady(ctx); err != nil {
		return err
	}
	fmt.Printf("clusterbench: %d nodes on 127.0.0.1 (embedded etcd members), up in %.1f s; image %s; %d CPUs; docker %s; sandboxd %s\n",
		len(tb.members), time.Since(start).Seconds(), c.image, goruntime.NumCPU(), benchd.DockerVersion(ctx), a.d.Version)
	fmt.Printf("node A = %s (memory budget %d MB), node B = %s (%d MB): placement by free memory puts every create on B\n",
		a.id, budgetA, bn.id, budgetB)

	b := &bench{cfg: c, tb: tb, a: a, b: bn}
	if c.templates {
		if err := b.templates(ctx); err != nil {
			return fmt.Errorf("section 5: %w", err)
		}
	}
	if err := b.forwardedExec(ctx); err != nil {
		return fmt.Errorf("section 1 (exec): %w", err)
	}
	if err := b.createFirstExec(ctx); err != nil {
		return fmt.Errorf("section 1 (create): %w", err)
	}
	if c.failover {
		// The third member joins before section 2's thousands of writes,
		// which a member joining after them would first have to replay.
		if err := b.addC(ctx); err != nil {
			return fmt.Errorf("section 4 (join): %w", err)
		}
	}
	if err := b.transactions(ctx); err != nil {
		return fmt.Errorf("section 2: %w", err)
	}
	b.printSteps()
	if c.failover {
		if err := b.failover(ctx); err != nil {
			return fmt.Errorf("section 4: %w", err)
		}
	}
	fmt.Printf("\ntotal %.0f s\n", time.Since(start).Seconds())
	return nil
}

// member is one node of the testbed.
type member struct {
	name         string // the node id's prefix
	id           string // node id
	dir          string // benchd's directory: data/ and the log
	client, peer string // etcd member addresses, host:port
	d            *benchd.Daemon
}

func (m *member) dataDir() string { return benchd.DataDir(m.dir) }

// testbed is the loopback cluster: the first member ran `cluster init`,
// the others `cluster join`.
type testbed struct {
	sandboxd, toolboxd, root string
	members                  []*member
	// args are every node's extra flags.
	args []string
}

// add makes a node: its node id, the cluster's files (init for the first,
// join for the others), then its daemon, started right after the join (a
// joined member counts toward the quorum at once).
func (tb *testbed) add(ctx context.Context, name string, memoryMB int) (*member, error) {
	m := &member{name: name, id: benchd.NodeID(name), dir: filepath.Join(tb.root, name)}
	ports := make([]int, 2)
	for i := range ports {
		p, err := benchd.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	m.client, m.peer = "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	if err := os.MkdirAll(m.dataDir(), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(m.dataDir(), "node-id"), []byte(m.id+"\n"), 0o600); err != nil {
		return nil, err
	}
	if len(tb.members) == 0 {
		if out, err := tb.clusterCmd(ctx, "init", "--data-dir", m.dataDir(), "--etcd-client", m.client, "--etcd-peer", m.peer); err != nil {
			return nil, fmt.Errorf("cluster init: %w: %s", err, out)
		}
	} else if err := tb.join(ctx, m); err != nil {
		return nil, err
	}
	// Host port ranges apart, so that nodes on one host never collide.
	lo := 42000 + 100*len(tb.members)
	args := append([]string{"--pool", "none", "--host-ports", fmt.Sprintf("%d-%d", lo, lo+99),
		"--memory-budget", strconv.Itoa(memoryMB), "--cpu-budget", cpuBudget}, tb.args...)
	d, err := benchd.Start(ctx, benchd.Options{Sandboxd: tb.sandboxd, Toolboxd: tb.toolboxd, Dir: m.dir, Name: name, Args: args})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", m.id, err)
	}
	m.d = d
	tb.members = append(tb.members, m)
	return m, nil
}

// join runs `cluster join` for m through the first member's API (it
// holds the cluster CA key and signs m's etcd certificate),
// retrying while the cluster settles.
func (tb *testbed) join(ctx context.Context, m *member) error {
	first := tb.members[0]
	deadline := time.Now().Add(joinRetry)
	for {
		out, err := tb.clusterCmd(ctx, "join", "--data-dir", m.dataDir(),
			"--secret-file", filepath.Join(first.dataDir(), "cluster.secret"),
			"--via-api", first.d.URL, "--etcd-client", m.client, "--etcd-peer", m.peer)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("cluster join %s: %w: %s", m.id, err, out)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (tb *testbed) clusterCmd(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	return exec.CommandContext(ctx, tb.sandboxd, append([]string{"cluster"}, args...)...).CombinedOutput()
}

// waitReady waits until every live member answers /readyz 200.
func (tb *testbed) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for _, m := range tb.members {
		for {
			resp, err := m.d.Do(ctx, "GET", "/readyz", nil)
			if err == nil && resp.Status == 200 {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not ready: %v %v: %w", m.id, err, resp, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// endpoints are the etcd client URLs of the members.
func (tb *testbed) endpoints() []string {
	var out []string
	for _, m := range tb.members {
		out = append(out, "https://"+m.client)
	}
	return out
}

// close stops every daemon at once (a stopping member takes the others'
// quorum, so one after the other would wait on each) and removes their
// containers by node label; it keeps the first error in *errp.
func (tb *testbed) close(errp *error) {
	errs := make([]error, len(tb.members))
	var wg sync.WaitGroup
	for i, m := range tb.members {
		errs[i] = *errp
		wg.Go(func() { m.d.Finish(&errs[i]) })
	}
	wg.Wait()
	if *errp == nil {
		*errp = errors.Join(errs...)
	}
}

// openNode opens an internal/cluster Node on the testbed's etcd, as a
// daemon does, under node id name. It never publishes headroom, so
// placement (which prefers free memory) never picks it.
func (tb *testbed) openNode(ctx context.Context, name string) (*cluster.Node, error) {
	hexSecret, err := os.ReadFile(filepath.Join(tb.members[0].dataDir(), "cluster.secret"))
	if err != nil {
		return nil, err
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(hexSecret)))
	if err != nil {
		return nil, fmt.Errorf("cluster.secret: %w", err)
	}
	// etcd speaks TLS only: the bench's node uses the first member's
	// client identity (the files `cluster init` made in its data dir).
	dir := tb.members[0].dataDir()
	tlsCfg, err := cluster.TLSFiles{CA: filepath.Join(dir, "etcd-ca.crt"), Cert: filepath.Join(dir, "etcd-node.crt"),
		Key: filepath.Join(dir, "etcd-node.key")}.ClientConfig()
	if err != nil {
		return nil, err
	}
	n, err := cluster.Open(ctx, cluster.Config{
		NodeID: benchd.NodeID(name), Endpoints: tb.endpoints(), TLS: tlsCfg,
		// Never called: the node has no API.
		APIURL: "http://127.0.0.1:9", Secret: secret, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster.Open: %w", err)
	}
	return n, nil
}

// table is the tables' layout: wide enough for every row's name.
func table() benchd.Table { return benchd.Table{W: os.Stdout, Width: 52} }

type bench struct {
	cfg     config
	tb      *testbed
	a, b, c *member // c joins for section 4
	joinedC time.Duration
	// coldOnB is create → first exec on B of section 1, the failover's
	// baseline.
	coldOnB []time.Duration
	// steps are the Server-Timing steps of section 1's creates.
	clusterStep, storeStep []time.Duration
	seq                    atomic.Int64
}

// body is a create of the bench's image, with a unique name (so the
// create's cluster step claims a name too, as a named create does).
func (b *bench) body(extra map[string]any) map[string]any {
	body := map[string]any{"image": b.cfg.image, "name": fmt.Sprintf("cb-%d", b.seq.Add(1))}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

// owns reports whether node m runs sandbox id's container (labelled
// sandboxd.sandbox=<id> and sandboxd.node=<node>).
func owns(ctx context.Context, m *member, id string) (bool, error) {
	_, out, err := benchd.Docker(ctx, "ps", "-aq", "--filter", "label=sandboxd.node="+m.id, "--filter", "label=sandboxd.sandbox="+id)
	return out != "", err
}

// createOn creates through via until a sandbox lands on want (at most
// landAttempts creates; the others are destroyed).
func (b *bench) createOn(ctx context.Context, via, want *member, extra map[string]any) (string, error) {
	for range landAttempts {
		c, err := via.d.Create(ctx, b.body(extra))
		if err != nil {
			if c.ID != "" {
				via.d.Destroy(ctx, c.ID)
			}
			return "", err
		}
		ok, err := owns(ctx, want, c.ID)
		if ok && err == nil {
			return c.ID, nil
		}
		via.d.Destroy(ctx, c.ID)
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("no create of %d through %s landed on %s", landAttempts, via.id, want.id)
}

// forwardedExec is section 1's exec: on one sandbox of B's, `true` through
// A beside through B, alternating which goes first.
func (b *bench) forwardedExec(ctx context.Context) error {
	id, err := b.createOn(ctx, b.b, b.b, nil)
	if err != nil {
		return err
	}
	defer b.b.d.Destroy(ctx, id)
	for range 10 { // warm-up: connections on both hops
		if err := b.a.d.ExecTrue(ctx, id); err != nil {
			return err
		}
		if err := b.b.d.ExecTrue(ctx, id); err != nil {
			return err
		}
	}
	var viaA, onB []time.Duration
	sides := []struct {
		m   *member
		out *[]time.Duration
	}{{b.a, &viaA}, {b.b, &onB}}
	for i := range b.cfg.execN {
		for j := range sides {
			s := sides[(i+j)%2]
			start := time.Now()
			if err := s.m.d.ExecTrue(ctx, id); err != nil {
				return err
			}
			*s.out = append(*s.out, time.Since(start))
		}
		benchd.Progress("exec: %d/%d", i+1, b.cfg.execN)
	}
	benchd.Progress("")
	t := table()
	fmt.Println()
	t.Head("1a. exec `true` on a sandbox B owns")
	t.Row("sent to A (forwarded to B)", viaA)
	t.Row("sent to B (baseline)", onB)
	t.Note("p50 added by forwarding (target < 5 ms)", benchd.Ms(benchd.Pct(viaA, 50)-benchd.Pct(onB, 50)))
	t.Note("p95 added by forwarding", benchd.Ms(benchd.Pct(viaA, 95)-benchd.Pct(onB, 95)))
	return nil
}

// createFirstExec is section 1's create: create → first exec `true`,
// both calls sent to A beside both sent to B; all land on B.
func (b *bench) createFirstExec(ctx context.Context) error {
	var viaA, onB []time.Duration
	missed := map[string]int{}
	sample := func(m *member) (time.Duration, bool, error) {
		start := time.Now()
		c, err := m.d.Create(ctx, b.body(nil))
		if c.ID != "" {
			defer m.d.Destroy(ctx, c.ID)
		}
		if err != nil {
			return 0, false, err
		}
		if err := m.d.ExecTrue(ctx, c.ID); err != nil {
			return 0, false, err
		}
		dur := time.Since(start)
		ok, err := owns(ctx, b.b, c.ID)
		if err != nil || !ok {
			return 0, false, err
		}
		for _, st := range c.Steps {
			switch st.Name {
			case "cluster":
				b.clusterStep = append(b.clusterStep, st.Dur)
			case "store":
				b.storeStep = append(b.storeStep, st.Dur)
			}
		}
		return dur, true, nil
	}
	// Warm-up, untimed: image metadata, connections, both paths.
	for _, m := range []*member{b.a, b.b} {
		if _, _, err := sample(m); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	b.clusterStep, b.storeStep = nil, nil
	sides := []struct {
		m   *member
		out *[]time.Duration
	}{{b.a, &viaA}, {b.b, &onB}}
	for i := 0; (len(viaA) < b.cfg.createN || len(onB) < b.cfg.createN) && i < 3*b.cfg.createN; i++ {
		for j := range sides {
			s := sides[(i+j)%2]
			if len(*s.out) >= b.cfg.createN {
				continue
			}
			dur, landed, err := sample(s.m)
			if err != nil {
				return err
			}
			if !landed {
				missed[s.m.id]++
				continue
			}
			*s.out = append(*s.out, dur)
		}
		benchd.Progress("create → exec: %d+%d/%d", len(viaA), len(onB), 2*b.cfg.createN)
	}
	benchd.Progress("")
	b.coldOnB = onB
	t := table()
	fmt.Println()
	t.Head("1b. create → first exec `true`, cold, on B")
	t.Row("create and exec sent to A (2 forwarded calls)", viaA)
	t.Row("create and exec sent to B (baseline)", onB)
	t.Note("p50 added by forwarding (target < 5 ms)", benchd.Ms(benchd.Pct(viaA, 50)-benchd.Pct(onB, 50)))
	fmt.Println("  (one create → exec varies far more between samples than one hop costs (see p95): 1a measures the hop)")
	for node, n := range missed {
		fmt.Printf("  note: %d samples sent to %s landed off B and were discarded\n", n, node)
	}
	return nil
}

// printSteps is section 3, from the creates of section 1.
func (b *bench) printSteps() {
	t := table()
	fmt.Println()
	t.Head("3. create chain steps (Server-Timing, 1b's creates)")
	t.Row("cluster (etcd: placement + name if absent)", b.clusterStep)
	t.Row("store (local SQLite insert, baseline)", b.storeStep)
	t.Note("p50 difference cluster − store", benchd.Ms(benchd.Pct(b.clusterStep, 50)-benchd.Pct(b.storeStep, 50)))
}

// txResult is the samples of one kind of operation over all rounds.
type txResult struct {
	lat     []time.Duration
	elapsed time.Duration
}

func (r *txResult) add(lat []time.Duration, elapsed time.Duration) {
	r.lat = append(r.lat, lat...)
	r.elapsed += elapsed
}

func (r *txResult) perSec() float64 { return float64(len(r.lat)) / max(r.elapsed.Seconds(), 1e-9) }

// transactions is section 2.
func (b *bench) transactions(ctx context.Context) error {
	node, err := b.tb.openNode(ctx, "cbench-tx")
	if err != nil {
		return err
	}
	defer node.Close()
	cli := node.Client()
	st, err := store.Open(ctx, filepath.Join(b.tb.root, "baseline.db"), store.Options{})
	if err != nil {
		return fmt.Errorf("store.Open: %w", err)
	}
	defer st.Close()

	putPrefix := fmt.Sprintf("/cbench/%d/", os.Getpid())
	placement := func(r, i int) cluster.Placement {
		return cluster.Placement{
			ID: fmt.Sprintf("cbtx%d-%d", r, i), Node: node.ID(), Owner: "cbench",
			Name: fmt.Sprintf("tx-%d-%d", r, i), State: cluster.StateRunning,
		}
	}
	var claims, releases, puts, deletes, inserts txResult
	w := b.cfg.workers
	for r := range b.cfg.txRounds {
		// Claims, then their releases; whatever a failed round claimed is
		// released too.
		lat, el, done, err := phase(ctx, w, b.cfg.txPhase, maxTxOps, func(ctx context.Context, i int) error {
			return node.ClaimPlacement(ctx, placement(r, i))
		})
		claims.add(lat, el)
		lat, el, _, rerr := phase(context.WithoutCancel(ctx), w, releaseBound, done, func(ctx context.Context, i int) error {
			return node.ReleasePlacement(ctx, placement(r, i).ID)
		})
		releases.add(lat, el)
		if err := errors.Join(err, rerr); err != nil {
			return fmt.Errorf("claims: %w", err)
		}
		// The same value as a plain Put, no compare, then a plain Delete.
		val, _ := json.Marshal(placement(r, 0))
		lat, el, done, err = phase(ctx, w, b.cfg.txPhase, maxTxOps, func(ctx context.Context, i int) error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := cli.Put(ctx, putPrefix+strconv.Itoa(r)+"/"+strconv.Itoa(i), string(val))
			return err
		})
		puts.add(lat, el)
		lat, el, _, derr := phase(context.WithoutCancel(ctx), w, releaseBound, done, func(ctx context.Context, i int) error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := cli.Delete(ctx, putPrefix+strconv.Itoa(r)+"/"+strconv.Itoa(i))
			return err
		})
		deletes.add(lat, el)
		if err := errors.Join(err, derr); err != nil {
			return fmt.Errorf("puts: %w", err)
		}
		// The node's local create insert, on a database of its own.
		lat, el, _, err = phase(ctx, w, b.cfg.txPhase, maxTxOps, func(ctx context.Context, i int) error {
			p := placement(r, i)
			return st.CreateSandbox(ctx, &store.Sandbox{ID: p.ID, Name: p.Name, Owner: p.Owner, Image: b.cfg.image,
				State: store.StateRunning, CPUMillis: 1000, MemoryMB: 512})
		})
		inserts.add(lat, el)
		if err != nil {
			return fmt.Errorf("inserts: %w", err)
		}
		benchd.Progress("transactions: round %d/%d", r+1, b.cfg.txRounds)
	}
	benchd.Progress("")
	fmt.Println()
	fmt.Printf("  %-52s %5s %10s %10s %10s\n",
		fmt.Sprintf("2. etcd transactions, %d callers (%d members)", w, len(b.tb.members)), "n", "p50", "p95", "ops/s")
	row := func(name string, r *txResult) {
		fmt.Printf("  %-52s %5d %10s %10s %10.0f\n", name, len(r.lat), benchd.Ms(benchd.Pct(r.lat, 50)), benchd.Ms(benchd.Pct(r.lat, 95)), r.perSec())
	}
	row("ClaimPlacement (placement + name, if absent)", &claims)
	row("  plain etcd Put, same value (baseline)", &puts)
	row("ReleasePlacement (get + fenced delete)", &releases)
	row("  plain etcd Delete (baseline)", &deletes)
	row("local SQLite sandbox insert (baseline)", &inserts)
	fmt.Printf("  %-52s %5s %10s %10s %9.2fx\n", "claims/s over puts/s", "", "", "", claims.perSec()/max(puts.perSec(), 1e-9))
	fmt.Printf("  (%d rounds of %v per claim, put and insert phase, interleaved; the daemons watch placements/, not the Put keys)\n",
		b.cfg.txRounds, b.cfg.txPhase)
	return nil
}

// phase runs op(i) for i = 0, 1, … on workers goroutines until n ops or
// the bound, and returns each op's latency, the phase's length and how
// many ops were started (every op below that count ran, or failed).
func phase(ctx context.Context, workers int, bound time.Duration, n int, op func(context.Context, int) error) ([]time.Duration, time.Duration, int, error) {
	deadline := time.Now().Add(bound)
	var (
		next  atomic.Int64
		mu    sync.Mutex
		lat   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := op(ctx, i); err != nil {
					mu.Lock()
					first = errors.Join(first, fmt.Errorf("op %d: %w", i, err))
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
			}
		})
	}
	wg.Wait()
	return lat, time.Since(start), min(int(next.Load()), n), errors.Join(first, ctx.Err())
}

// addC joins the third node, for section 4 (a two-member etcd has no
// quorum without B).
func (b *bench) addC(ctx context.Context) error {
	start := time.Now()
	c, err := b.tb.add(ctx, "cbench-c", budgetC)
	if err != nil {
		return err
	}
	if err := b.tb.waitReady(ctx); err != nil {
		return err
	}
	b.c, b.joinedC = c, time.Since(start)
	fmt.Printf("\nnode C = %s (%d MB) joined and ready in %.1f s\n", c.id, budgetC, b.joinedC.Seconds())
	return nil
}

// failover is section 4, after addC.
func (b *bench) failover(ctx context.Context) error {
	c := b.c
	var ids []string
	for range 2 {
		id, err := b.createOn(ctx, b.b, b.b, map[string]any{"failover": "recreate"})
		if err != nil {
			return err
		}
		ids = append(ids, id)
		if err := b.a.d.ExecTrue(ctx, id); err != nil {
			return fmt.Errorf("before the kill: %w", err)
		}
	}
	// Destroyed through A at the end, wherever they are then; Close
	// removes what is left by node label.
	defer func() {
		for _, id := range ids {
			b.a.d.Destroy(ctx, id)
		}
	}()
	watch, err := b.tb.openNode(ctx, "cbench-watch")
	if err != nil {
		return err
	}
	defer watch.Close()

	killed := time.Now()
	b.b.d.Kill()
	fctx, cancel := context.WithTimeout(ctx, failoverBound)
	defer cancel()
	var (
		wg       sync.WaitGroup
		departed time.Duration
		back     = make([]time.Duration, len(ids))
		errs     = make([]error, len(ids))
	)
	wg.Go(func() {
		for {
			select {
			case <-fctx.Done():
				return
			case gone := <-watch.Departed():
				if gone == b.b.id {
					departed = time.Since(killed)
					return
				}
			}
		}
	})
	for i, id := range ids {
		wg.Go(func() {
			for {
				tctx, tcancel := context.WithTimeout(fctx, 5*time.Second)
				err := b.a.d.ExecTrue(tctx, id)
				tcancel()
				if err == nil {
					back[i] = time.Since(killed)
					return
				}
				select {
				case <-fctx.Done():
					errs[i] = fmt.Errorf("sandbox %s: no exec through A within %v of the kill; last: %w", id, failoverBound, err)
					return
				case <-time.After(pollEvery):
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	where := map[string]string{}
	for _, id := range ids {
		for _, m := range []*member{b.a, c} {
			if ok, _ := owns(ctx, m, id); ok {
				where[id] = m.id
			}
		}
	}
	t := table()
	fmt.Println()
	fmt.Printf("4. failover: %d sandboxes with failover \"recreate\" on B; SIGKILL of B; A and C remain\n", len(ids))
	t.Head("time after the kill")
	if departed > 0 {
		t.Row("B's nodes/ key gone (lease expired), seen", []time.Duration{departed})
	}
	t.Row("exec through A answers again", back)
	cold := benchd.Pct(b.coldOnB, 50)
	t.Note("baseline: lease TTL + 1b's create→exec p50", benchd.Ms(daemonLeaseTTL+cold))
	if departed > 0 {
		t.Note("baseline: B gone, seen + 1b's create→exec p50", benchd.Ms(departed+cold))
	}
	for _, id := range ids {
		fmt.Printf("  %s recreated on %s\n", id, cmp.Or(where[id], "(not found by label)"))
	}
	fmt.Println("  (nothing restarts B: its stale containers are removed by its node label at the end)")
	return nil
}
