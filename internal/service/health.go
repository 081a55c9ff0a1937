package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Probes are readiness's checks of the dependencies: cheap, and run only
// when readiness is asked (Faults), at most once per probeEvery. None is
// on the create path.
type Probes struct {
	// Engine asks the container engine whether it answers (an engine
	// ping); nil: not checked.
	Engine func(ctx context.Context) error
	// DataDir is the data directory: its filesystem must have
	// MinFreeBytes available (statfs). Empty: not checked.
	DataDir string
	// StoreFiles are the database's files (the database and its WAL):
	// each that exists must be writable by the daemon (access(2): a
	// read-only filesystem or an immutable file fails it).
	StoreFiles []string
}

// Readiness's probe bounds.
const (
	// probeEvery is how long a probe's verdict serves /readyz: a storm of
	// readiness checks costs one engine ping per period.
	probeEvery = 2 * time.Second
	// probeTimeout bounds the engine ping: an engine slower than this
	// does not answer as far as callers can tell.
	probeTimeout = 2 * time.Second
	// MinFreeBytes is the space under which the data directory's
	// filesystem counts as full: SQLite needs pages for its WAL, and the
	// daemon writes sockets and volumes there.
	MinFreeBytes = 1 << 20
)

// HealthFault is one dependency's fault: its cause (CauseEngine,
// CauseDisk, CauseStore) and what the probe saw.
type HealthFault struct {
	Cause  string `json:"cause"`
	Detail string `json:"detail"`
}

// health caches the last probe.
type health struct {
	mu     sync.Mutex
	at     time.Time
	faults []HealthFault
}

// Faults reports the dependencies' faults now, in the order engine,
// disk, store; none when all is well. The probes run at most once per
// probeEvery (concurrent callers share one run); a fault clears as soon
// as a probe no longer sees it.
func (s *Service) Faults(ctx context.Context) []HealthFault {
	h := &s.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := time.Now(); h.at.IsZero() || now.Sub(h.at) >= probeEvery {
		h.faults = s.probe(ctx)
		h.at = time.Now()
	}
	return h.faults
}

// probe runs every probe once.
func (s *Service) probe(ctx context.Context) []HealthFault {
	var out []HealthFault
	p := s.Probes
	if p.Engine != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
		err := p.Engine(ctx)
		cancel()
		if err != nil {
			out = append(out, HealthFault{Cause: CauseEngine, Detail: "the container engine does not answer"})
		}
	}
	if p.DataDir != "" {
		var fs unix.Statfs_t
		switch err := unix.Statfs(p.DataDir, &fs); {
		case err != nil:
			out = append(out, HealthFault{Cause: CauseStore, Detail: fmt.Sprintf("the data directory cannot be read (%v)", err)})
		case fs.Flags&unix.ST_RDONLY != 0:
			out = append(out, HealthFault{Cause: CauseStore, Detail: "the data directory's filesystem is read-only"})
		case fs.Bavail*uint64(fs.Bsize) < MinFreeBytes:
			out = append(out, HealthFault{Cause: CauseDisk, Detail: fmt.Sprintf("the data directory's filesystem is full (under %d MiB free)", MinFreeBytes>>20)})
		}
	}
	for _, f := range p.StoreFiles {
		if err := unix.Access(f, unix.W_OK); err != nil && !errors.Is(err, unix.ENOENT) {
			if len(out) == 0 || out[len(out)-1].Cause != CauseStore {
				out = append(out, HealthFault{Cause: CauseStore, Detail: fmt.Sprintf("the database cannot be written (%v)", err)})
			}
		}
	}
	return out
}
