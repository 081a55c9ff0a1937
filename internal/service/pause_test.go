package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// workload starts, in sandbox id, a counter loop writing /tmp/c ten times
// a second and busybox httpd on 127.0.0.1:8080, and returns the loop's pid.
func workload(t *testing.T, h *harness, id string) string {
	t.Helper()
	res, err := h.svc.Exec(t.Context(), admin, id, service.ExecRequest{Command: `mkdir -p /tmp/www && echo hello > /tmp/www/index.html &&
		httpd -p 127.0.0.1:8080 -h /tmp/www &&
		{ sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/c; sleep 0.1; done' >/dev/null 2>&1 & echo $!; }`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the workload: %v (%+v)", err, res)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// counter reads the counter loop's /tmp/c.
func counter(t *testing.T, h *harness, id string) int {
	t.Helper()
	res, err := h.svc.Exec(t.Context(), admin, id, service.ExecRequest{Command: "cat /tmp/c"})
	if err != nil {
		t.Fatalf("read the counter: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		return 0 // not written yet
	}
	return n
}

// waitCounter waits until the counter reaches at least n and returns it.
func waitCounter(t *testing.T, h *harness, id string, n int) int {
	t.Helper()
	var got int
	testenv.WaitFor(t, fmt.Sprintf("counter ≥ %d", n), func() error {
		if got = counter(t, h, id); got < n {
			return fmt.Errorf("counter at %d", got)
		}
		return nil
	})
	return got
}

// TestPause_ProcessesFreezeAndContinue: a paused sandbox's counter loop
// stands still and its exec answers ErrPaused; after resume the same
// process (same pid) counts on and the HTTP server answers.
func TestPause_ProcessesFreezeAndContinue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pid := workload(t, h, c.ID)

	// The loop's pace on this host: the time ten increments take.
	start := waitCounter(t, h, c.ID, 1)
	t0 := time.Now()
	waitCounter(t, h, c.ID, start+10)
	tenSteps := time.Since(t0)

	before := counter(t, h, c.ID)
	paused, err := h.svc.Pause(ctx, admin, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if paused.State != service.StatePaused || paused.PausedAt.IsZero() {
		t.Fatalf("Pause = state %s, paused at %v; want paused", paused.State, paused.PausedAt)
	}
	if again, err := h.svc.Pause(ctx, admin, c.ID); err != nil || again.State != service.StatePaused {
		t.Errorf("second Pause = %s, %v; want paused, nil", again.State, err)
	}
	if st, err := h.rt.Inspect(ctx, c.ID); err != nil || !st.Paused {
		t.Errorf("engine state while paused = %+v, %v; want paused", st, err)
	}
	if _, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "true"}); !errors.Is(err, service.ErrPaused) || !errors.Is(err, service.ErrConflict) {
		t.Errorf("Exec while paused = %v, want ErrPaused (a conflict)", err)
	}
	if conn, err := h.svc.DialPort(ctx, c.ID, 8080); !errors.Is(err, service.ErrPaused) {
		if conn != nil {
			conn.Close()
		}
		t.Errorf("DialPort while paused = %v, want ErrPaused", err)
	}
	// Paused for at least thirty increments' worth of time: a loop that
	// ran would count past before+30; a frozen one stays where it was.
	window := max(2*time.Second, 3*tenSteps)
	testenv.WaitFor(t, "the pause window to pass", func() error {
		if d := time.Since(t0); d < window+tenSteps { // t0 + tenSteps ≈ the pause
			return fmt.Errorf("paused for %v", d)
		}
		return nil
	})

	resumed, err := h.svc.Resume(ctx, admin, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.State != service.StateRunning || resumed.ProcessesRestarted {
		t.Fatalf("Resume = state %s, restarted %v; want running, false", resumed.State, resumed.ProcessesRestarted)
	}
	after := counter(t, h, c.ID)
	if after-before >= 10 {
		t.Errorf("the counter went from %d to %d while paused for %v (ten steps take %v): not frozen", before, after, window, tenSteps)
	}
	waitCounter(t, h, c.ID, after+5)
	res, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "kill -0 " + pid + " && wget -qO- http://127.0.0.1:8080/"})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello\n" {
		t.Errorf("after resume: pid %s alive and the server answering = %q, %v (%+v)", pid, res.Stdout, err, res)
	}
	// The server answers from outside too, through the agent's tunnel.
	conn, err := h.svc.DialPort(ctx, c.ID, 8080)
	if err != nil {
		t.Fatalf("DialPort after resume: %v", err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprint(conn, "GET / HTTP/1.0\r\n\r\n")
	reply, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.HasPrefix(string(reply), "HTTP/1.") || !strings.HasSuffix(string(reply), "hello\n") {
		t.Errorf("HTTP through DialPort after resume = %q", reply)
	}
	if again, err := h.svc.Resume(ctx, admin, c.ID); err != nil || again.State != service.StateRunning || again.ProcessesRestarted {
		t.Errorf("second Resume = %+v, %v; want running, not restarted", again, err)
	}

	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// TestPause_TimeoutAndCapacity: a paused sandbox past its expiry is not
// reaped and keeps its reservation; its timeout resumes with it.
func TestPause_TimeoutAndCapacity(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Pause(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	used, _ := h.adm.Usage()
	h.clock.Advance(time.Hour)
	if n, err := h.svc.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("Reap of a paused sandbox = %d, %v; want 0", n, err)
	}
	if now, _ := h.adm.Usage(); now != used || used.MemoryMB == 0 {
		t.Errorf("capacity while paused = %+v, want %+v held", now, used)
	}
	r, err := h.svc.Resume(ctx, admin, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if left := r.ExpiresAt.Sub(h.clock.Now()); left < 50*time.Second || left > time.Minute {
		t.Errorf("time left after resume = %v, want the minute it had", left)
	}
	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// TestPause_PauseMaxStopsThenResumeRestarts: a sandbox paused past
// PauseMax is stopped (its file system kept, its capacity released), and
// the next Resume starts it and says its processes restarted.
func TestPause_PauseMaxStopsThenResumeRestarts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{pauseMax: 10 * time.Minute})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "echo kept > /kept"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Pause(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(9 * time.Minute)
	if n, err := h.svc.StopLongPaused(ctx); err != nil || n != 0 {
		t.Fatalf("StopLongPaused before the limit = %d, %v; want 0", n, err)
	}
	h.clock.Advance(2 * time.Minute)
	if n, err := h.svc.StopLongPaused(ctx); err != nil || n != 1 {
		t.Fatalf("StopLongPaused past the limit = %d, %v; want 1", n, err)
	}
	sb, err := h.svc.Get(ctx, admin, c.ID)
	if err != nil || sb.State != service.StateStopped {
		t.Fatalf("after the limit: %s, %v; want stopped", sb.State, err)
	}
	if st, _ := h.rt.Inspect(ctx, c.ID); st.State != runtime.StateExited {
		t.Errorf("container after the limit: %+v, want exited", st)
	}
	if used, _ := h.adm.Usage(); used.MemoryMB != 0 {
		t.Errorf("capacity after the stop = %+v, want released", used)
	}
	r, err := h.svc.Resume(ctx, admin, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != service.StateRunning || !r.ProcessesRestarted {
		t.Errorf("Resume after the limit = %s, restarted %v; want running, true", r.State, r.ProcessesRestarted)
	}
	if res, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "cat /kept"}); err != nil || string(res.Stdout) != "kept\n" {
		t.Errorf("file system after the restart = %q, %v", res.Stdout, err)
	}
	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}

// A host short of memory gets it back from paused sandboxes first: they
// are stopped, longest paused first, only while memory is short, and the
// next resume says their processes restarted.
func TestPause_MemoryPressureStopsLongestPausedFirst(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		availMB = int64(900) // of 1000: plenty
		h       *harness
		ids     []string
	)
	setAvail := func(mb int64) { mu.Lock(); availMB = mb; mu.Unlock() }
	h = newHarness(t, harnessOptions{memory: func() (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		a := availMB
		for _, id := range ids { // each stopped sandbox gives back 100 MB
			if row, err := h.store.GetSandbox(context.Background(), id); err == nil && row.State == store.StateStopped {
				a += 100
			}
		}
		return a, 1000, nil
	}})
	ctx := t.Context()
	for range 3 {
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		ids = append(ids, c.ID)
		mu.Unlock()
		t.Cleanup(func() { _ = h.svc.Destroy(context.WithoutCancel(ctx), admin, c.ID) })
		if _, err := h.svc.Pause(ctx, admin, c.ID); err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(time.Second)
	}
	if n, err := h.svc.StopPausedUnderPressure(ctx); err != nil || n != 0 {
		t.Fatalf("with memory to spare: stopped %d, %v; want 0", n, err)
	}
	setAvail(50) // 5%: under the 10% floor; one stop brings it to 15%
	if n, err := h.svc.StopPausedUnderPressure(ctx); err != nil || n != 1 {
		t.Fatalf("short of memory: stopped %d, %v; want 1", n, err)
	}
	for i, want := range []service.State{service.StateStopped, service.StatePaused, service.StatePaused} {
		if sb, err := h.svc.Get(ctx, admin, ids[i]); err != nil || sb.State != want {
			t.Errorf("sandbox %d (paused %d-th) is %s, %v; want %s", i, i+1, sb.State, err, want)
		}
	}
	r, err := h.svc.Resume(ctx, admin, ids[0])
	if err != nil || r.State != service.StateRunning || !r.ProcessesRestarted {
		t.Errorf("resume of the stopped one: %s restarted=%v, %v; want running, true", r.State, r.ProcessesRestarted, err)
	}
}

// TestPause_ConcurrentPauseResumeDestroy: goroutines pausing, resuming,
// stopping and destroying one sandbox at once leave one consistent state:
// the row's state matches the engine's (paused row, frozen container;
// running row, running container; stopped row, stopped container), or
// both are gone.
func TestPause_ConcurrentPauseResumeDestroy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	const rounds, workers = 4, 12
	for round := range rounds {
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				switch i % 6 {
				case 0, 1:
					_, err = h.svc.Pause(ctx, admin, c.ID)
				case 2, 3:
					_, err = h.svc.Resume(ctx, admin, c.ID)
				case 4:
					_, err = h.svc.Stop(ctx, admin, c.ID)
				case 5:
					if round%2 == 0 && i == 5 {
						err = h.svc.Destroy(ctx, admin, c.ID)
					}
				}
				if err != nil && !errors.Is(err, service.ErrNotFound) && !errors.Is(err, service.ErrConflict) && !service.Is(err, service.ErrConflict) {
					t.Errorf("round %d worker %d: %v", round, i, err)
				}
			}()
		}
		wg.Wait()
		checkConsistent(t, h, c.ID)
		if err := h.svc.Destroy(ctx, admin, c.ID); err != nil && !errors.Is(err, service.ErrNotFound) {
			t.Fatal(err)
		}
	}
	h.assertNothingLeft(t)
}

