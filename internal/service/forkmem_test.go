package service_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service"
)

// TestForkWithMemory_ForkHasItsOwnToken: a gVisor sandbox with a secret
// env and a counter is forked with its memory. The fork's agent takes the
// fork's token and refuses the source's (which its restored memory held);
// the source's agent takes the source's token still. The fork runs the
// source's counter on from its count, and sees the secret env. Its memory
// image is 0700 in the data dir and counts in the capture's size; it goes
// with the capture once the fork is destroyed (DropUnusedForks).
func TestForkWithMemory_ForkHasItsOwnToken(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	src, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, SecretEnv: map[string]string{"SECRET": "s3cr3t"}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(id, cmd string) string {
		t.Helper()
		res, err := h.svc.Exec(ctx, alice, id, service.ExecRequest{Command: cmd})
		if err != nil {
			t.Fatalf("exec %q in %s: %v", cmd, id, err)
		}
		return string(res.Stdout)
	}
	run(src.ID, `sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' >/dev/null 2>&1 &`)
	count := func(id string) int {
		n, _ := strconv.Atoi(strings.TrimSpace(run(id, "cat /tmp/c")))
		return n
	}
	for deadline := time.Now().Add(time.Minute); count(src.ID) < 10; {
		if time.Now().After(deadline) {
			t.Fatal("the counter does not count")
		}
	}
	before := count(src.ID)
	forks, err := h.svc.ForkWithMemory(ctx, alice, src.ID, 1)
	if err != nil {
		t.Fatalf("ForkWithMemory: %v", err)
	}
	f := forks[0]
	if n := count(f.ID); n < before {
		t.Errorf("the fork's counter = %d, the source's was %d; want it to go on", n, before)
	}
	if got := run(f.ID, "echo $SECRET"); got != "s3cr3t\n" {
		t.Errorf("the fork's secret env = %q", got)
	}
	token := func(id string) string {
		t.Helper()
		row, err := h.store.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := h.keyring.Open(row.AgentTokenSealed, secrets.AssociatedData("sandbox", id, "agent-token"))
		if err != nil {
			t.Fatal(err)
		}
		return string(tok)
	}
	check := func(id, tok string) error {
		c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return h.rt.DialAgent(ctx, id) }, tok)
		defer c.Close()
		return c.Check(ctx)
	}
	if err := check(f.ID, token(src.ID)); err == nil {
		t.Error("the fork's agent takes the source's token")
	}
	if err := check(f.ID, token(f.ID)); err != nil {
		t.Errorf("the fork's agent refuses its own token: %v", err)
	}
	if err := check(src.ID, token(src.ID)); err != nil {
		t.Errorf("the source's agent refuses its token after the fork: %v", err)
	}
	mem, _ := filepath.Glob(filepath.Join(h.hibDir, ".forkmem", "tpl-*"))
	if len(mem) != 1 {
		t.Fatalf("memory images: %v, want one", mem)
	}
	if fi, err := os.Stat(filepath.Dir(mem[0])); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the memory images' directory: %v, %v; want 0700", fi, err)
	}
	if fi, err := os.Stat(mem[0]); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the memory image: %v, %v; want a 0700 directory", fi, err)
	}
	img, err := os.Stat(filepath.Join(mem[0], "checkpoint.img.sealed"))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := h.store.GetTemplate(ctx, filepath.Base(mem[0]))
	if err != nil || tpl.SizeBytes < img.Size() {
		t.Errorf("the capture's size = %d (%v), want at least its memory image's %d", tpl.SizeBytes, err, img.Size())
	}
	if err := h.svc.Destroy(ctx, alice, f.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.DropUnusedForks(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mem[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the memory image after its capture went: %v, want gone", err)
	}
}

// TestForkWithMemory_RefusedWithoutCheckpoint: a runc-class sandbox, and
// a stopped gVisor one, are refused (invalid argument naming why, and a
// conflict), and nothing is made: no sandbox, no capture, no image.
func TestForkWithMemory_RefusedWithoutCheckpoint(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	runc, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.svc.ForkWithMemory(ctx, alice, runc.ID, 1)
	var fe *service.FieldError
	if !errors.As(err, &fe) || fe.Field != "memory" || !strings.Contains(fe.Reason, "CRIU") {
		t.Errorf("ForkWithMemory of a runc-class sandbox = %v, want a FieldError on memory naming why", err)
	}
	g := createGVisor(t, h)
	if _, err := h.svc.Stop(ctx, alice, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.ForkWithMemory(ctx, alice, g.ID, 1); !errors.Is(err, service.ErrConflict) {
		t.Errorf("ForkWithMemory of a stopped sandbox = %v, want a conflict", err)
	}
	if sbs, _, err := h.svc.List(ctx, alice, service.ListFilter{}); err != nil || len(sbs) != 2 {
		t.Errorf("sandboxes after the refusals: %d, %v; want the two", len(sbs), err)
	}
	if mem, _ := filepath.Glob(filepath.Join(h.hibDir, ".forkmem", "*")); len(mem) > 0 {
		t.Errorf("memory images after the refusals: %v", mem)
	}
}

// TestForkWithMemory_FaultAtEveryStepLeavesTheSourceRunningOrResumable
// fails a fork with memory at each runtime step: the source's checkpoint
// (it runs on), the fork's restore (the source runs on, no fork is left)
// and the source's own restore (it stays hibernated, and a resume brings
// its processes back). Each time the call fails, no fork sandbox is
// left, and once the capture goes no memory image is left.
func TestForkWithMemory_FaultAtEveryStepLeavesTheSourceRunningOrResumable(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	src := createGVisor(t, h)
	run := func(cmd string) (string, error) {
		res, err := h.svc.Exec(ctx, alice, src.ID, service.ExecRequest{Command: cmd})
		if err != nil {
			return "", err
		}
		return string(res.Stdout), nil
	}
	if _, err := run(`sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' >/dev/null 2>&1 &`); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		out, err := run("cat /tmp/c")
		if err != nil {
			t.Fatalf("read the source's counter: %v", err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n
	}
	boom := errors.New("injected")
	for _, m := range []runtimetest.Method{runtimetest.Checkpoint, runtimetest.Create, runtimetest.Restore} {
		before := count()
		h.rt.Inject(m, runtimetest.Fault{Err: boom, Times: 1})
		forks, err := h.svc.ForkWithMemory(ctx, alice, src.ID, 1)
		h.rt.Clear(m)
		if err == nil {
			t.Fatalf("%s failing: ForkWithMemory = %v, want an error", m, forks)
		}
		sb, gerr := h.svc.Get(ctx, alice, src.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		if m == runtimetest.Restore {
			if sb.State != service.StatePaused || sb.HibernatedAt.IsZero() {
				t.Fatalf("%s failing: the source is %s (hibernated at %v), want hibernated", m, sb.State, sb.HibernatedAt)
			}
			if r, err := h.svc.Resume(ctx, alice, src.ID); err != nil || r.ProcessesRestarted {
				t.Fatalf("resume after the failed fork = %+v, %v; want its processes back", r, err)
			}
		} else if sb.State != service.StateRunning {
			t.Fatalf("%s failing: the source is %s, want running", m, sb.State)
		}
		if n := count(); n < before {
			t.Errorf("%s failing: the source's counter went from %d to %d; want its processes kept", m, before, n)
		}
		if sbs, _, err := h.svc.List(ctx, alice, service.ListFilter{}); err != nil || len(sbs) != 1 {
			t.Errorf("%s failing: %d sandboxes (%v), want only the source", m, len(sbs), err)
		}
		if err := h.svc.DropUnusedForks(ctx); err != nil {
			t.Fatal(err)
		}
		if mem, _ := filepath.Glob(filepath.Join(h.hibDir, ".forkmem", "*")); len(mem) > 0 {
			t.Errorf("%s failing: memory images left once the capture went: %v", m, mem)
		}
	}
}

// wantSourceRunning checks that the fork's source id ended running, not
// hibernated, with no image left, and that no fork of alice's is left
// once its capture went.
func wantSourceRunning(t *testing.T, h *harness, id string) {
	t.Helper()
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	sb, err := h.svc.Get(ctx, alice, id)
	if err != nil || sb.State != service.StateRunning || !sb.HibernatedAt.IsZero() {
		t.Fatalf("the source after the fork: %s hibernated at %v (%v); want running", sb.State, sb.HibernatedAt, err)
	}
	if res, err := h.svc.Exec(ctx, alice, id, service.ExecRequest{Command: "echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("exec in the source after the fork: %q, %v", res.Stdout, err)
	}
	if sbs, _, err := h.svc.List(ctx, alice, service.ListFilter{}); err != nil || len(sbs) != 1 {
		t.Errorf("%d sandboxes (%v), want only the source", len(sbs), err)
	}
	if err := h.svc.DropUnusedForks(ctx); err != nil {
		t.Fatal(err)
	}
	if mem, _ := filepath.Glob(filepath.Join(h.hibDir, ".forkmem", "*")); len(mem) > 0 {
		t.Errorf("memory images left once the capture went: %v", mem)
	}
}

// TestForkWithMemory_CallerGoneLeavesTheSourceRunning: the caller's
// context is cancelled as the source's checkpoint begins, and (second
// case) as its resume's restore begins. The fork fails, the source ends
// running (before, a hung-up client left it hibernated), and no fork or
// memory image is left.
func TestForkWithMemory_CallerGoneLeavesTheSourceRunning(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	src := createGVisor(t, h)
	for _, m := range []runtimetest.Method{runtimetest.Checkpoint, runtimetest.Restore} {
		ctx, cancel := context.WithCancel(t.Context())
		h.rt.Inject(m, runtimetest.Fault{Times: 1, Hook: func() error { cancel(); return nil }})
		forks, err := h.svc.ForkWithMemory(ctx, service.Caller{Owner: "alice"}, src.ID, 1)
		h.rt.Clear(m)
		cancel()
		if err == nil {
			t.Fatalf("the caller gone at %s: ForkWithMemory = %v, want an error", m, forks)
		}
		t.Logf("the caller gone at %s: %v", m, err)
		wantSourceRunning(t, h, src.ID)
	}
}

// TestForkWithMemory_SourceKeepsItsRoomWhileHibernated: on a host of
// 512 MB, a 512 MB source is forked with its memory while another owner
// tries to reserve 512 MB the moment the host's usage drops. The source
// keeps its reservation through the fork (before, its hibernate released
// it, the other owner took it and the source could not resume): the other
// reservation never fits, the source ends running, and the fork itself
// is refused for want of room, typed.
func TestForkWithMemory_SourceKeepsItsRoomWhileHibernated(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{budget: admission.Budget{MilliCPU: 64_000, MemoryMB: 512}})
	ctx := t.Context()
	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, MemoryMB: 512})
	if err != nil {
		t.Fatal(err)
	}
	const other = "sb-another-tenants"
	t.Cleanup(func() { h.adm.Release(other) })
	done, won := make(chan struct{}), make(chan bool, 1)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if used, _ := h.adm.Usage(); used.MemoryMB < 512 {
				if h.adm.Reserve(other, admission.Request{MemoryMB: 512, Owner: "bob"}) == nil {
					won <- true
					return
				}
			}
			select {
			case <-done:
				won <- false
				return
			case <-tick.C:
			}
		}
	}()
	_, err = h.svc.ForkWithMemory(ctx, service.Caller{Owner: "alice"}, sb.ID, 1)
	close(done)
	if <-won {
		t.Error("another owner's reservation took the source's room during the fork")
	}
	if !errors.Is(err, service.ErrCapacityExhausted) {
		t.Errorf("ForkWithMemory on a full host = %v, want capacity exhausted", err)
	}
	wantSourceRunning(t, h, sb.ID)
}

