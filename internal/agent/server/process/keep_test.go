package process_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// connectReplay attaches to sel asking for the kept output first.
func (e *env) connectReplay(t *testing.T, sel *rpc.ProcessSelector) (*connect.ServerStreamForClient[rpc.ConnectResponse], error) {
	t.Helper()
	req := connect.NewRequest(&rpc.ConnectRequest{Process: sel})
	req.Header().Set("X-Sandboxd-Replay", "1")
	return e.client.Connect(t.Context(), req)
}

// seqOut is what `seq 1 n` prints.
func seqOut(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// A client that attaches with replay while the process prints gets all of
// its output exactly once: what was kept, then what came after, with no
// gap or repeat between them, whether it attached mid-run or after the end.
func TestKeepOutput_ReplayThenLiveNothingLostOrRepeated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	const n = 4000
	for round := range 3 {
		ctx, cancel := context.WithCancel(t.Context())
		st := e.start(ctx, t, startOpts{keep: "1048576"}, "/bin/sh", "-c",
			fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1)); echo $i; done`, n))
		pid := firstPID(t, events(st))
		cancel() // nobody attached from here on: the output is kept, not lost
		st.Close()
		c, err := e.connectReplay(t, pidSel(pid))
		if err != nil {
			t.Fatalf("round %d: Connect with replay: %v", round, err)
		}
		r := collect(t, events(c))
		c.Close()
		if got := r.stdout.String(); got != seqOut(n) {
			t.Fatalf("round %d: replayed stdout has %d bytes, want %d (lost or repeated output); head %q",
				round, len(got), len(seqOut(n)), got[:min(len(got), 40)])
		}
		if r.end == nil || r.end.GetExitCode() != 0 {
			t.Fatalf("round %d: end %v, want exit 0", round, r.end)
		}
	}
}

// The kept output is bounded: the newest events within the bound, the
// oldest dropped first.
func TestKeepOutput_KeepsOnlyTheNewest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	gate := filepath.Join(e.dir, "gate")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st := e.start(ctx, t, startOpts{keep: "200", tag: ptr("bounded")}, "/bin/sh", "-c",
		`i=0; while [ $i -lt 500 ]; do i=$((i+1)); echo line-$i; done; while [ ! -e "$0" ]; do sleep 0.02; done`, gate)
	pid := firstPID(t, events(st))
	// Read the live stream to the last line, so that all of it was kept
	// before the replay below.
	for next := events(st); ; {
		ev, err := next()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(ev.GetData().GetStdout()), "line-500\n") {
			break
		}
	}
	c, err := e.connectReplay(t, tagSel("bounded"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := collect(t, events(c))
	got := r.stdout.String()
	// Each kept event counts 64 bytes beyond its output.
	if len(got) == 0 || len(got) > 200-64 || !strings.HasSuffix(got, "line-500\n") || !strings.HasSuffix(seqLines(500), got) {
		t.Fatalf("kept %q (%d bytes); want a non-empty suffix of the output of at most 136 bytes", got, len(got))
	}
	e.waitGone(t, pid)
}

func seqLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line-%d\n", i)
	}
	return b.String()
}

// A process that kept its output stays known to a replaying Connect after
// it ended (its output and its end), the newest MaxEnded of them; one that
// kept nothing is gone at its end, as in envd, and a Connect without
// replay never sees an ended process.
func TestKeepOutput_EndedProcessesStayKnownBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, process.Options{})
	var pids []uint32
	for i := range process.MaxEnded + 1 {
		r := e.run(t, startOpts{keep: "1024"}, "/bin/sh", "-c", fmt.Sprintf("echo ended-%d; exit 3", i))
		pids = append(pids, r.pid)
	}
	plain := e.run(t, startOpts{}, "/bin/echo", "plain")

	last := pids[len(pids)-1]
	c, err := e.connectReplay(t, pidSel(last))
	if err != nil {
		t.Fatalf("Connect with replay to an ended process that kept output: %v", err)
	}
	r := collect(t, events(c))
	c.Close()
	if r.stdout.String() != fmt.Sprintf("ended-%d\n", process.MaxEnded) || r.end.GetExitCode() != 3 {
		t.Fatalf("ended process replay: stdout %q end %v; want its output and exit 3", r.stdout.String(), r.end)
	}
	notFound := func(name string, c *connect.ServerStreamForClient[rpc.ConnectResponse], err error) {
		t.Helper()
		if err == nil {
			defer c.Close()
			_, err = events(c)()
		}
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s: %v, want not_found", name, err)
		}
	}
	c, err = e.connectReplay(t, pidSel(pids[0]))
	notFound("the oldest ended, past the bound, with replay", c, err)
	c, err = e.connectReplay(t, pidSel(plain.pid))
	notFound("an ended process that kept nothing, with replay", c, err)
	c, err = e.client.Connect(t.Context(), connect.NewRequest(&rpc.ConnectRequest{Process: pidSel(last)}))
	notFound("an ended process, without replay", c, err)
	if e.listed(t, last) {
		t.Error("an ended process is listed")
	}
}
