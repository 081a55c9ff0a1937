package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// TestFault: the runtime's, the store's and the host's faults are each
// classified with their cause; other errors are no fault.
func TestFault(t *testing.T) {
	for _, tt := range []struct {
		name  string
		err   error
		cause string
	}{
		{"engine down", fmt.Errorf("create sandbox sb-1: %w: dial unix: refused", runtime.ErrUnavailable), CauseEngine},
		{"engine disk full", fmt.Errorf("create: %w: write /var/lib/docker/x", runtime.ErrNoSpace), CauseDisk},
		{"store full", fmt.Errorf("store row: commit: %w", store.ErrDiskFull), CauseDisk},
		{"store read-only", fmt.Errorf("store row: %w", store.ErrUnwritable), CauseStore},
		{"ENOSPC from a file", &fs.PathError{Op: "write", Path: "/data/x", Err: syscall.ENOSPC}, CauseDisk},
		{"EROFS from a file", &os.PathError{Op: "mkdir", Path: "/data/x", Err: syscall.EROFS}, CauseStore},
		{"typed", &FaultError{Cause: CauseEngine, Err: errors.New("x")}, CauseEngine},
		{"not a fault", fmt.Errorf("x: %w", ErrNotFound), ""},
		{"nil", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cause, ok := Fault(tt.err)
			if cause != tt.cause || ok != (tt.cause != "") {
				t.Errorf("Fault(%v) = %q, %v; want %q", tt.err, cause, ok, tt.cause)
			}
		})
	}
	if !errors.Is(&FaultError{Cause: CauseDisk, Err: errors.New("x")}, ErrUnavailable) {
		t.Error("a FaultError does not match ErrUnavailable")
	}
}

// TestFaults_ProbesAreRateLimited: a storm of readiness checks costs one
// engine ping per probeEvery, and the fault is named while the ping
// fails.
func TestFaults_ProbesAreRateLimited(t *testing.T) {
	var pings int
	s := &Service{Deps: Deps{Probes: Probes{
		Engine:  func(context.Context) error { pings++; return runtime.ErrUnavailable },
		DataDir: t.TempDir(),
	}}}
	for range 100 {
		got := s.Faults(t.Context())
		if len(got) != 1 || got[0].Cause != CauseEngine {
			t.Fatalf("Faults = %+v, want the engine's", got)
		}
	}
	if pings != 1 {
		t.Errorf("100 readiness checks pinged the engine %d times, want 1", pings)
	}
}