// TestForkWithMemory_HostileAgentSocketBoundsTheFork: a program of the
// source's, restored in the fork, takes the fork's agent socket and never
// answers (here the test's listener, put on the fork's socket path as
// the restored create dials it). The fork answers ErrUnavailable within
// the token step's bound (before, it waited on the caller's context and
// its error was untyped), the source runs on and no fork is left.
func TestForkWithMemory_HostileAgentSocketBoundsTheFork(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	src := createGVisor(t, h)
	var (
		once   sync.Once
		swapAt time.Time
		lis    net.Listener
		mu     sync.Mutex
		conns  []net.Conn
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if lis != nil {
			lis.Close()
		}
		for _, c := range conns {
			c.Close()
		}
	})
	creates := h.rt.Calls(runtimetest.Create)
	h.rt.Inject(runtimetest.DialAgent, runtimetest.Fault{Hook: func() error {
		if h.rt.Calls(runtimetest.Create) == creates {
			return nil // the fork's sandbox is not made yet
		}
		once.Do(func() {
			dirs, _ := os.ReadDir(h.sockRoot)
			for _, d := range dirs {
				if !d.IsDir() || d.Name() == src.ID {
					continue
				}
				path := filepath.Join(h.sockRoot, d.Name(), runtime.AgentSocketName)
				_ = os.Remove(path)
				l, err := net.Listen("unix", path)
				if err != nil {
					t.Errorf("take the fork's agent socket: %v", err)
					return
				}
				mu.Lock()
				lis, swapAt = l, time.Now()
				mu.Unlock()
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						mu.Lock()
						conns = append(conns, c) // read by nobody, answered never
						mu.Unlock()
					}
				}()
			}
		})
		return nil
	}})
	defer h.rt.Clear(runtimetest.DialAgent)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	_, err := h.svc.ForkWithMemory(ctx, service.Caller{Owner: "alice"}, src.ID, 1)
	h.rt.Clear(runtimetest.DialAgent)
	mu.Lock()
	took := swapAt
	mu.Unlock()
	if took.IsZero() {
		t.Fatalf("the fork's agent socket was never taken (ForkWithMemory: %v)", err)
	}
	if !errors.Is(err, service.ErrUnavailable) {
		t.Errorf("ForkWithMemory with a silent agent = %v, want ErrUnavailable", err)
	}
	if d := time.Since(took); d > 45*time.Second {
		t.Errorf("the fork answered %s after its agent went silent, want within the token step's bound", d)
	}
	wantSourceRunning(t, h, src.ID)
}

