package daytona

import (
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestDaytonaState_AutoArchive: a stopped sandbox shows as archived once
// it has been stopped (by the facade) for its auto-archive interval, or
// at once when archived on request; a running one never does.
func TestDaytonaState_AutoArchive(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ago := func(d time.Duration) string { return strconv.FormatInt(now.Add(-d).Unix(), 10) }
	for _, tc := range []struct {
		name  string
		state service.State
		tags  map[string]string
		want  string
	}{
		{"stopped, within the interval", service.StateStopped, map[string]string{tagAutoArchive: "60", tagStoppedAt: ago(59 * time.Minute)}, "stopped"},
		{"stopped, past the interval", service.StateStopped, map[string]string{tagAutoArchive: "60", tagStoppedAt: ago(60 * time.Minute)}, "archived"},
		{"default interval: 7 days", service.StateStopped, map[string]string{tagStoppedAt: ago(7*24*time.Hour - time.Minute)}, "stopped"},
		{"default interval, past", service.StateStopped, map[string]string{tagStoppedAt: ago(7 * 24 * time.Hour)}, "archived"},
		{"0 is the maximum (30 days)", service.StateStopped, map[string]string{tagAutoArchive: "0", tagStoppedAt: ago(29 * 24 * time.Hour)}, "stopped"},
		{"0, past 30 days", service.StateStopped, map[string]string{tagAutoArchive: "0", tagStoppedAt: ago(30 * 24 * time.Hour)}, "archived"},
		{"archived on request", service.StateStopped, map[string]string{tagArchived: "true"}, "archived"},
		{"stopped elsewhere: no stop time", service.StateStopped, map[string]string{tagAutoArchive: "1"}, "stopped"},
		{"running with stale marks", service.StateRunning, map[string]string{tagArchived: "true", tagStoppedAt: ago(time.Hour)}, "started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := daytonaState(service.Sandbox{State: tc.state, Tags: tc.tags}, now); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLifecycleTags(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	if got := lifecycleTags(map[string]string{"a": "1"}, false, now); got[tagStoppedAt] != "1800000000" || got["a"] != "1" {
		t.Errorf("stop: %v", got)
	}
	if got := lifecycleTags(map[string]string{tagStoppedAt: "5"}, false, now); got != nil {
		t.Errorf("a repeated stop moved the stop time: %v", got)
	}
	if got := lifecycleTags(map[string]string{"a": "1", tagStoppedAt: "5", tagArchived: "true"}, true, now); len(got) != 1 || got["a"] != "1" {
		t.Errorf("start: %v", got)
	}
	if got := lifecycleTags(map[string]string{"a": "1"}, true, now); got != nil {
		t.Errorf("start without marks: %v", got)
	}
}
