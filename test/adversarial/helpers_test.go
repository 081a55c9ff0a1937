package adversarial_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// tenant creates a user token for owner on d and returns a client that
// acts as that tenant.
func tenant(t *testing.T, d *daemontest.Daemon, owner string) *sandboxd.Client {
	t.Helper()
	tok, err := adminClient(d).CreateToken(t.Context(), sandboxd.CreateTokenRequest{
		Name: owner, Role: sandboxd.RoleUser, Owner: owner,
	})
	if err != nil {
		t.Fatalf("create token for %s: %v", owner, err)
	}
	return sandboxd.New(d.URL(), tok.Secret)
}

// sandbox creates a sandbox as c and destroys it at the end of t.
func sandbox(t *testing.T, c *sandboxd.Client, req sandboxd.CreateRequest) *sandboxd.Sandbox {
	t.Helper()
	if req.Image == "" {
		req.Image = busyboxImage
	}
	sb, err := c.CreateSandbox(t.Context(), req)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DestroySandbox(ctx, sb.ID); err != nil && !isNotFound(err) {
			t.Errorf("destroy %s: %v", sb.ID, err)
		}
	})
	return sb
}

func isNotFound(err error) bool {
	var apiErr *sandboxd.APIError
	return errors.As(err, &apiErr) && apiErr.Status == 404
}

// sh runs a shell command in sandbox id and returns its stdout; a failure
// to run it (not a non-zero exit) fails t.
func sh(t *testing.T, c *sandboxd.Client, id, script string) *sandboxd.ExecResult {
	t.Helper()
	res, err := c.Exec(t.Context(), id, sandboxd.ExecRequest{Cmd: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", script, id, err)
	}
	return res
}

// bystander is another tenant's sandbox whose agent is asked to answer,
// over and over, while an attack runs: Stop reports the first time it did
// not (nil when it always did).
type bystander struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	err  error
	n    int
}

// watchBystander starts a bystander: a sandbox of a tenant of its own on
// d, exec'd every few hundred milliseconds until Stop.
func watchBystander(t *testing.T, d *daemontest.Daemon) *bystander {
	t.Helper()
	c := tenant(t, d, "bystander")
	sb := sandbox(t, c, sandboxd.CreateRequest{})
	b := &bystander{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Cmd: []string{"echo", "ok"}})
			cancel()
			b.mu.Lock()
			b.n++
			if b.err == nil && (err != nil || res.Stdout != "ok\n") {
				b.err = fmt.Errorf("bystander exec #%d: %+v, %v", b.n, res, err)
			}
			b.mu.Unlock()
			select {
			case <-b.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { b.Stop() })
	return b
}

// Stop ends the watch and returns the first failure, if any.
func (b *bystander) Stop() error {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// rssWatch samples the daemon's resident memory while an attack runs and
// reports the peak above the baseline taken at its start.
type rssWatch struct {
	d        *daemontest.Daemon
	baseline int64
	stop     chan struct{}
	done     chan struct{}
	peak     int64
}

func watchRSS(t *testing.T, d *daemontest.Daemon) *rssWatch {
	t.Helper()
	base, err := d.RSS()
	if err != nil {
		t.Fatalf("daemon RSS: %v", err)
	}
	w := &rssWatch{d: d, baseline: base, peak: base, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, err := d.RSS(); err == nil && v > w.peak {
				w.peak = v
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { w.Growth() })
	return w
}

// Growth ends the watch and returns the peak growth in bytes.
func (w *rssWatch) Growth() int64 {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.peak - w.baseline
}

// waitFor polls cond until it returns nil, with testenv's generous deadline.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	testenv.WaitFor(t, what, cond)
}
