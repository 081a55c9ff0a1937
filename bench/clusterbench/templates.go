package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// templateMB is the random payload of section 5's template: nothing
// compresses it, so a pull moves all of it.
const templateMB = 50

// buildBound bounds section 5's build.
const buildBound = 5 * time.Minute

// templates is section 5: a template built on A (its image pushed to the
// cluster's registry as the build ends), then the first create from it on
// A, which made it, beside the first on B, which lacks it and pulls it,
// and a second on B, which has it by then. Each create mounts a fresh
// volume, which keeps it on the node it was sent to (volumes are the
// node's), so every side pays the same volume step. One run each.
//
// The nodes share one engine here, so B's pull finds the layers present
// and moves only the manifest and config: on separate hosts it also
// downloads the layers, at the rate pullbench measures.
func (b *bench) templates(ctx context.Context) error {
	name := fmt.Sprintf("cbench-tpl-%d", b.seq.Add(1))
	start := time.Now()
	resp, err := b.a.d.Do(ctx, http.MethodPost, "/v1/templates", map[string]any{
		"name": name, "base": b.cfg.image, "no_cache": true,
		"steps": []map[string]any{{"run": fmt.Sprintf("head -c %d /dev/urandom > /payload.bin", templateMB*1000*1000)}},
	})
	if err != nil {
		return err
	}
	if resp.Status != http.StatusAccepted {
		return fmt.Errorf("build: %s", resp)
	}
	var tp struct{ ID, State, Error string }
	if err := json.Unmarshal(resp.Body, &tp); err != nil {
		return err
	}
	defer func() { _, _ = b.a.d.Do(context.WithoutCancel(ctx), http.MethodDelete, "/v1/templates/"+tp.ID, nil) }()
	bctx, cancel := context.WithTimeout(ctx, buildBound)
	defer cancel()
	for tp.State != "ready" {
		if tp.State == "failed" {
			return fmt.Errorf("build %s failed: %s", tp.ID, tp.Error)
		}
		select {
		case <-bctx.Done():
			return fmt.Errorf("build %s: %w", tp.ID, bctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		if resp, err = b.a.d.Do(bctx, http.MethodGet, "/v1/templates/"+tp.ID, nil); err != nil {
			return err
		}
		if err := json.Unmarshal(resp.Body, &tp); err != nil {
			return fmt.Errorf("build %s: %s", tp.ID, resp)
		}
	}
	build := time.Since(start)

	type sample struct {
		total, image time.Duration
	}
	first := func(m *member) (sample, error) {
		start := time.Now()
		c, err := m.d.Create(ctx, map[string]any{
			"template": name, "mounts": []map[string]any{{"volume": fmt.Sprintf("cbv-%d", b.seq.Add(1)), "path": "/mnt/v"}},
		})
		total := time.Since(start)
		if err != nil {
			return sample{}, err
		}
		defer m.d.Destroy(ctx, c.ID)
		if ok, err := owns(ctx, m, c.ID); err != nil || !ok {
			return sample{}, fmt.Errorf("sandbox %s is not on %s (%v)", c.ID, m.id, err)
		}
		s := sample{total: total}
		for _, st := range c.Steps {
			if st.Name == "image" {
				s.image = st.Dur
			}
		}
		return s, nil
	}
	onA, err := first(b.a)
	if err != nil {
		return fmt.Errorf("create on A: %w", err)
	}
	onB, err := first(b.b)
	if err != nil {
		return fmt.Errorf("create on B: %w", err)
	}
	againB, err := first(b.b)
	if err != nil {
		return fmt.Errorf("second create on B: %w", err)
	}
	t := table()
	fmt.Println()
	t.Head(fmt.Sprintf("5. a template (%s + %d MB) built on A, created from on B", b.cfg.image, templateMB))
	t.Row("build on A, request → ready (incl. the push)", []time.Duration{build})
	t.Row("first create on A, which made it (baseline)", []time.Duration{onA.total})
	t.Row("first create on B, which lacks it (pulls it)", []time.Duration{onB.total})
	t.Row("second create on B, which has it now", []time.Duration{againB.total})
	t.Row("  their image steps: A", []time.Duration{onA.image})
	t.Row("  B, first (the pull)", []time.Duration{onB.image})
	t.Row("  B, second", []time.Duration{againB.image})
	t.Note("note", "one engine for all nodes: B's pull moves the manifest, not the layers")
	return nil
}
