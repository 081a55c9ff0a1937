package daytona

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestDaytonaState_Archived: a stopped sandbox the service marked archived
// (Archive, or its auto-archive rule) is archived; a running one never is.
func TestDaytonaState_Archived(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name string
		sb   service.Sandbox
		want string
	}{
		{"stopped", service.Sandbox{State: service.StateStopped, StoppedAt: at}, "stopped"},
		{"stopped and archived", service.Sandbox{State: service.StateStopped, StoppedAt: at, ArchivedAt: at}, "archived"},
		{"running with a stale mark", service.Sandbox{State: service.StateRunning, ArchivedAt: at}, "started"},
	} {
		if got := daytonaState(tc.sb); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestAutoArchive_ZeroIsTheMaximumAndLargerIsCapped: Daytona answers
// 43200 (30 days) for 0 and caps larger values; negative is refused.
func TestAutoArchive_ZeroIsTheMaximumAndLargerIsCapped(t *testing.T) {
	for in, want := range map[int]time.Duration{
		0: 43200 * time.Minute, 1: time.Minute, 90: 90 * time.Minute, 43200: 43200 * time.Minute, 43201: 43200 * time.Minute, 1 << 30: 43200 * time.Minute,
	} {
		if got, err := autoArchive(in); err != nil || got != want {
			t.Errorf("autoArchive(%d) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := autoArchive(-1); err == nil {
		t.Error("autoArchive(-1): no error")
	}
}
