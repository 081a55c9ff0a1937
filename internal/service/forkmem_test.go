package service_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
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
	mem, _ := filepath.Glob(filepath.Join(filepath.Dir(h.hibDir), "forkmem", "tpl-*"))
	if len(mem) != 1 {
		t.Fatalf("memory images: %v, want one", mem)
	}
	if fi, err := os.Stat(filepath.Dir(mem[0])); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the memory images' directory: %v, %v; want 0700", fi, err)
	}
	if fi, err := os.Stat(mem[0]); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the memory image: %v, %v; want a 0700 directory", fi, err)
	}
	img, err := os.Stat(filepath.Join(mem[0], "checkpoint.img"))
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
	if mem, _ := filepath.Glob(filepath.Join(filepath.Dir(h.hibDir), "forkmem", "*")); len(mem) > 0 {
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
		if mem, _ := filepath.Glob(filepath.Join(filepath.Dir(h.hibDir), "forkmem", "*")); len(mem) > 0 {
			t.Errorf("%s failing: memory images left once the capture went: %v", m, mem)
		}
	}
}
