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
	// listenProbesPerSandbox bounds one sandbox's probes at once, so that
	// a sandbox whose ports accept slowly (a full backlog: each probe
	// then takes listenProbeTimeout) holds at most these of the slots.
	listenProbesPerSandbox = 2
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

	mu       sync.Mutex
	seen     map[portKey]time.Time // when a port's answer expires
	inFlight map[string]int        // probes at once, by sandbox
}

func newListening(dial func(ctx context.Context, id string, port int) error) *listening {
	return &listening{dial: dial, now: time.Now, slots: make(chan struct{}, listenProbes), seen: map[portKey]time.Time{}, inFlight: map[string]int{}}
}

// listens reports whether something in sandbox id accepts connections on
// port: a remembered answer under listenTTL old, else a connect through
// the agent (closed at once), when one of listenProbes slots is free and
// the sandbox has fewer than listenProbesPerSandbox under way.
// Only yes is remembered: a port that starts listening gets its
// certificate at the next handshake.
func (l *listening) listens(ctx context.Context, id string, port int) bool {
	k := portKey{id, port}
	l.mu.Lock()
	until, ok := l.seen[k]
	if ok && l.now().Before(until) {
		l.mu.Unlock()
		return true
	}
	if l.inFlight[id] >= listenProbesPerSandbox {
		l.mu.Unlock()
		return false
	}
	select {
	case l.slots <- struct{}{}:
	default:
		l.mu.Unlock()
		return false
	}
	l.inFlight[id]++
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, listenProbeTimeout)
	err := l.dial(ctx, id, port)
	cancel()
	<-l.slots
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[id]--; l.inFlight[id] == 0 {
		delete(l.inFlight, id)
	}
	if err != nil {
		return false
	}
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
