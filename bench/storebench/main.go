// Command storebench measures the store's write paths on a real database file and prints
// them for synchronous=NORMAL beside synchronous=FULL, measured in the same run:
// sandbox inserts/s, host-port reservations/s (the walker, distinct sandboxes) and
// idempotency claims/s, each with p50 and p95 latency.
//
//	go run ./bench/storebench [-n 5000] [-workers 8] [-dir DIR]
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/internal/store"
)

type config struct {
	n        int           // operations per phase
	workers  int           // concurrent callers
	dir      string        // where the database files go (not tmpfs, or FULL measures nothing)
	phaseMax time.Duration // bound on each phase
}

func main() {
	var cfg config
	flag.IntVar(&cfg.n, "n", 5000, "operations per phase")
	flag.IntVar(&cfg.workers, "workers", 8, "concurrent callers")
	flag.StringVar(&cfg.dir, "dir", "", "directory for the database files (default: the system temp dir)")
	flag.DurationVar(&cfg.phaseMax, "phase-timeout", 60*time.Second, "upper bound on each phase")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "storebench:", err)
		os.Exit(1)
	}
}

// result is one phase measured under one synchronous mode.
type result struct {
	done     int
	elapsed  time.Duration
	p50, p95 time.Duration
}

func (r result) opsPerSec() float64 { return float64(r.done) / r.elapsed.Seconds() }

// phase is one benchmarked operation; op(i) performs the i-th operation.
type phase struct {
	name string
	op   func(ctx context.Context, s *store.Store, i int) error
}

// pool is large enough that the walker's load factor stays at or below one half.
func pool(n int) store.PortRange { return store.PortRange{Lo: 20000, Hi: 20000 + 2*n - 1} }

func phases(n int) []phase {
	id := func(i int) string { return fmt.Sprintf("sb-%016x", i) }
	return []phase{
		{"sandbox inserts", func(ctx context.Context, s *store.Store, i int) error {
			sb := store.Sandbox{ID: id(i), Name: fmt.Sprintf("bench-%d", i), Owner: "bench", Image: "debian",
				State: store.StateRunning, CPUMillis: 1000, MemoryMB: 512, Tags: map[string]string{"bench": "1"}}
			return s.CreateSandbox(ctx, &sb)
		}},
		{"host-port reservations", func(ctx context.Context, s *store.Store, i int) error {
			req := store.PortRequest{SandboxID: id(i), Port: 8080, Protocol: store.ProtocolTCP}
			_, _, err := s.ReserveHostPort(ctx, req, pool(n), nil)
			return err
		}},
		{"idempotency claims", func(ctx context.Context, s *store.Store, i int) error {
			c, err := s.Claim(ctx, store.ClaimRequest{Scope: "bench", Fingerprint: id(i), PendingTTL: time.Minute})
			if err == nil && c.Outcome != store.ClaimAcquired {
				err = fmt.Errorf("claim %d: outcome %v", i, c.Outcome)
			}
			return err
		}},
	}
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	if cfg.n <= 0 || cfg.workers <= 0 {
		return errors.New("-n and -workers must be positive")
	}
	modes := []store.Synchronous{store.SynchronousNormal, store.SynchronousFull}
	ps := phases(cfg.n)
	results := make(map[store.Synchronous][]result)
	for _, mode := range modes {
		rs, err := runMode(ctx, cfg, mode, ps)
		if err != nil {
			return fmt.Errorf("synchronous=%s: %w", mode, err)
		}
		results[mode] = rs
	}

	fmt.Fprintf(w, "store write paths, synchronous=NORMAL beside FULL (the baseline): %d ops per phase, "+
		"%d concurrent callers, GOMAXPROCS=%d\n\n", cfg.n, cfg.workers, runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "operation\t")
	for _, m := range modes {
		fmt.Fprintf(tw, "%s ops/s\tp50\tp95\t", m)
	}
	fmt.Fprintln(tw)
	for i, p := range ps {
		fmt.Fprintf(tw, "%s\t", p.name)
		for _, m := range modes {
			r := results[m][i]
			fmt.Fprintf(tw, "%.0f\t%v\t%v\t", r.opsPerSec(), r.p50.Round(time.Microsecond), r.p95.Round(time.Microsecond))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, p := range ps {
		for _, m := range modes {
			if r := results[m][i]; r.done < cfg.n {
				fmt.Fprintf(w, "note: %s under %s stopped after %d of %d ops (phase timeout)\n", p.name, m, r.done, cfg.n)
			}
		}
	}
	return nil
}

// runMode runs every phase, in order, on a fresh database with the writer in mode.
func runMode(ctx context.Context, cfg config, mode store.Synchronous, ps []phase) ([]result, error) {
	dir, err := os.MkdirTemp(cfg.dir, "storebench-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s, err := store.Open(ctx, filepath.Join(dir, "bench.db"), store.Options{Synchronous: mode})
	if err != nil {
		return nil, fmt.Errorf("store.Open: %w", err)
	}
	defer s.Close()

	var out []result
	for _, p := range ps {
		r, err := measure(ctx, cfg, s, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		out = append(out, r)
	}
	return out, s.Close()
}

// measure runs p.op for i in [0, n) on cfg.workers goroutines, bounded by cfg.phaseMax,
// and returns the throughput and latency percentiles.
func measure(ctx context.Context, cfg config, s *store.Store, p phase) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.phaseMax)
	defer cancel()
	var (
		next      atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, cfg.n)
		firstErr  error
	)
	start := time.Now()
	for range cfg.workers {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				latencies = append(latencies, mine...)
				mu.Unlock()
			}()
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				if err := p.op(ctx, s, i); err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						firstErr = cmp.Or(firstErr, err)
						mu.Unlock()
						cancel()
					}
					return
				}
				mine = append(mine, time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return result{}, firstErr
	}
	if len(latencies) == 0 {
		return result{}, fmt.Errorf("no operation completed within %v", cfg.phaseMax)
	}
	slices.Sort(latencies)
	return result{
		done:    len(latencies),
		elapsed: elapsed,
		p50:     latencies[len(latencies)*50/100],
		p95:     latencies[len(latencies)*95/100],
	}, nil
}
