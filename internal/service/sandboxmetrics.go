package service

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// SandboxMetrics is one sample of a running sandbox's resource use.
type SandboxMetrics struct {
	At time.Time
	// CPUPercent is of one core, since the previous sample of this
	// sandbox on this daemon (0 on the first); CPUSeconds is cumulative.
	CPUPercent float64
	CPUSeconds float64
	// MemoryUsed excludes reclaimable page cache; MemoryLimit is the
	// sandbox's limit.
	MemoryUsed, MemoryLimit uint64
	// Disk is the sandbox's own disk: what it wrote over its image and
	// its limit (Total 0: no limit). Both 0 on a runtime that cannot
	// count (no runtime.UsageReader).
	Disk Disk
	// NetRx and NetTx are bytes received and sent since it started.
	NetRx, NetTx uint64
	Pids         uint64
}

// SandboxUsage samples a running sandbox: CPU, memory and processes from the
// engine's cgroup statistics, disk and network from the runtime's Usage.
// It runs nothing in the sandbox (unlike SandboxDisk without a limit), so
// a scrape of many sandboxes costs engine calls only.
// ErrNotFound for a sandbox the caller may not see, ErrConflict (or
// ErrPaused) for one that is not running.
func (s *Service) SandboxUsage(ctx context.Context, c Caller, idOrName string) (SandboxMetrics, error) {
	row, err := s.runningRow(ctx, c, idOrName)
	if err != nil {
		return SandboxMetrics{}, err
	}
	st, err := s.Runtime.Stats(ctx, row.ID)
	if err != nil {
		return SandboxMetrics{}, fmt.Errorf("stats of sandbox %s: %w", row.ID, err)
	}
	m := SandboxMetrics{
		At: st.At, CPUPercent: st.CPUPercent, CPUSeconds: st.CPUTime.Seconds(),
		MemoryUsed: st.MemoryUsed, MemoryLimit: st.MemoryLimit, Pids: st.Pids,
	}
	if ur, ok := s.Runtime.(runtime.UsageReader); ok {
		u, err := ur.Usage(ctx, row.ID)
		if err != nil {
			return SandboxMetrics{}, fmt.Errorf("usage of sandbox %s: %w", row.ID, err)
		}
		m.NetRx, m.NetTx = u.NetRx, u.NetTx
		m.Disk = Disk{Used: u.DiskUsed, Total: uint64(max(specOf(row).DiskMB, 0)) << 20}
	}
	return m, nil
}

// SandboxDisk is the sandbox's own disk: with a disk limit, what it wrote
// over its image (the runtime's count, what the limit is enforced on) and
// the limit; without one, or on a runtime that cannot count, what df in
// the sandbox reports (DiskUsage). df alone would report the host's file
// system, which the sandbox shares: hundreds of gigabytes it may not use.
func (s *Service) SandboxDisk(ctx context.Context, c Caller, idOrName string) (Disk, error) {
	row, err := s.runningRow(ctx, c, idOrName)
	if err != nil {
		return Disk{}, err
	}
	if ur, ok := s.Runtime.(runtime.UsageReader); ok {
		if limit := specOf(row).DiskMB; limit > 0 {
			u, err := ur.Usage(ctx, row.ID)
			if err != nil {
				return Disk{}, fmt.Errorf("usage of sandbox %s: %w", row.ID, err)
			}
			return Disk{Used: u.DiskUsed, Total: uint64(limit) << 20}, nil
		}
	}
	return s.DiskUsage(ctx, c, row.ID)
}

// runningRow is the row of a running sandbox the caller may see.
func (s *Service) runningRow(ctx context.Context, c Caller, idOrName string) (store.Sandbox, error) {
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return store.Sandbox{}, err
	}
	switch row.State {
	case store.StateRunning:
		return row, nil
	case store.StatePaused:
		return store.Sandbox{}, fmt.Errorf("sandbox %s: %w", row.ID, ErrPaused)
	case store.StateCreating:
		return store.Sandbox{}, beingCreated(row.ID)
	}
	return store.Sandbox{}, fmt.Errorf("sandbox %s is %s, not running: %w", row.ID, row.State, ErrConflict)
}