// checkConsistent fails t unless sandbox id's row and container agree.
func checkConsistent(t *testing.T, h *harness, id string) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	row, err := h.store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		if st, err := h.rt.Inspect(ctx, id); err != nil || st.State != runtime.StateMissing {
			t.Errorf("no row, but the container is %+v (%v)", st, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.rt.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ok := false
	switch row.State {
	case store.StatePaused:
		ok = st.State == runtime.StateRunning && st.Paused
	case store.StateRunning:
		ok = st.State == runtime.StateRunning && !st.Paused
	case store.StateStopped:
		ok = st.State == runtime.StateExited
	}
	if !ok || !row.DestroyingSince.IsZero() {
		t.Errorf("row %s (destroying since %v), container %+v: inconsistent", row.State, row.DestroyingSince, st)
	}
}

// TestReconcile_EngineFollowsThePausedRow: a pause or resume cut short
// between its write and its engine call leaves the engine behind the row;
// the periodic pass freezes a paused row's running container and thaws a
// running row's frozen one.
func TestReconcile_EngineFollowsThePausedRow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	var ids []string
	for range 2 {
		c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	// ids[0]: the row says paused, the engine never heard. ids[1]: the
	// engine froze it, the row still says running.
	if _, err := h.store.PauseSandbox(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Pause(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		checkConsistent(t, h, id)
	}
	if res, err := h.svc.Exec(ctx, admin, ids[1], service.ExecRequest{Command: "echo thawed"}); err != nil || string(res.Stdout) != "thawed\n" {
		t.Errorf("exec after the thaw = %q, %v", res.Stdout, err)
	}
	for _, id := range ids {
		if err := h.svc.Destroy(ctx, admin, id); err != nil {
			t.Fatal(err)
		}
	}
	h.assertNothingLeft(t)
}
