package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// poolSize is the warm pool of the pool tests' daemons.
const poolSize = 3

// poolIDs is what the daemon's pool holds now: its idle sandboxes, and
// whether it is full and not filling.
func poolIDs(ctx context.Context, c *sandboxd.Client) (ids []string, full bool, err error) {
	pools, err := c.ListPools(ctx)
	if err != nil {
		return nil, false, err
	}
	full = len(pools) > 0
	for _, p := range pools {
		ids = append(ids, p.SandboxIDs...)
		full = full && p.Ready == p.Size && p.Filling == 0
	}
	return ids, full, nil
}

// checkPoolReconciled waits until the daemon's pool is full again and
// then checks that every container of the node is either a listed
// sandbox or an idle one of the pool, never both, never neither.
func checkPoolReconciled(ctx context.Context, t *testing.T, d *daemonProcess, c *sandboxd.Client) (rows []sandboxd.Sandbox) {
	t.Helper()
	err := testenv.Poll(ctx, testenv.Deadline, func() error {
		idle, full, err := poolIDs(ctx, c)
		if err != nil {
			return err
		}
		if !full {
			return fmt.Errorf("the pool is not full: %v", idle)
		}
		if rows, err = listAll(ctx, c, sandboxd.ListOptions{Limit: 1000}); err != nil {
			return err
		}
		containers, err := nodeContainers(ctx, d.NodeID())
		if err != nil {
			return err
		}
		known := map[string]string{}
		for _, id := range idle {
			known[id] = "idle"
		}
		for _, sb := range rows {
			if known[sb.ID] != "" {
				return fmt.Errorf("%s is both listed and idle in the pool", sb.ID)
			}
			known[sb.ID] = "listed"
		}
		var bad []string
		for id, ct := range containers {
			if known[id] == "" || ct.State != "running" {
				bad = append(bad, fmt.Sprintf("%s (%s, %q)", id, ct.State, known[id]))
			}
		}
		if len(bad) > 0 || len(containers) != len(known) {
			return fmt.Errorf("%d containers for %d sandboxes; not a running listed or idle sandbox: %v", len(containers), len(known), bad)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// The warm pool on a whole daemon, killed with SIGKILL while it refills
// and while creates claim from it: nothing leaks, nothing is owned twice,
// every create answered before the kill survives it, and a daemon that
// stops (SIGTERM) leaves no idle sandbox behind.
func TestPool_KillMidRefillAndMidClaim(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "pool", "--pool", fmt.Sprintf("%s=%d", busyboxImage, poolSize))
	c := newClient(d, false)

	// Mid-refill: the pool starts filling as soon as the daemon is ready.
	if err := testenv.Poll(ctx, testenv.Deadline, func() error {
		ids, _, err := poolIDs(ctx, c)
		if err != nil || len(ids) == 0 {
			return fmt.Errorf("no idle sandbox yet (%v)", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	c = newClient(d, false)
	checkPoolReconciled(ctx, t, d, c)

	// Mid-claim: creates of the pool's class race, the daemon dies after
	// the first answer.
	const creates = 8
	type outcome struct {
		sb  *sandboxd.Sandbox
		err error
	}
	results := make([]outcome, creates)
	first := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage, IdempotencyKey: sandboxd.NewIdempotencyKey()})
			results[i] = outcome{sb, err}
			if err == nil {
				once.Do(func() { close(first) })
			}
		})
	}
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatal("no create answered")
	}
	d.Kill()
	wg.Wait()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	c = newClient(d, false)
	rows := checkPoolReconciled(ctx, t, d, c)
	for _, r := range results {
		if r.err != nil {
			continue
		}
		if !slices.ContainsFunc(rows, func(sb sandboxd.Sandbox) bool { return sb.ID == r.sb.ID }) {
			t.Errorf("%s was answered before the kill and is gone after it", r.sb.ID)
			continue
		}
		if res, err := c.Exec(ctx, r.sb.ID, sandboxd.ExecRequest{Cmd: []string{"echo", "alive"}}); err != nil || res.Stdout != "alive\n" {
			t.Errorf("exec in %s after the restart: %+v, %v", r.sb.ID, res, err)
		}
	}
	for _, sb := range rows {
		if err := c.DestroySandbox(ctx, sb.ID); err != nil {
			t.Errorf("destroy %s: %v", sb.ID, err)
		}
	}

	// A create served from the pool says so; a stop drains the pool.
	req, _ := http.NewRequestWithContext(ctx, "POST", d.URL()+"/v1/sandboxes", strings.NewReader(`{"image":"`+busyboxImage+`"}`))
	req.Header.Set("Authorization", "Bearer "+d.Token())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || !strings.Contains(resp.Header.Get("Server-Timing"), "pool;desc=hit") {
		t.Errorf("a create of the pool's class: %d, Server-Timing %q (%s)", resp.StatusCode, resp.Header.Get("Server-Timing"), body)
	}
	if n, ok, err := metricValue(ctx, d.URL(), d.Token(), `sandboxd_pool_claims_total{outcome="hit"}`); err != nil || !ok || n < 1 {
		t.Errorf("metrics: pool hits %v (present %v, err %v)", n, ok, err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	containers, err := nodeContainers(ctx, d.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	if len(containers) != 1 {
		t.Errorf("after a stop: %d containers, want only the one sandbox created last: %v", len(containers), containers)
	}
}

// A pool whose size follows demand, on a whole daemon: a burst of creates
// larger than the pool grows it (the creates that found it empty count),
// the refill makes what the burst asked for, and once nothing claims them
// for a window the idle sandboxes beyond the pool's minimum are given
// back, containers and all.
func TestPool_AdaptiveGrowsUnderABurstAndShrinksWhenIdle(t *testing.T) {
	requireDocker(t)
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "pooladapt", "--pool", "none")
	c := newClient(d, false)
	const (
		minSize, maxSize = 1, 4
		window           = 15 // seconds: the burst's refill (a few seconds) lands well inside it
	)
	pools, err := c.SetPools(ctx, []sandboxd.Pool{{Image: busyboxImage, Size: minSize, MaxSize: maxSize, WindowS: window}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 1 || pools[0].Size != minSize || pools[0].MaxSize != maxSize || pools[0].WindowS != window || pools[0].Target != minSize {
		t.Fatalf("SetPools answered %+v", pools)
	}
	// state polls the one class until cond holds of it.
	state := func(what string, cond func(p sandboxd.Pool) bool) sandboxd.Pool {
		t.Helper()
		var last sandboxd.Pool
		err := testenv.Poll(ctx, testenv.Deadline, func() error {
			pools, err := c.ListPools(ctx)
			if err != nil {
				return err
			}
			if len(pools) != 1 {
				return fmt.Errorf("%d classes: %+v", len(pools), pools)
			}
			if last = pools[0]; !cond(last) {
				return fmt.Errorf("not yet: %+v", last)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return last
	}
	state("the pool at its minimum", func(p sandboxd.Pool) bool { return p.Ready == minSize && p.Filling == 0 })

	// The burst: maxSize creates at once, one served by the pool, the
	// others cold.
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids []string
	)
	for range maxSize {
		wg.Go(func() {
			sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: busyboxImage})
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			mu.Lock()
			ids = append(ids, sb.ID)
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, id := range ids {
			_ = c.DestroySandbox(context.WithoutCancel(ctx), id)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	// Grown: to the burst's demand in the window (all 4 on a quiet host;
	// fewer if some creates took longer than the window on a busy one).
	grown := state("the pool grown by the burst", func(p sandboxd.Pool) bool { return p.Target > minSize })
	if grown.Target > maxSize {
		t.Errorf("target %d past the pool's max %d", grown.Target, maxSize)
	}
	// The refill makes what the burst asked for: more idle sandboxes than
	// the minimum at once (the first ones wait a window before any is
	// given back, so this is seen whatever the machine's pace).
	state("the grown pool refilled beyond its minimum", func(p sandboxd.Pool) bool { return p.Ready > minSize })
	t.Logf("after the burst: %+v", grown)
	for _, id := range ids {
		if err := c.DestroySandbox(ctx, id); err != nil {
			t.Errorf("destroy %s: %v", id, err)
		}
	}
	ids = nil

	// Idle for a window: back to the minimum, the containers with it.
	state("the pool back at its minimum", func(p sandboxd.Pool) bool {
		return p.Target == minSize && p.Ready == minSize && p.Filling == 0
	})
	err = testenv.Poll(ctx, testenv.Deadline, func() error {
		cs, err := nodeContainers(ctx, d.NodeID())
		if err != nil {
			return err
		}
		if len(cs) != minSize {
			return fmt.Errorf("%d containers of the node, want the pool's %d: %v", len(cs), minSize, cs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
