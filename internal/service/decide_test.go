package service_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// TestDecide is the reconciler's rules, one case each, without an engine.
func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	row := func(id string, st store.SandboxState, age time.Duration) store.Sandbox {
		return store.Sandbox{ID: id, State: st, CreatedAt: now.Add(-age), CPUMillis: 1000, MemoryMB: 512}
	}
	destroying := func(r store.Sandbox, since time.Duration) store.Sandbox {
		r.DestroyingSince = now.Add(-since)
		return r
	}
	running := func(id string) runtime.Instance { return runtime.Instance{SandboxID: id, State: runtime.StateRunning} }
	exited := func(id string) runtime.Instance { return runtime.Instance{SandboxID: id, State: runtime.StateExited} }
	frozen := func(id string) runtime.Instance {
		return runtime.Instance{SandboxID: id, State: runtime.StateRunning, Paused: true}
	}
	claim := func(target string, pending bool) store.StaleClaim {
		return store.StaleClaim{Claim: store.Claim{Scope: "s", Fingerprint: "fp-" + target}, Pending: pending, TargetID: target}
	}
	live := func(ids ...string) map[string]admission.Request {
		m := map[string]admission.Request{}
		for _, id := range ids {
			m[id] = admission.Request{MilliCPU: 1000, MemoryMB: 512}
		}
		return m
	}
	tests := []struct {
		name string
		snap service.Snapshot
		want service.Plan
	}{
		{
			name: "a container with no row is an orphan; one with a row is not",
			snap: service.Snapshot{
				Containers: []runtime.Instance{running("sb-b"), running("sb-a"), running("sb-kept")},
				Rows:       []store.Sandbox{row("sb-kept", store.StateRunning, time.Hour)},
			},
			want: service.Plan{DestroyOrphans: []string{"sb-a", "sb-b"}},
		},
		{
			name: "the engine follows the row: a paused row's running container is refrozen, a running row's frozen one thawed",
			snap: service.Snapshot{
				Containers: []runtime.Instance{running("sb-p"), frozen("sb-r"), frozen("sb-ok"), exited("sb-gone")},
				Rows: []store.Sandbox{
					row("sb-p", store.StatePaused, time.Hour), row("sb-r", store.StateRunning, time.Hour),
					row("sb-ok", store.StatePaused, time.Hour), row("sb-gone", store.StatePaused, time.Hour),
				},
			},
			want: service.Plan{Refreeze: []string{"sb-p"}, Thaw: []string{"sb-r"}, CheckLost: []string{"sb-gone"}},
		},
		{
			name: "startup: a paused sandbox holds its capacity and gets its routes back",
			snap: service.Snapshot{
				Startup:    true,
				Containers: []runtime.Instance{frozen("sb-p")},
				Rows:       []store.Sandbox{row("sb-p", store.StatePaused, time.Hour)},
			},
			want: service.Plan{Restore: []string{"sb-p"}, Live: live("sb-p")},
		},
		{
			name: "a container whose row is being destroyed is not an orphan: the destroy owns it",
			snap: service.Snapshot{
				Containers: []runtime.Instance{running("sb-d")},
				Rows:       []store.Sandbox{destroying(row("sb-d", store.StateRunning, time.Hour), time.Second)},
			},
			want: service.Plan{},
		},
		{
			name: "periodic: a young creating row is left to its create, an old one rolled back",
			snap: service.Snapshot{
				Rows: []store.Sandbox{row("sb-young", store.StateCreating, time.Second), row("sb-old", store.StateCreating, 2*time.Hour)},
			},
			want: service.Plan{RollBack: []string{"sb-old"}},
		},
		{
			name: "startup: every creating row is from a dead process",
			snap: service.Snapshot{
				Startup: true,
				Rows:    []store.Sandbox{row("sb-young", store.StateCreating, time.Second)},
			},
			want: service.Plan{RollBack: []string{"sb-young"}, Live: live()},
		},
		{
			name: "periodic: an interrupted destroy is finished after the grace, a fresh one left alone",
			snap: service.Snapshot{
				Rows: []store.Sandbox{
					destroying(row("sb-old", store.StateRunning, time.Hour), 5*time.Minute),
					destroying(row("sb-fresh", store.StateRunning, time.Hour), time.Second),
				},
			},
			want: service.Plan{FinishDestroy: []string{"sb-old"}},
		},
		{
			name: "startup: a marked destroy is finished, never restored, never counted",
			snap: service.Snapshot{
				Startup:    true,
				Containers: []runtime.Instance{running("sb-d")},
				Rows: []store.Sandbox{
					destroying(row("sb-d", store.StateRunning, time.Hour), time.Second),
					destroying(row("sb-c", store.StateCreating, time.Hour), time.Second),
				},
			},
			want: service.Plan{FinishDestroy: []string{"sb-d", "sb-c"}, Live: live()},
		},
		{
			name: "a running row without a running container is checked again, not judged from the snapshot",
			snap: service.Snapshot{
				Containers: []runtime.Instance{exited("sb-exited"), running("sb-ok")},
				Rows: []store.Sandbox{
					row("sb-exited", store.StateRunning, time.Hour),
					row("sb-missing", store.StateRunning, time.Hour),
					row("sb-ok", store.StateRunning, time.Hour),
					row("sb-stopped", store.StateStopped, time.Hour),
				},
			},
			want: service.Plan{CheckLost: []string{"sb-exited", "sb-missing"}},
		},
		{
			name: "startup: every live row is restored; only running rows hold capacity",
			snap: service.Snapshot{
				Startup:    true,
				Containers: []runtime.Instance{running("sb-run"), exited("sb-stop")},
				Rows: []store.Sandbox{
					row("sb-run", store.StateRunning, time.Hour),
					row("sb-stop", store.StateStopped, time.Hour),
					row("sb-err", store.StateError, time.Hour),
				},
			},
			want: service.Plan{Restore: []string{"sb-run", "sb-stop", "sb-err"}, Live: live("sb-run")},
		},
		{
			name: "stale claims: ready ones, target-less ones and ones whose target has no row go; an adoptable one stays",
			snap: service.Snapshot{
				Rows:       []store.Sandbox{row("sb-alive", store.StateRunning, time.Hour)},
				Containers: []runtime.Instance{running("sb-alive")},
				StaleClaims: []store.StaleClaim{
					claim("sb-alive", false), // answered already, past its window
					claim("", true),          // its holder died before naming a target
					claim("sb-gone", true),   // its target was never made or is gone
					claim("sb-alive", true),  // a retry adopts this one
				},
			},
			want: service.Plan{PruneClaims: []store.StaleClaim{claim("sb-alive", false), claim("", true), claim("sb-gone", true)}},
		},
		{
			name: "undelivered creates past their window are expired (the store re-checks each under the writer)",
			snap: service.Snapshot{
				Rows:               []store.Sandbox{row("sb-lost", store.StateRunning, time.Hour)},
				Containers:         []runtime.Instance{running("sb-lost")},
				ExpiredUndelivered: []store.Claim{{Scope: "s", Fingerprint: "fp/sb-lost", TargetID: "sb-lost"}},
			},
			want: service.Plan{ExpireUndelivered: []store.Claim{{Scope: "s", Fingerprint: "fp/sb-lost", TargetID: "sb-lost"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.snap.Now = now
			tt.snap.StuckCreating = 10 * time.Minute
			tt.snap.DestroyGrace = time.Minute
			got := service.Decide(tt.snap)
			check := func(what string, got, want []string) {
				if !slices.Equal(got, want) {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			check("DestroyOrphans", got.DestroyOrphans, tt.want.DestroyOrphans)
			check("RollBack", got.RollBack, tt.want.RollBack)
			check("FinishDestroy", got.FinishDestroy, tt.want.FinishDestroy)
			check("CheckLost", got.CheckLost, tt.want.CheckLost)
			check("Restore", got.Restore, tt.want.Restore)
			if len(got.Live) != len(tt.want.Live) || (got.Live == nil) != (tt.want.Live == nil) {
				t.Errorf("Live = %v, want %v", got.Live, tt.want.Live)
			}
			for id, req := range tt.want.Live {
				if got.Live[id] != req {
					t.Errorf("Live[%s] = %v, want %v", id, got.Live[id], req)
				}
			}
			if !slices.EqualFunc(got.PruneClaims, tt.want.PruneClaims, func(a, b store.StaleClaim) bool {
				return a.Fingerprint == b.Fingerprint && a.Pending == b.Pending && a.TargetID == b.TargetID
			}) {
				t.Errorf("PruneClaims = %v, want %v", got.PruneClaims, tt.want.PruneClaims)
			}
			if !slices.EqualFunc(got.ExpireUndelivered, tt.want.ExpireUndelivered, func(a, b store.Claim) bool {
				return a.Fingerprint == b.Fingerprint && a.TargetID == b.TargetID
			}) {
				t.Errorf("ExpireUndelivered = %v, want %v", got.ExpireUndelivered, tt.want.ExpireUndelivered)
			}
		})
	}
}
