package daytona

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

func TestLifetime(t *testing.T) {
	for _, tc := range []struct {
		running              bool
		autoStop, autoDelete int
		want                 time.Duration
	}{
		{true, 0, -1, 0},
		{true, 0, 10, 0},
		{true, 15, -1, 15 * time.Minute},
		{true, 15, 10, 25 * time.Minute},
		{false, 15, -1, 0},
		{false, 15, 10, 10 * time.Minute},
		{false, 15, 0, time.Second},
	} {
		if got := lifetime(tc.running, tc.autoStop, tc.autoDelete); got != tc.want {
			t.Errorf("lifetime(%v, %d, %d) = %v, want %v", tc.running, tc.autoStop, tc.autoDelete, got, tc.want)
		}
	}
}

// TestDemuxer_SplitMarkers feeds a stream one byte at a time: markers
// split across chunks, output without a trailing newline, and bytes
// outside any command (dropped).
func TestDemuxer_SplitMarkers(t *testing.T) {
	s := fakeSession(New(Options{}), "sb-1", "s")
	a := &command{id: "a", changed: make(chan struct{})}
	b := &command{id: "b", changed: make(chan struct{})}
	s.byID["a"], s.byID["b"] = a, b
	out := &demuxer{s: s, open: s.marker()}
	errs := &demuxer{s: s, open: s.marker(), stderr: true}
	stream := "stray\x1etok:a:B\x1eone\x1e\x1etok:a:E0\x1ejunk\x1etok:b:B\x1etwo\x1etok:b:E7\x1e"
	for i := range len(stream) {
		out.feed([]byte{stream[i]})
	}
	errs.feed([]byte("\x1etok:a:B\x1e\x1etok:a:E0\x1e\x1etok:b:B\x1eerr\x1etok:b:E7\x1e"))
	if got := s.logs(a); got.Stdout != "one\x1e" || got.Stderr != "" {
		t.Errorf("a: %+v", got)
	}
	if got := s.logs(b); got.Stdout != "two" || got.Stderr != "err" || got.Output != "twoerr" {
		t.Errorf("b: %+v", got)
	}
	if a.exitCode == nil || *a.exitCode != 0 || b.exitCode == nil || *b.exitCode != 7 {
		t.Errorf("exit codes %v %v", a.exitCode, b.exitCode)
	}
}