// TestForkWithMemory_StorageQuotaCheckedBeforeTheHibernate: an owner with
// 100 MB of template storage, none used, forks a sandbox of 512 MB with
// its memory. The capture would take up to its memory and its files: it
// is refused as a quota error before anything is done (before, only
// storage already full was refused, so the capture overshot): no
// checkpoint, no capture, no memory image, the source running.
func TestForkWithMemory_StorageQuotaCheckedBeforeTheHibernate(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{templateStorageMB: 100})
	ctx := t.Context()
	sb, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, MemoryMB: 512})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.svc.ForkWithMemory(ctx, service.Caller{Owner: "alice"}, sb.ID, 1)
	var qe *service.QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, service.ErrQuotaExceeded) {
		t.Errorf("ForkWithMemory past the storage quota = %v, want a QuotaError", err)
	}
	if n := h.rt.Calls(runtimetest.Checkpoint); n != 0 {
		t.Errorf("%d checkpoints, want none", n)
	}
	if ts, err := h.store.ListTemplates(ctx, "", true); err != nil || len(ts) != 0 {
		t.Errorf("templates after the refusal: %d (%v), want none", len(ts), err)
	}
	wantSourceRunning(t, h, sb.ID)
}

// TestForkWithMemory_HibernateDirOnItsOwnFileSystem: the hibernate
// directory is a file system of its own (a tmpfs). A fork with memory
// works: its memory image is kept in that directory, so the hard link
// never crosses file systems (before, it was kept beside the directory
// and the link failed with EXDEV once the source was checkpointed).
func TestForkWithMemory_HibernateDirOnItsOwnFileSystem(t *testing.T) {
	t.Parallel()
	// The cap's default is a quarter of the directory's 2 GB file system,
	// an owner's share half that: under the source's 512 MB of memory.
	h := newHibernateHarness(t, harnessOptions{hibernateTmpfs: true, hibernateMaxMB: 1536})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	src := createGVisor(t, h)
	forks, err := h.svc.ForkWithMemory(ctx, alice, src.ID, 1)
	if err != nil {
		t.Fatalf("ForkWithMemory: %v", err)
	}
	if res, err := h.svc.Exec(ctx, alice, forks[0].ID, service.ExecRequest{Command: "echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("exec in the fork: %q, %v", res.Stdout, err)
	}
	if err := h.svc.Destroy(ctx, alice, forks[0].ID); err != nil {
		t.Fatal(err)
	}
	wantSourceRunning(t, h, src.ID)
}

// TestForkWithMemory_SourceDestroyedMidFork: the source is destroyed as
// its resume begins (a destroy takes no transition lock). The fork fails
// as not found, saying the source was destroyed, never that it "stays
// hibernated (resume it)"; nothing of it is left.
func TestForkWithMemory_SourceDestroyedMidFork(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	src := createGVisor(t, h)
	h.rt.Inject(runtimetest.Restore, runtimetest.Fault{Times: 1, Hook: func() error {
		if err := h.svc.Destroy(ctx, alice, src.ID); err != nil {
			t.Errorf("destroy the source mid-fork: %v", err)
		}
		return nil
	}})
	_, err := h.svc.ForkWithMemory(ctx, alice, src.ID, 1)
	h.rt.Clear(runtimetest.Restore)
	if !errors.Is(err, service.ErrNotFound) || strings.Contains(err.Error(), "stays hibernated") {
		t.Errorf("ForkWithMemory of a source destroyed mid-fork = %v, want not found, saying it was destroyed", err)
	}
	if sbs, _, err := h.svc.List(ctx, alice, service.ListFilter{}); err != nil || len(sbs) != 0 {
		t.Errorf("%d sandboxes (%v), want none", len(sbs), err)
	}
	if err := h.svc.DropUnusedForks(ctx); err != nil {
		t.Fatal(err)
	}
	if mem, _ := filepath.Glob(filepath.Join(h.hibDir, ".forkmem", "*")); len(mem) > 0 {
		t.Errorf("memory images left: %v", mem)
	}
}
