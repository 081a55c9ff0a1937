package daytona

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/service"
)

func TestParseStatus(t *testing.T) {
	out := "## main...origin/main [ahead 2, behind 1]\x00 M README.md\x00R  new.txt\x00old.txt\x00?? untracked\x00UU conflict\x00"
	want := gitStatus{
		CurrentBranch: "main", Ahead: 2, Behind: 1, BranchPublished: true,
		FileStatus: []fileStatus{
			{Name: "README.md", Staging: "Unmodified", Worktree: "Modified"},
			{Name: "new.txt", Staging: "Renamed", Worktree: "Unmodified", Extra: "old.txt"},
			{Name: "untracked", Staging: "Untracked", Worktree: "Untracked"},
			{Name: "conflict", Staging: "Updated but unmerged", Worktree: "Updated but unmerged"},
		},
	}
	if diff := cmp.Diff(want, parseStatus(out)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for header, want := range map[string]gitStatus{
		"## main\x00":                    {CurrentBranch: "main", FileStatus: []fileStatus{}},
		"## No commits yet on trunk\x00": {CurrentBranch: "trunk", FileStatus: []fileStatus{}},
		"## HEAD (no branch)\x00":        {CurrentBranch: "HEAD", FileStatus: []fileStatus{}},
	} {
		if diff := cmp.Diff(want, parseStatus(header)); diff != "" {
			t.Errorf("%q (-want +got):\n%s", header, diff)
		}
	}
}

func TestSingleFrom(t *testing.T) {
	for in, want := range map[string]string{
		"FROM python:3.12\n":      "python:3.12",
		"# base\nfrom alpine\n\n": "alpine",
		"FROM a\nRUN echo\n":      "",
		"FROM a AS b\n":           "",
		"":                        "",
	} {
		got, ok := singleFrom(in)
		if got != want || ok != (want != "") {
			t.Errorf("singleFrom(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// TestIntervals: Daytona's auto-stop and auto-delete intervals (minutes)
// as the service's rules, and back: auto-delete -1 is never, 0 at the
// stop.
func TestIntervals(t *testing.T) {
	for _, tc := range []struct {
		autoStop, autoDelete int
		want                 service.Lifecycle
	}{
		{0, -1, service.Lifecycle{}},
		{15, -1, service.Lifecycle{AutoStop: 15 * time.Minute}},
		{15, 0, service.Lifecycle{AutoStop: 15 * time.Minute, DeleteOnStop: true}},
		{0, 10, service.Lifecycle{AutoDelete: 10 * time.Minute}},
	} {
		got, err := intervals(service.Lifecycle{AutoArchive: time.Hour}, tc.autoStop, tc.autoDelete)
		tc.want.AutoArchive = time.Hour
		if err != nil || got != tc.want {
			t.Errorf("intervals(%d, %d) = %+v, %v; want %+v", tc.autoStop, tc.autoDelete, got, err, tc.want)
		}
		if minutes(got.AutoStop) != tc.autoStop || autoDeleteOf(got) != tc.autoDelete {
			t.Errorf("%+v reads back as %d/%d", got, minutes(got.AutoStop), autoDeleteOf(got))
		}
	}
	for _, bad := range [][2]int{{-1, -1}, {10081, -1}, {0, -2}, {0, 10081}} {
		if _, err := intervals(service.Lifecycle{}, bad[0], bad[1]); err == nil {
			t.Errorf("intervals(%d, %d): no error", bad[0], bad[1])
		}
	}
}
