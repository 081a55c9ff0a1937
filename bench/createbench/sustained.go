package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/bench/internal/benchd"
)

// sustained is section 2: creates/s through the API for c.duration at
// c.concurrency, beside `docker run -d` the same way.
func sustained(ctx context.Context, d *benchd.Daemon, c config) error {
	fmt.Printf("\n2. sustained creates: %v per side at concurrency %d, image %s; no warm pool;\n"+
		"   each sandbox or container destroyed after by %d destroyers (untimed; at most %d live)\n",
		c.duration, c.concurrency, c.image, c.concurrency, 4*c.concurrency)
	// Warm-up, untimed: the image's metadata, page cache, connections.
	if err := warmUp(ctx, d, c.image); err != nil {
		return err
	}
	sb, err := sustain(ctx, "sandboxd", c,
		func(ctx context.Context) (string, error) {
			created, err := d.Create(ctx, map[string]any{"image": c.image})
			return created.ID, err
		},
		func(id string) { d.Destroy(ctx, id) })
	if err != nil {
		return err
	}
	dk, err := sustain(ctx, "docker", c,
		func(ctx context.Context) (string, error) { return dockerStart(ctx, d, c.image) },
		func(id string) { dockerRemove(ctx, id) })
	if err != nil {
		return err
	}
	t := benchd.Table{W: os.Stdout}
	t.Head("create latency under load")
	t.Row("sandboxd POST /v1/sandboxes → 201", sb.lat)
	t.Row("docker run -d --network none IMAGE sleep", dk.lat)
	t.Note("sandboxd creates/s", fmt.Sprintf("%.1f/s", sb.rate()))
	t.Note("docker run -d creates/s", fmt.Sprintf("%.1f/s", dk.rate()))
	t.Note("ratio sandboxd / docker run -d", fmt.Sprintf("%.2fx", sb.rate()/max(dk.rate(), 1e-9)))
	return nil
}

// warmUp creates and destroys one sandbox of image, untimed.
func warmUp(ctx context.Context, d *benchd.Daemon, image string) error {
	created, err := d.Create(ctx, map[string]any{"image": image})
	if created.ID != "" {
		d.Destroy(ctx, created.ID)
	}
	if err != nil {
		return fmt.Errorf("warm-up create: %w", err)
	}
	id, err := dockerStart(ctx, d, image)
	if id != "" {
		dockerRemove(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("warm-up docker run: %w", err)
	}
	return nil
}

// throughput is one side of a sustained run: the latency of every create
// that ended within the run, and the run's length.
type throughput struct {
	lat []time.Duration
	dur time.Duration
}

func (r throughput) rate() float64 { return float64(len(r.lat)) / r.dur.Seconds() }

// sustain runs create from c.concurrency workers for c.duration and hands
// what each made to as many destroyers, through a queue of 2×concurrency:
// a create waits when the destroys fall behind, so at most 4×concurrency
// exist at once. Creates that end after the run are destroyed but not
// counted. The first failed create ends the run with its error.
func sustain(ctx context.Context, side string, c config, create func(context.Context) (string, error), destroy func(string)) (throughput, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	made := make(chan string, 2*c.concurrency)
	var destroyers sync.WaitGroup
	for range c.concurrency {
		destroyers.Go(func() {
			for id := range made {
				destroy(id)
			}
		})
	}
	var (
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		workers  sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(c.duration)
	for range c.concurrency {
		workers.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				t0 := time.Now()
				id, err := create(ctx)
				done := time.Now()
				if id != "" {
					made <- id
				}
				mu.Lock()
				if err != nil {
					if firstErr == nil && ctx.Err() == nil {
						firstErr = fmt.Errorf("%s create: %w", side, err)
					}
					mu.Unlock()
					cancel()
					return
				}
				if !done.After(end) {
					lat = append(lat, done.Sub(t0))
				}
				n := len(lat)
				mu.Unlock()
				benchd.Progress("sustained %s: %d creates, %.0fs", side, n, time.Since(start).Seconds())
			}
		})
	}
	workers.Wait()
	close(made)
	destroyers.Wait()
	benchd.Progress("")
	if firstErr == nil {
		firstErr = ctx.Err() // the run was interrupted
	}
	return throughput{lat: lat, dur: c.duration}, firstErr
}
