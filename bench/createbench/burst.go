package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
)

// Bounds of section 3.
const (
	// poolWait bounds a wait for the pool to reach its target.
	poolWait = 5 * time.Minute
	// adaptiveMax and adaptiveWindowS are the adaptive pool's bounds: its
	// window outlasts the refill of a grown pool here (about 2.6 a second).
	adaptiveMax     = 64
	adaptiveWindowS = 600
)

// bursts is section 3: c.burst creates at once against a pool of c.pool,
// against an adaptive pool (c.pool to 64) a first burst grew, and c.burst
// `docker run -d` at once.
func bursts(ctx context.Context, d *benchd.Daemon, c config) (err error) {
	fmt.Printf("\n3. a burst of %d creates at once (image %s, the create defaults), each create timed;\n"+
		"   against a pool of %d, against a pool of %d–%d following demand (window %d s) after a first burst grew it,\n"+
		"   and %d `docker run -d --network none` at once\n", c.burst, c.image, c.pool, c.pool, adaptiveMax, adaptiveWindowS, c.burst)
	defer func() {
		if _, perr := setPool(context.WithoutCancel(ctx), d, nil); perr != nil && err == nil {
			err = perr
		}
	}()
	fixedClass := map[string]any{"image": c.image, "size": c.pool}
	if _, err := setPool(ctx, d, []map[string]any{fixedClass}); err != nil {
		return err
	}
	if _, err := waitPool(ctx, d, func(p poolState) bool { return p.Ready == c.pool && p.Filling == 0 }); err != nil {
		return err
	}
	fixed, err := burstOnce(ctx, d, c)
	if err != nil {
		return err
	}

	adaptiveClass := map[string]any{"image": c.image, "size": c.pool, "max_size": adaptiveMax, "window_s": adaptiveWindowS}
	if _, err := setPool(ctx, d, []map[string]any{adaptiveClass}); err != nil {
		return err
	}
	if _, err := waitPool(ctx, d, func(p poolState) bool { return p.Ready == p.Target && p.Filling == 0 }); err != nil {
		return err
	}
	if _, err := burstOnce(ctx, d, c); err != nil { // grows it, untimed
		return err
	}
	grown, err := waitPool(ctx, d, func(p poolState) bool { return p.Target > c.pool && p.Ready == p.Target && p.Filling == 0 })
	if err != nil {
		return err
	}
	adaptive, err := burstOnce(ctx, d, c)
	if err != nil {
		return err
	}

	var (
		mu     sync.Mutex
		docker []time.Duration
		ids    []string
		wg     sync.WaitGroup
		derr   error
	)
	for range c.burst {
		wg.Go(func() {
			t0 := time.Now()
			id, err := dockerStart(ctx, d, c.image)
			dur := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if id != "" {
				ids = append(ids, id)
			}
			if err != nil {
				derr = err
				return
			}
			docker = append(docker, dur)
		})
	}
	wg.Wait()
	dockerRemove(ctx, ids...)
	if derr != nil {
		return derr
	}

	t := benchd.Table{W: os.Stdout}
	t.Head(fmt.Sprintf("%d creates at once", c.burst))
	t.Row(fmt.Sprintf("sandboxd, pool of %d (%d served by it)", c.pool, fixed.hits), fixed.lat)
	t.Row(fmt.Sprintf("sandboxd, pool grown to %d (%d served)", grown.Target, adaptive.hits), adaptive.lat)
	t.Row("docker run -d --network none", docker)
	t.Ratio("p50 ratio pool of N / docker run -d", fixed.lat, docker)
	t.Note("p95 ratio pool of N / docker run -d", fmt.Sprintf("%.3fx", float64(benchd.Pct(fixed.lat, 95))/float64(max(benchd.Pct(docker, 95), 1))))
	t.Note("p95 ratio grown pool / docker run -d", fmt.Sprintf("%.3fx", float64(benchd.Pct(adaptive.lat, 95))/float64(max(benchd.Pct(docker, 95), 1))))
	return nil
}

// burstResult is one burst: each create's latency and how many the pool
// served.
type burstResult struct {
	lat  []time.Duration
	hits int
}

// burstOnce runs c.burst creates of c.image at once, then destroys what
// they made (untimed).
func burstOnce(ctx context.Context, d *benchd.Daemon, c config) (burstResult, error) {
	var (
		mu   sync.Mutex
		r    burstResult
		ids  []string
		wg   sync.WaitGroup
		ferr error
	)
	start := make(chan struct{})
	for range c.burst {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			created, err := d.Create(ctx, map[string]any{"image": c.image})
			dur := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if created.ID != "" {
				ids = append(ids, created.ID)
			}
			if err != nil {
				ferr = err
				return
			}
			r.lat = append(r.lat, dur)
			if created.Pooled() {
				r.hits++
			}
		})
	}
	close(start)
	wg.Wait()
	var dwg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		dwg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			d.Destroy(ctx, id)
		})
	}
	dwg.Wait()
	return r, ferr
}

// poolState is the one class of GET /v1/pools this section keeps.
type poolState struct {
	Size    int `json:"size"`
	MaxSize int `json:"max_size"`
	Target  int `json:"target"`
	Ready   int `json:"ready"`
	Filling int `json:"filling"`
}

// setPool is PUT /v1/pools.
func setPool(ctx context.Context, d *benchd.Daemon, pools []map[string]any) ([]poolState, error) {
	if pools == nil {
		pools = []map[string]any{}
	}
	resp, err := d.Do(ctx, http.MethodPut, "/v1/pools", map[string]any{"pools": pools})
	if err != nil {
		return nil, err
	}
	var out struct{ Pools []poolState }
	if resp.Status != http.StatusOK || json.Unmarshal(resp.Body, &out) != nil {
		return nil, fmt.Errorf("PUT /v1/pools: %s", resp)
	}
	return out.Pools, nil
}

// waitPool polls GET /v1/pools until its one class satisfies cond.
func waitPool(ctx context.Context, d *benchd.Daemon, cond func(poolState) bool) (poolState, error) {
	ctx, cancel := context.WithTimeout(ctx, poolWait)
	defer cancel()
	var last poolState
	for {
		resp, err := d.Do(ctx, http.MethodGet, "/v1/pools", nil)
		if err == nil {
			var out struct{ Pools []poolState }
			if resp.Status == http.StatusOK && json.Unmarshal(resp.Body, &out) == nil && len(out.Pools) == 1 {
				last = out.Pools[0]
				if cond(last) {
					benchd.Progress("")
					return last, nil
				}
				benchd.Progress("pool: target %d, ready %d, filling %d", last.Target, last.Ready, last.Filling)
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("waiting for the pool (last %+v): %w", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
