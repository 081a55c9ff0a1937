package e2b

import (
	"context"
	"sync"
	"time"
)

// The bounds of ServesHost's probe of a port: a TLS handshake comes
// before any credential, so whoever knows one sandbox id chooses which of
// its 65,535 port hosts to ask about.
const (
	// listenTTL is how long a port found listening is taken to listen
	// still, without a new probe (a handshake per connection of a page's
	// session would otherwise probe each time).
	listenTTL = 30 * time.Second
	// listenProbes bounds the probes at once, daemon-wide: past it a
	// handshake for a port not known to listen fails (no certificate)
	// rather than queue behind a stranger's walk.
	listenProbes = 8
	// listenProbeTimeout bounds one probe (an agent round trip and a
	// connect to 127.0.0.1 inside the sandbox: about a millisecond).
	listenProbeTimeout = 2 * time.Second
	// listenCacheCap bounds the ports remembered; past it a new answer is
	// not kept once the expired ones are dropped.
	listenCacheCap = 4096
)

// portKey is one port of one sandbox.
type portKey struct {
	id   string
	port int
}

// listening remembers which sandbox ports answered a connect lately and
// bounds the probes that find out.
type listening struct {
	dial  func(ctx context.Context, id string, port int) error
	now   func() time.Time
	slots chan struct{}

	mu   sync.Mutex
	seen map[portKey]time.Time // when a port's answer expires
}

func newListening(dial func(ctx context.Context, id string, port int) error) *listening {
	return &listening{dial: dial, now: time.Now, slots: make(chan struct{}, listenProbes), seen: map[portKey]time.Time{}}
}

// listens reports whether something in sandbox id accepts connections on
// port: a remembered answer under listenTTL old, else a connect through
// the agent (closed at once), when one of listenProbes slots is free.
// Only yes is remembered: a port that starts listening gets its
// certificate at the next handshake.
func (l *listening) listens(ctx context.Context, id string, port int) bool {
	k := portKey{id, port}
	l.mu.Lock()
	until, ok := l.seen[k]
	l.mu.Unlock()
	if ok && l.now().Before(until) {
		return true
	}
	select {
	case l.slots <- struct{}{}:
	default:
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, listenProbeTimeout)
	err := l.dial(ctx, id, port)
	cancel()
	<-l.slots
	if err != nil {
		return false
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) >= listenCacheCap {
		for k, until := range l.seen {
			if !now.Before(until) {
				delete(l.seen, k)
			}
		}
	}
	if len(l.seen) < listenCacheCap {
		l.seen[k] = now.Add(listenTTL)
	}
	return true
}
