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

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

// counterLoop runs in a sandbox: /tmp/c counts up ten times a second.
const counterLoop = `sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' >/dev/null 2>&1 &`

// sandboxRunner runs commands in the harness's sandboxes as alice.
type sandboxRunner struct {
	t *testing.T
	h *harness
}

func (r sandboxRunner) run(id, cmd string) string {
	r.t.Helper()
	res, err := r.h.svc.Exec(r.t.Context(), service.Caller{Owner: "alice"}, id, service.ExecRequest{Command: cmd})
	if err != nil {
		r.t.Fatalf("exec %q in %s: %v", cmd, id, err)
	}
	return string(res.Stdout)
}

func (r sandboxRunner) count(id string) int {
	r.t.Helper()
	n, _ := strconv.Atoi(strings.TrimSpace(r.run(id, "cat /tmp/c 2>/dev/null")))
	return n
}

// countsTo waits until id's counter reaches n.
func (r sandboxRunner) countsTo(id string, n int) {
	r.t.Helper()
	for deadline := time.Now().Add(time.Minute); r.count(id) < n; {
		if time.Now().After(deadline) {
			r.t.Fatalf("the counter of %s does not reach %d", id, n)
		}
	}
}

// counterSnapshot creates a gVisor sandbox of alice's running
// counterLoop and takes a snapshot with memory of it once it counts.
func counterSnapshot(t *testing.T, h *harness) (service.Sandbox, service.Template) {
	t.Helper()
	g := createGVisor(t, h)
	sandboxRunner{t, h}.run(g.ID, counterLoop)
	sandboxRunner{t, h}.countsTo(g.ID, 5)
	snap, err := h.svc.Snapshot(t.Context(), service.Caller{Owner: "alice"}, g.ID, "", service.SnapshotWithMemory)
	if err != nil {
		t.Fatal(err)
	}
	return g, snap
}

