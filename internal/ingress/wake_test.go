package ingress_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

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
