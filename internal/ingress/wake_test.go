package ingress_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/ingress"
)

// pausedDialer fails every dial of a paused sandbox (the service's
// ErrPaused), as the service's DialPort does; wake resumes it.
type pausedDialer struct {
	ingress.Dialer
	paused atomic.Bool
}

func (p *pausedDialer) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if p.paused.Load() {
		return nil, errors.New("sandbox is paused")
	}
	return p.Dialer.DialPort(ctx, id, port)
}

// TestWake_FailedDialWakesOnceAuthorized: a request to an exposed port
// whose dial fails asks Options.Wake, and once it says the sandbox runs
// the dial is tried again and the request served; a request refused by
// the private port's check never asks; a wake that fails answers its
// error in the API's shape.
func TestWake_FailedDialWakesOnceAuthorized(t *testing.T) {
	var (
		dialer  *pausedDialer
		mu      sync.Mutex
		wakes   int
		wakeErr error
	)
	e := newEnv(t, func(o *ingress.Options) {
		dialer = &pausedDialer{Dialer: o.Dialer}
		o.Dialer = dialer
		o.Wake = func(_ context.Context, id string) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			wakes++
			if wakeErr != nil {
				return true, wakeErr
			}
			dialer.paused.Store(false)
			return true, nil
		}
	})
	port := httpUpstream(t, http.HandlerFunc(headerEcho))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP})
	url := e.url(sbA, port, "/")
	dialer.paused.Store(true)

	if code, _ := e.get(t, url, nil); code != http.StatusUnauthorized || wakes != 0 {
		t.Fatalf("without authorization: %d, %d wakes; want 401 and none", code, wakes)
	}
	wakeErr = &ingress.WakeError{Status: http.StatusTooManyRequests, Code: "quota_exceeded", Message: "over quota"}
	code, body := e.get(t, url, http.Header{"Authorization": {goodToken}})
	if code != http.StatusTooManyRequests {
		t.Fatalf("a failed wake: %d %s, want 429", code, body)
	}
	wantErrorBody(t, body, "quota_exceeded")
	wakeErr = nil
	if code, body := e.get(t, url, http.Header{"Authorization": {goodToken}}); code != http.StatusOK {
		t.Fatalf("a wake: %d %s, want the server's answer", code, body)
	}
	if wakes != 2 {
		t.Errorf("%d wakes, want 2", wakes)
	}
}

// TestWake_EndsWithItsRequest: a wake is bounded by the request it is
// for. The transport dials on a context detached from the request's
// cancellation, so a wake that blocks (the sandbox's transition lock held
// by a save) outlived every client that gave up: 300 clients with 100 ms
// timeouts left 300 wakes blocked. Now they end once their clients
// hang up.
func TestWake_EndsWithItsRequest(t *testing.T) {
	var (
		dialer  *pausedDialer
		blocked atomic.Int64
		release = make(chan struct{})
	)
	e := newEnv(t, func(o *ingress.Options) {
		dialer = &pausedDialer{Dialer: o.Dialer}
		o.Dialer = dialer
		o.Wake = func(ctx context.Context, _ string) (bool, error) {
			blocked.Add(1)
			defer blocked.Add(-1)
			select {
			case <-ctx.Done():
				return true, ctx.Err()
			case <-release:
				return false, nil
			}
		}
	})
	t.Cleanup(func() { close(release) }) // before the env's cleanup: no wake left behind either way
	port := httpUpstream(t, http.HandlerFunc(headerEcho))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})
	dialer.paused.Store(true)

	const clients = 300
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url(sbA, port, "/"), nil)
			if resp, err := e.client.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	// Generous: the server learns of each hang-up when it reads the
	// closed connection; the wake's own bound is far longer.
	deadline := time.Now().Add(10 * time.Second)
	for blocked.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := blocked.Load(); n != 0 {
		t.Fatalf("%d wakes still blocked after their %d clients hung up, want 0", n, clients)
	}
}