// TestSnapshotWithMemory_EveryCreateStartsWithTheSourcesProcesses: a
// gVisor sandbox with env, a secret env and a counter is snapshotted with
// its memory under a name, then destroyed. Two sandboxes created from the
// snapshot's name run the counter on from the snapshot's count, each
// independently, with the source's env and secret env and the request's
// env for what they start; each agent takes its own token, never the
// source's. The snapshot's memory image is 0700 and counts in its size; it
// cannot be deleted while a sandbox made from it exists, and goes with it.
func TestSnapshotWithMemory_EveryCreateStartsWithTheSourcesProcesses(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	r := sandboxRunner{t, h}
	src, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor,
		Env: map[string]string{"FROM": "source"}, SecretEnv: map[string]string{"SECRET": "s3cr3t"}})
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(r.run(src.ID, counterLoop+" echo $!"))
	r.countsTo(src.ID, 10)
	before := r.count(src.ID)
	snap, err := h.svc.Snapshot(ctx, alice, src.ID, "warm", service.SnapshotWithMemory)
	if err != nil {
		t.Fatalf("Snapshot with memory: %v", err)
	}
	if !snap.Memory || snap.Kind != service.TemplateKindSnapshot || snap.State != service.TemplateReady {
		t.Fatalf("the snapshot = %+v, want a ready snapshot with memory", snap)
	}
	memDir := filepath.Join(h.hibDir, ".forkmem", snap.ID)
	if fi, err := os.Stat(memDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the snapshot's memory image: %v, %v; want a 0700 directory", fi, err)
	}
	img, err := os.Stat(filepath.Join(memDir, "checkpoint.img.sealed"))
	if err != nil {
		t.Fatal(err)
	}
	if snap.SizeBytes < img.Size() {
		t.Errorf("the snapshot's size = %d, want at least its memory image's %d", snap.SizeBytes, img.Size())
	}
	// The source runs on after the snapshot, then goes.
	n := r.count(src.ID)
	r.countsTo(src.ID, n+1)
	srcRow, err := h.store.GetSandbox(ctx, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	srcToken, err := h.keyring.Open(srcRow.AgentTokenSealed, secrets.AssociatedData("sandbox", src.ID, "agent-token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Destroy(ctx, alice, src.ID); err != nil {
		t.Fatal(err)
	}

	// Two at once, by the snapshot's name.
	made := make([]*service.Created, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range made {
		wg.Go(func() {
			made[i], errs[i] = h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: "warm", Env: map[string]string{"MINE": strconv.Itoa(i)}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("create from the snapshot: %v", err)
	}
	for i, c := range made {
		if c.Runtime != service.RuntimeGVisor || c.MemoryMB != srcRow.MemoryMB || c.MilliCPU != srcRow.CPUMillis {
			t.Errorf("sandbox %d: runtime %q, %d MB, %d mCPU; want the source's", i, c.Runtime, c.MemoryMB, c.MilliCPU)
		}
		got := r.count(c.ID)
		if got < before {
			t.Errorf("sandbox %d's counter = %d, the source's was %d at the snapshot; want it to go on", i, got, before)
		}
		r.countsTo(c.ID, got+2) // the loop runs: the capture's file alone would stand still
		if alive := r.run(c.ID, "kill -0 "+pid+" && echo alive"); alive != "alive\n" {
			t.Errorf("sandbox %d: the source's process %s = %q, want alive", i, pid, alive)
		}
		want := "source s3cr3t " + strconv.Itoa(i) + "\n"
		if got := r.run(c.ID, `echo $FROM $SECRET $MINE`); got != want {
			t.Errorf("sandbox %d's env = %q, want %q", i, got, want)
		}
		tok, err := h.keyring.Open(mustRow(t, h, c.ID).AgentTokenSealed, secrets.AssociatedData("sandbox", c.ID, "agent-token"))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkToken(h, c.ID, string(srcToken)); err == nil {
			t.Errorf("sandbox %d's agent takes the source's token", i)
		}
		if err := checkToken(h, c.ID, string(tok)); err != nil {
			t.Errorf("sandbox %d's agent refuses its own token: %v", i, err)
		}
	}
	// Independent: one's loop killed, the other's counts on; a file is
	// its own.
	r.run(made[0].ID, "kill "+pid+"; echo a > /mark")
	stopped := r.count(made[0].ID)
	other := r.count(made[1].ID)
	r.countsTo(made[1].ID, other+2)
	if got := r.count(made[0].ID); got > stopped+1 {
		t.Errorf("the first's counter went on (%d → %d) after its loop was killed", stopped, got)
	}
	if got := r.run(made[1].ID, "cat /mark 2>/dev/null || echo none"); got != "none\n" {
		t.Errorf("the second sees the first's file: %q", got)
	}

	// Not deleted while used; goes with its memory once unused.
	if err := h.svc.DeleteTemplate(ctx, alice, "warm"); !errors.Is(err, service.ErrConflict) {
		t.Errorf("delete the snapshot while sandboxes use it = %v, want a conflict", err)
	}
	for _, c := range made {
		if err := h.svc.Destroy(ctx, alice, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.svc.DeleteTemplate(ctx, alice, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(memDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the memory image after the snapshot went: %v, want gone", err)
	}
	nothingLeft(t, h)
}

func mustRow(t *testing.T, h *harness, id string) store.Sandbox {
	t.Helper()
	row, err := h.store.GetSandbox(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func checkToken(h *harness, id, tok string) error {
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return h.rt.DialAgent(ctx, id) }, tok)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Check(ctx)
}

// TestSnapshotWithMemory_RefusalsChangeNothing: a runc-class sandbox's
// snapshot with memory is a FieldError on memory naming why, a stopped
// sandbox's a conflict; a create from a snapshot with memory that asks for
// another size, runtime, network or volumes is a FieldError naming the
// field. None of them makes a sandbox, a template or a memory image. A
// snapshot without memory of a sandbox restored from one holds no memory:
// a create from it boots afresh.
func TestSnapshotWithMemory_RefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	r := sandboxRunner{t, h}
	runc, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.svc.Snapshot(ctx, alice, runc.ID, "", service.SnapshotWithMemory)
	var fe *service.FieldError
	if !errors.As(err, &fe) || fe.Field != "memory" || !strings.Contains(fe.Reason, "CRIU") {
		t.Errorf("Snapshot with memory of a runc-class sandbox = %v, want a FieldError on memory naming why", err)
	}
	// E2B's snapshot: with memory where it can, the files elsewhere.
	if s, err := h.svc.Snapshot(ctx, alice, runc.ID, "", service.SnapshotMemoryIfAble); err != nil || s.Memory {
		t.Errorf("Snapshot with memory if able of a runc-class sandbox = %+v, %v; want its files only", s, err)
	}
	g := createGVisor(t, h)
	r.run(g.ID, counterLoop)
	r.countsTo(g.ID, 5)
	if _, err := h.svc.Stop(ctx, alice, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Snapshot(ctx, alice, g.ID, "", service.SnapshotWithMemory); !errors.Is(err, service.ErrConflict) {
		t.Errorf("Snapshot with memory of a stopped sandbox = %v, want a conflict", err)
	}
	if mem, _ := filepath.Glob(filepath.Join(h.hibDir, ".forkmem", "*")); len(mem) > 0 {
		t.Errorf("memory images after the refusals: %v", mem)
	}
	if _, err := h.svc.Start(ctx, alice, g.ID); err != nil {
		t.Fatal(err)
	}
	r.run(g.ID, counterLoop)
	r.countsTo(g.ID, 5)
	snap, err := h.svc.Snapshot(ctx, alice, g.ID, "", service.SnapshotMemoryIfAble)
	if err != nil || !snap.Memory {
		t.Fatalf("Snapshot with memory if able of a running gVisor sandbox = %+v, %v; want its memory", snap, err)
	}
	for _, c := range []struct {
		field string
		req   service.CreateRequest
	}{
		{"memory_mb", service.CreateRequest{MemoryMB: 1024}},
		{"milli_cpu", service.CreateRequest{MilliCPU: 3000}},
		{"runtime", service.CreateRequest{Runtime: service.RuntimeDocker}},
		{"network", service.CreateRequest{Network: true}},
		{"mounts", service.CreateRequest{Mounts: []service.Mount{{Volume: "v", Path: "/v"}}}},
	} {
		c.req.Owner, c.req.Template = "alice", snap.ID
		_, err := h.svc.CreateSandbox(ctx, c.req)
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("create from the snapshot asking for another %s = %v, want a FieldError on it", c.field, err)
		}
	}
	if sbs, _, err := h.svc.List(ctx, alice, service.ListFilter{}); err != nil || len(sbs) != 2 {
		t.Errorf("sandboxes after the refused creates: %d, %v; want the two", len(sbs), err)
	}
	// A restored sandbox's own snapshot without memory boots afresh.
	restored, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	files, err := h.svc.Snapshot(ctx, alice, restored.ID, "", service.SnapshotFiles)
	if err != nil || files.Memory {
		t.Fatalf("a files-only snapshot of a restored sandbox = %+v, %v; want no memory", files, err)
	}
	fresh, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: files.ID, Runtime: service.RuntimeGVisor})
	if err != nil {
		t.Fatal(err)
	}
	at := r.count(fresh.ID) // the capture's file, its loop not running
	if got := r.run(fresh.ID, "sleep 0.5; cat /tmp/c"); strings.TrimSpace(got) != strconv.Itoa(at) {
		t.Errorf("a sandbox from the files-only snapshot counts on (%d → %s): its processes were restored", at, got)
	}
	for _, id := range []string{runc.ID, g.ID, restored.ID, fresh.ID} {
		if err := h.svc.Destroy(ctx, alice, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.svc.DeleteTemplate(ctx, alice, snap.ID); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, h)
}

// TestSnapshotWithMemory_FaultedRestoreLeavesNothing: a create from a
// snapshot with memory whose restore, or whose token hand-over, fails
// leaves no sandbox, and the snapshot serves the next create.
func TestSnapshotWithMemory_FaultedRestoreLeavesNothing(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	r := sandboxRunner{t, h}
	g, snap := counterSnapshot(t, h)
	if err := h.svc.Destroy(ctx, alice, g.ID); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("injected")
	for _, m := range []runtimetest.Method{runtimetest.Create, runtimetest.DialAgent} {
		h.rt.Inject(m, runtimetest.Fault{Err: boom, Times: 1})
		_, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: snap.ID})
		h.rt.Clear(m)
		if err == nil {
			t.Errorf("%s failing: the create succeeded", m)
		}
		if sbs, _, err := h.svc.List(ctx, alice, service.ListFilter{}); err != nil || len(sbs) > 1 {
			t.Errorf("%s failing: %d sandboxes left (%v)", m, len(sbs), err)
		} else if len(sbs) == 1 {
			// A dial that failed once was retried: the create won.
			if err := h.svc.Destroy(ctx, alice, sbs[0].ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: snap.ID})
	if err != nil {
		t.Fatalf("create from the snapshot after the faults: %v", err)
	}
	if r.count(c.ID) < 5 {
		t.Error("the sandbox made after the faults does not run the snapshot's counter")
	}
	if err := h.svc.Destroy(ctx, alice, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.DeleteTemplate(ctx, alice, snap.ID); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, h)
}

// nothingLeft checks that no sandbox, container or memory image of the
// harness's is left.
func nothingLeft(t *testing.T, h *harness) {
	t.Helper()
	if ins, err := h.rt.ListOurs(t.Context()); err != nil || len(ins) > 0 {
		t.Errorf("containers left: %v (%v)", ins, err)
	}
	if rows, _, err := h.store.ListSandboxes(t.Context(), store.ListFilter{}); err != nil || len(rows) > 0 {
		t.Errorf("sandboxes left: %d (%v)", len(rows), err)
	}
	if mem, _ := filepath.Glob(filepath.Join(h.hibDir, ".forkmem", "*")); len(mem) > 0 {
		t.Errorf("memory images left: %v", mem)
	}
	if imgs, _ := filepath.Glob(filepath.Join(h.hibDir, "sb-*")); len(imgs) > 0 {
		t.Errorf("hibernate images left: %v", imgs)
	}
}
