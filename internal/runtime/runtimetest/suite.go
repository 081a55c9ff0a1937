package runtimetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Config describes the implementation under test to Run.
type Config struct {
	// New returns a Runtime configured as o says, and cleans it up with
	// t.Cleanup. The suite gives each test its own node id, so that ListOurs
	// sees only that test's sandboxes on a shared engine.
	New func(t *testing.T, o Options) runtime.Runtime
	// Image is a small local image with /bin/sh and sleep (busybox).
	Image string
	// AgentBinary is the host path of a real agent (see BuildAgent).
	AgentBinary string

	// Facts, if set, reports how the engine sees a sandbox, so that the
	// suite can check the container contract (labels, limits, privilege,
	// network, mounts). Runtimes without an engine-level view leave it nil.
	Facts func(t *testing.T, sandboxID string) Facts
	// SocketDir, if set, returns the host directory holding a sandbox's
	// agent socket, which Create must make (0700) and Destroy must remove.
	SocketDir func(sandboxID string) string
	// Foreign, if set, starts a container that sandboxd does not manage
	// (no labels) and returns its name; ListOurs must not report it.
	Foreign func(t *testing.T) string

	// Isolation is set on every spec the suite creates; OCIRuntime, if
	// set, is the engine runtime Facts must then report (e.g. "runsc").
	Isolation  runtime.Isolation
	OCIRuntime string
	// MemoryMB and PidsLimit are every spec's limits (default 128 MiB and
	// 64); gVisor's own kernel is charged to them and needs more.
	MemoryMB, PidsLimit int64

	// RemoveImage, if set, removes an image the suite committed, for a
	// runtime that commits but is no runtime.Images (whose RemoveImage
	// the suite uses otherwise).
	RemoveImage func(ref string)

	// Lacks names the facts only a real engine has that this runtime does
	// not provide, each with the reason; the subtests that check them
	// skip, saying so. A real engine lacks nothing.
	Lacks map[Capability]string
}

// Capability is a fact of a real engine that the suite checks and that a
// runtime without one (an in-memory fake) may declare it lacks.
type Capability string

// The capabilities Config.Lacks can name.
const (
	// EngineFacts: the engine reports how it runs a sandbox (labels,
	// limits, privilege, network, mounts), through Config.Facts; checked by
	// Create_Contract.
	EngineFacts Capability = "EngineFacts"
	// ResourceUsage: Stats measures real memory, CPU time and processes;
	// checked by Stats.
	ResourceUsage Capability = "ResourceUsage"
	// Isolation: each sandbox has its own filesystem and host name, so one
	// sandbox's processes cannot see another's files; checked by Isolation.
	Isolation Capability = "Isolation"
)

// Options are the settings every runtime has, which the suite varies.
type Options struct {
	// NodeID owns the runtime's sandboxes (the sandboxd.node label).
	NodeID string
	// AgentReadyTimeout bounds every readiness wait; zero means the
	// runtime's default.
	AgentReadyTimeout time.Duration
}

// Facts is an engine-level description of a sandbox.
type Facts struct {
	Hostname    string
	Labels      map[string]string
	NanoCPUs    int64
	MemoryBytes int64
	// MemorySwapBytes is memory plus swap; equal to MemoryBytes means no swap.
	MemorySwapBytes int64
	PidsLimit       int64
	Privileged      bool
	CapAdd          []string
	CapDrop         []string
	SecurityOpt     []string
	NetworkMode     string
	// CgroupNS is the cgroup namespace mode ("private" wanted).
	CgroupNS string
	// OCIRuntime is the engine runtime that runs the sandbox ("" or
	// "runc" for the engine's default).
	OCIRuntime string
	// Init reports an engine-injected init process (must be false).
	Init       bool
	Entrypoint []string
	Cmd        []string
	Env        []string
	Mounts     []Mount
	// AgentPid is the host pid of the sandbox's init (the agent; under
	// gVisor runsc's sandbox process); 0 when not known.
	AgentPid int
}

// Mount is a bind mount as the engine reports it.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// Bounds for the suite's waits. Generous: shared 2-core CI machines are slow.
const (
	opTimeout = 60 * time.Second
	// readyTimeout is the readiness deadline of the never-ready test;
	// notReadySlack is what Create may add to it (create, start, cleanup on
	// a loaded machine).
	readyTimeout  = 2 * time.Second
	notReadySlack = 30 * time.Second
)

// Run runs the conformance suite. Subtests run in parallel.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.New == nil || cfg.Image == "" || cfg.AgentBinary == "" {
		t.Fatal("runtimetest.Run: Config.New, Image and AgentBinary are required")
	}
	if _, lacks := cfg.Lacks[EngineFacts]; (cfg.Facts == nil) != lacks {
		t.Fatal("runtimetest.Run: set Config.Facts, or declare Lacks[EngineFacts], not both or neither")
	}
	s := &suite{cfg: cfg}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"CreateReady", s.testCreateReady},
		{"Create_Contract", s.testCreateContract},
		{"Create_AlreadyExists", s.testCreateAlreadyExists},
		{"Create_ConcurrentSameID", s.testCreateConcurrent},
		{"Create_MissingImage", s.testCreateMissingImage},
		{"Create_InvalidSpec", s.testCreateInvalidSpec},
		{"Create_AgentNeverReady", s.testCreateAgentNeverReady},
		{"Create_AgentExits", s.testCreateAgentExits},
		{"Create_CancelledContext", s.testCreateCancelled},
		{"Create_CancelledWhileWaiting", s.testCreateCancelledWhileWaiting},
		{"StopStart_KeepsSandbox", s.testStopStart},
		{"PauseResume_Idempotent", s.testPauseResume},
		{"Destroy_Twice", s.testDestroyTwice},
		{"Missing_Sandbox", s.testMissing},
		{"ListOurs_OnlyThisNode", s.testListOurs},
		{"Stats", s.testStats},
		{"Exec_ThroughAgent", s.testExec},
		{"Files_ThroughAgent", s.testFiles},
		{"Isolation", s.testIsolation},
		{"DiskLimit", s.testDiskLimit},
		{"Checkpoint_Restore", s.testCheckpointRestore},
		{"Commit_FileSystem", s.testCommit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct{ cfg Config }

// need skips t when the runtime under test lacks c.
func (s *suite) need(t *testing.T, c Capability) {
	t.Helper()
	if why, lacks := s.cfg.Lacks[c]; lacks {
		t.Skipf("runtime lacks %s: %s", c, why)
	}
}

// newRuntime returns a runtime for a node id unique to this test.
func (s *suite) newRuntime(t *testing.T) (runtime.Runtime, string) {
	t.Helper()
	node := "node-" + NewSandboxID()[3:]
	return s.cfg.New(t, Options{NodeID: node}), node
}

func (s *suite) memoryMB() int64 {
	if s.cfg.MemoryMB > 0 {
		return s.cfg.MemoryMB
	}
	return 128
}

func (s *suite) pidsLimit() int64 {
	if s.cfg.PidsLimit > 0 {
		return s.cfg.PidsLimit
	}
	return 64
}

func (s *suite) spec(id string) runtime.Spec {
	return runtime.Spec{
		SandboxID:   id,
		Image:       s.cfg.Image,
		CPU:         0.5,
		MemoryMB:    s.memoryMB(),
		PidsLimit:   s.pidsLimit(),
		Env:         map[string]string{"SANDBOXD_TEST": "1"},
		Labels:      map[string]string{"test": "runtimetest"},
		AgentBinary: s.cfg.AgentBinary,
		AgentToken:  "tok-" + id,
		Isolation:   s.cfg.Isolation,
	}
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// destroyOnCleanup makes sure the sandbox is gone after the test, whatever
// happened; registered before Create so partial failures are covered too.
func destroyOnCleanup(t *testing.T, rt runtime.Runtime, id string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := rt.Destroy(ctx, id); err != nil {
			t.Errorf("cleanup: Destroy(%s): %v", id, err)
		}
	})
}

// create creates a sandbox from spec and fails the test on error.
func (s *suite) create(t *testing.T, rt runtime.Runtime, spec runtime.Spec) runtime.Instance {
	t.Helper()
	destroyOnCleanup(t, rt, spec.SandboxID)
	inst, err := rt.Create(opCtx(t), spec)
	if err != nil {
		t.Fatalf("Create(%s): %v", spec.SandboxID, err)
	}
	return inst
}

// health asks the agent for GET /health over DialAgent; returns the status.
func health(t *testing.T, rt runtime.Runtime, id string) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := rt.DialAgent(ctx, id)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+runtime.HealthPath, nil)
	if err != nil {
		return 0, err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return 0, fmt.Errorf("write request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return 0, fmt.Errorf("read response: %w", err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func wantHealthy(t *testing.T, rt runtime.Runtime, id string) {
	t.Helper()
	code, err := health(t, rt, id)
	if err != nil || code != http.StatusNoContent {
		t.Fatalf("agent GET /health = %d, %v; want 204, nil", code, err)
	}
}

func wantState(t *testing.T, rt runtime.Runtime, id string, want runtime.State) runtime.Status {
	t.Helper()
	st, err := rt.Inspect(opCtx(t), id)
	if err != nil {
		t.Fatalf("Inspect(%s): %v", id, err)
	}
	if st.State != want {
		t.Fatalf("Inspect(%s).State = %q (%s), want %q", id, st.State, st.Detail, want)
	}
	return st
}

// wantGone checks that nothing of sandbox id is left in rt.
func (s *suite) wantGone(t *testing.T, rt runtime.Runtime, id string) {
	t.Helper()
	wantState(t, rt, id, runtime.StateMissing)
	list, err := rt.ListOurs(opCtx(t))
	if err != nil {
		t.Fatalf("ListOurs: %v", err)
	}
	for _, in := range list {
		if in.SandboxID == id {
			t.Errorf("ListOurs still reports %s: %+v", id, in)
		}
	}
	if _, err := rt.DialAgent(opCtx(t), id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("DialAgent(%s) after it is gone: %v, want ErrNotFound", id, err)
	}
	if s.cfg.SocketDir != nil {
		if _, err := os.Stat(s.cfg.SocketDir(id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket dir of %s still there (stat: %v)", id, err)
		}
	}
}

func (s *suite) testCreateReady(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	inst := s.create(t, rt, s.spec(id))
	if inst.SandboxID != id || inst.ContainerID == "" || inst.State != runtime.StateRunning {
		t.Errorf("Create = %+v, want sandbox %s running with a container id", inst, id)
	}
	st := wantState(t, rt, id, runtime.StateRunning)
	if st.StartedAt.IsZero() || time.Since(st.StartedAt) > 5*time.Minute {
		t.Errorf("StartedAt = %v, want just now", st.StartedAt)
	}
	wantHealthy(t, rt, id)
	// Readiness of a ready sandbox is immediate.
	if err := rt.WaitAgentReady(opCtx(t), id); err != nil {
		t.Errorf("WaitAgentReady on a ready sandbox: %v", err)
	}
	if s.cfg.SocketDir != nil {
		fi, err := os.Stat(s.cfg.SocketDir(id))
		if err != nil {
			t.Fatalf("socket dir: %v", err)
		}
		if perm := fi.Mode().Perm(); !fi.IsDir() || perm != 0o700 {
			t.Errorf("socket dir mode = %v, want a 0700 directory", fi.Mode())
		}
	}
}

func (s *suite) testCreateContract(t *testing.T) {
	s.need(t, EngineFacts)
	rt, node := s.newRuntime(t)
	id := NewSandboxID()
	spec := s.spec(id)
	data := t.TempDir()
	spec.Mounts = []runtime.Mount{{HostPath: data, Path: "/mnt/data", ReadOnly: true}}
	s.create(t, rt, spec)
	f := s.cfg.Facts(t, id)

	wantLabels := map[string]string{
		runtime.LabelManaged: "1",
		runtime.LabelNode:    node,
		runtime.LabelSandbox: id,
		"test":               "runtimetest",
	}
	for k, v := range wantLabels {
		if got := f.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
	type limits struct{ NanoCPUs, Memory, MemorySwap, Pids int64 }
	if diff := cmp.Diff(limits{5e8, s.memoryMB() << 20, s.memoryMB() << 20, s.pidsLimit()}, limits{f.NanoCPUs, f.MemoryBytes, f.MemorySwapBytes, f.PidsLimit}); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	if s.cfg.OCIRuntime != "" && f.OCIRuntime != s.cfg.OCIRuntime {
		t.Errorf("engine runtime = %q, want %q", f.OCIRuntime, s.cfg.OCIRuntime)
	}
	if f.Privileged {
		t.Errorf("privileged; want not")
	}
	if !slices.Equal(f.CapDrop, []string{"ALL"}) || !sameCaps(f.CapAdd, runtime.SandboxCapabilities) {
		t.Errorf("cap drop %v, cap add %v; want ALL dropped and only %v added", f.CapDrop, f.CapAdd, runtime.SandboxCapabilities)
	}
	if f.CgroupNS != "private" {
		t.Errorf("cgroup namespace %q, want private", f.CgroupNS)
	}
	for _, o := range f.SecurityOpt {
		// A seccomp profile of the runtime's own may replace the engine's
		// default; nothing may lift confinement.
		if !strings.HasPrefix(o, "seccomp=") || strings.Contains(o, "unconfined") {
			t.Errorf("security option %.60q set; want the engine defaults or a seccomp profile", o)
		}
	}
	if f.NetworkMode != "none" {
		t.Errorf("network mode = %q, want none", f.NetworkMode)
	}
	if f.Init {
		t.Errorf("engine init injected; the agent is PID 1")
	}
	// The engine's resolver answers a container's hostname to its
	// neighbours: it must not give the sandbox id away.
	if f.Hostname == "" || strings.Contains(f.Hostname, id) || strings.Contains(f.Hostname, id[3:]) {
		t.Errorf("hostname = %q, want one that does not show the sandbox id %q", f.Hostname, id)
	}
	if diff := cmp.Diff([]string{runtime.AgentPath}, f.Entrypoint); diff != "" || len(f.Cmd) > 0 {
		t.Errorf("entrypoint (-want +got):\n%s\ncmd = %q, want none", diff, f.Cmd)
	}
	if !slices.Contains(f.Env, "SANDBOXD_TEST=1") {
		t.Errorf("env lacks %q", "SANDBOXD_TEST=1")
	}
	// The agent token is handed over at each boot, never put in the
	// sandbox's configuration: its environment would show it (and the
	// agent had to execute itself twice to hide it from /proc/1/environ).
	for _, e := range f.Env {
		if strings.HasPrefix(e, runtime.EnvAgentToken) || strings.Contains(e, spec.AgentToken) {
			t.Errorf("the sandbox's environment carries the agent token: %.40q", e)
		}
	}
	for k, v := range f.Labels {
		if strings.Contains(v, spec.AgentToken) {
			t.Errorf("label %s carries the agent token in clear", k)
		}
	}
	// What the kernel shows of the agent's environment, from the host:
	// no token, and no sign of a second exec (the descriptor it handed
	// the token over on).
	if f.AgentPid > 0 && s.cfg.Isolation != runtime.IsolationGVisor {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", f.AgentPid))
		if err != nil {
			t.Errorf("the agent's environ: %v", err)
		}
		if strings.Contains(string(b), spec.AgentToken) || strings.Contains(string(b), runtime.EnvAgentToken) {
			t.Errorf("the agent's /proc environ names its token: %.200q", strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	wantMounts := map[string]Mount{
		runtime.AgentPath:      {Source: spec.AgentBinary, Target: runtime.AgentPath, ReadOnly: true},
		runtime.AgentSocketDir: {Target: runtime.AgentSocketDir, ReadOnly: s.cfg.Isolation != runtime.IsolationGVisor},
		"/mnt/data":            {Source: data, Target: "/mnt/data", ReadOnly: true},
	}
	if s.cfg.SocketDir != nil {
		wantMounts[runtime.AgentSocketDir] = Mount{Source: s.cfg.SocketDir(id), Target: runtime.AgentSocketDir, ReadOnly: s.cfg.Isolation != runtime.IsolationGVisor}
	}
	got := map[string]Mount{}
	for _, m := range f.Mounts {
		if m.Target == runtime.AgentSocketDir && s.cfg.SocketDir == nil {
			m.Source = ""
		}
		got[m.Target] = m
	}
	if diff := cmp.Diff(wantMounts, got); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
}

func (s *suite) testCreateAlreadyExists(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	s.create(t, rt, s.spec(id))
	_, err := rt.Create(opCtx(t), s.spec(id))
	if !errors.Is(err, runtime.ErrAlreadyExists) {
		t.Fatalf("second Create(%s) = %v, want ErrAlreadyExists", id, err)
	}
	// The failed call must not have undone the first one's work.
	wantState(t, rt, id, runtime.StateRunning)
	wantHealthy(t, rt, id)
}

// testCreateConcurrent races creates of one id: exactly one wins, the others
// fail with ErrAlreadyExists, and their undo leaves the winner intact.
func (s *suite) testCreateConcurrent(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	destroyOnCleanup(t, rt, id)
	const n = 4
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := rt.Create(opCtx(t), s.spec(id))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	wins := 0
	for err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, runtime.ErrAlreadyExists):
			t.Errorf("losing Create = %v, want ErrAlreadyExists", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d of %d concurrent Creates of one id succeeded, want exactly 1", wins, n)
	}
	wantState(t, rt, id, runtime.StateRunning)
	wantHealthy(t, rt, id)
}

func (s *suite) testCreateMissingImage(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	spec := s.spec(id)
	spec.Image = "sandboxd/no-such-image:" + id
	destroyOnCleanup(t, rt, id)
	_, err := rt.Create(opCtx(t), spec)
	if !errors.Is(err, runtime.ErrImageNotFound) {
		t.Fatalf("Create with a missing image = %v, want ErrImageNotFound", err)
	}
	s.wantGone(t, rt, id)
}

func (s *suite) testCreateInvalidSpec(t *testing.T) {
	rt, _ := s.newRuntime(t)
	for name, mutate := range map[string]func(*runtime.Spec){
		"PathInID":         func(sp *runtime.Spec) { sp.SandboxID = "../" + sp.SandboxID },
		"NoToken":          func(sp *runtime.Spec) { sp.AgentToken = "" },
		"ReservedLabel":    func(sp *runtime.Spec) { sp.Labels = map[string]string{runtime.LabelNode: "evil"} },
		"TokenEnvOverride": func(sp *runtime.Spec) { sp.Env = map[string]string{runtime.EnvAgentToken: "x"} },
		"NoAgentBinary":    func(sp *runtime.Spec) { sp.AgentBinary = "/nonexistent/toolboxd" },
		"NegativeMemory":   func(sp *runtime.Spec) { sp.MemoryMB = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			id := NewSandboxID()
			spec := s.spec(id)
			mutate(&spec)
			destroyOnCleanup(t, rt, id)
			if _, err := rt.Create(opCtx(t), spec); !errors.Is(err, runtime.ErrInvalidSpec) {
				t.Fatalf("Create = %v, want ErrInvalidSpec", err)
			}
			s.wantGone(t, rt, id)
		})
	}
}

// testCreateAgentNeverReady: an agent that runs but never answers is given
// up on at the runtime's readiness deadline, and Create leaves nothing.
func (s *suite) testCreateAgentNeverReady(t *testing.T) {
	rt := s.cfg.New(t, Options{NodeID: "node-" + NewSandboxID()[3:], AgentReadyTimeout: readyTimeout})
	id := NewSandboxID()
	spec := s.spec(id)
	var err error
	if spec.AgentBinary, err = WriteScriptAgent(t.TempDir(), "sleeper", "exec sleep 600"); err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, rt, id)
	start := time.Now()
	_, err = rt.Create(opCtx(t), spec)
	took := time.Since(start)
	var nr *runtime.AgentNotReadyError
	if !errors.Is(err, runtime.ErrAgentNotReady) || !errors.As(err, &nr) {
		t.Fatalf("Create with an agent that never answers = %v, want an AgentNotReadyError", err)
	}
	t.Logf("error: %v", err)
	if nr.Waited < readyTimeout || took > readyTimeout+notReadySlack {
		t.Errorf("waited %v for the agent (Create took %v), want %v", nr.Waited, took, readyTimeout)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("error blames the caller's context; the runtime's own deadline passed")
	}
	if nr.Status.State != runtime.StateRunning || nr.Err == nil {
		t.Errorf("Status.State = %q, Err = %v; want running (the sleeper was alive) and the last probe error", nr.Status.State, nr.Err)
	}
	s.wantGone(t, rt, id)
}

// testCreateCancelledWhileWaiting: the caller gives up while Create waits
// for the agent; Create returns promptly, says why, and leaves nothing
// (its undo runs on a fresh context).
func (s *suite) testCreateCancelledWhileWaiting(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	spec := s.spec(id)
	var err error
	if spec.AgentBinary, err = WriteScriptAgent(t.TempDir(), "sleeper", "exec sleep 600"); err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, rt, id)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := rt.Create(ctx, spec)
		done <- err
	}()
	// Cancel once the sandbox runs: Create is then waiting for the agent.
	for deadline := time.Now().Add(opTimeout); ; time.Sleep(20 * time.Millisecond) {
		st, err := rt.Inspect(t.Context(), id)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if st.State == runtime.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox never ran (state %s)", st.State)
		}
	}
	// The engine reports "running" a moment before its start call returns;
	// give Create that moment so the cancel lands in the readiness wait.
	time.Sleep(200 * time.Millisecond)
	cancelled := time.Now()
	cancel()
	select {
	case err = <-done:
	case <-time.After(notReadySlack):
		t.Fatalf("Create still running %v after its context was cancelled", notReadySlack)
	}
	t.Logf("returned %v after cancel: %v", time.Since(cancelled), err)
	// ErrAgentNotReady too, unless a very slow engine was still answering
	// the start call; the cancellation must show either way.
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create = %v, want an error wrapping context.Canceled", err)
	}
	s.wantGone(t, rt, id)
}

func (s *suite) testCreateAgentExits(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	spec := s.spec(id)
	var err error
	if spec.AgentBinary, err = WriteScriptAgent(t.TempDir(), "crasher", "echo agent exploded >&2; exit 3"); err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, rt, id)
	start := time.Now()
	_, err = rt.Create(opCtx(t), spec)
	took := time.Since(start)
	var nr *runtime.AgentNotReadyError
	if !errors.As(err, &nr) || !errors.Is(err, runtime.ErrAgentNotReady) {
		t.Fatalf("Create with an agent that exits = %v, want an AgentNotReadyError", err)
	}
	// An exited agent is noticed, not waited out (the default deadline).
	if nr.Waited > 10*time.Second {
		t.Errorf("waited %v for an agent that had exited (Create took %v)", nr.Waited, took)
	}
	if nr.Status.State != runtime.StateExited || nr.Status.ExitCode != 3 {
		t.Errorf("Status = %+v, want exited with code 3", nr.Status)
	}
	if want := "agent exploded"; !strings.Contains(nr.LogsTail, want) {
		t.Errorf("LogsTail = %q, want it to contain %q", nr.LogsTail, want)
	}
	s.wantGone(t, rt, id)
}

func (s *suite) testCreateCancelled(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	destroyOnCleanup(t, rt, id)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := rt.Create(ctx, s.spec(id)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with a cancelled context = %v, want context.Canceled", err)
	}
	s.wantGone(t, rt, id)
}

func (s *suite) testStopStart(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	inst := s.create(t, rt, s.spec(id))
	first := wantState(t, rt, id, runtime.StateRunning)

	if err := rt.Stop(opCtx(t), id); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped := wantState(t, rt, id, runtime.StateExited)
	if stopped.FinishedAt.IsZero() {
		t.Errorf("FinishedAt is zero after Stop")
	}
	if err := rt.Stop(opCtx(t), id); err != nil {
		t.Errorf("Stop of a stopped sandbox: %v, want nil", err)
	}
	if code, err := health(t, rt, id); err == nil {
		t.Errorf("agent answered %d while stopped", code)
	}

	if err := rt.Start(opCtx(t), id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	again := wantState(t, rt, id, runtime.StateRunning)
	if !again.StartedAt.After(first.StartedAt) {
		t.Errorf("StartedAt after restart = %v, want after %v", again.StartedAt, first.StartedAt)
	}
	wantHealthy(t, rt, id)
	if err := rt.Start(opCtx(t), id); err != nil {
		t.Errorf("Start of a running sandbox: %v, want nil", err)
	}
	list, err := rt.ListOurs(opCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]runtime.Instance{inst}, list); diff != "" {
		t.Errorf("ListOurs after stop/start (-want +got), same container expected:\n%s", diff)
	}
}

func (s *suite) testPauseResume(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	s.create(t, rt, s.spec(id))
	ctx := opCtx(t)
	for i := range 2 {
		if err := rt.Pause(ctx, id); err != nil {
			t.Fatalf("Pause #%d: %v", i+1, err)
		}
	}
	if st := wantState(t, rt, id, runtime.StateRunning); !st.Paused {
		t.Errorf("Inspect after Pause: Paused = false, want true (%+v)", st)
	}
	list, err := rt.ListOurs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].Paused {
		t.Errorf("ListOurs after Pause = %+v, want one paused sandbox", list)
	}
	for i := range 2 {
		if err := rt.Resume(ctx, id); err != nil {
			t.Fatalf("Resume #%d: %v", i+1, err)
		}
	}
	if st := wantState(t, rt, id, runtime.StateRunning); st.Paused {
		t.Errorf("Inspect after Resume: Paused = true, want false")
	}
	wantHealthy(t, rt, id)

	// A paused sandbox stops; a stopped one neither pauses nor resumes.
	if err := rt.Pause(ctx, id); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := rt.Stop(ctx, id); err != nil {
		t.Fatalf("Stop of a paused sandbox: %v", err)
	}
	if st := wantState(t, rt, id, runtime.StateExited); st.Paused {
		t.Errorf("a stopped sandbox reports Paused")
	}
	if err := rt.Pause(ctx, id); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("Pause of a stopped sandbox = %v, want ErrNotRunning", err)
	}
	if err := rt.Resume(ctx, id); !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("Resume of a stopped sandbox = %v, want ErrNotRunning", err)
	}
	if err := rt.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := rt.Pause(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Pause of a missing sandbox = %v, want ErrNotFound", err)
	}
	if err := rt.Resume(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Resume of a missing sandbox = %v, want ErrNotFound", err)
	}
}

func (s *suite) testDestroyTwice(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	s.create(t, rt, s.spec(id))
	for i := range 2 {
		if err := rt.Destroy(opCtx(t), id); err != nil {
			t.Fatalf("Destroy #%d: %v", i+1, err)
		}
	}
	s.wantGone(t, rt, id)
}

func (s *suite) testMissing(t *testing.T) {
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	ctx := opCtx(t)
	if err := rt.Start(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Start(missing) = %v, want ErrNotFound", err)
	}
	if err := rt.Stop(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Stop(missing) = %v, want ErrNotFound", err)
	}
	if _, err := rt.Stats(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Stats(missing) = %v, want ErrNotFound", err)
	}
	if err := rt.Destroy(ctx, id); err != nil {
		t.Errorf("Destroy(missing) = %v, want nil", err)
	}
	if err := rt.WaitAgentReady(ctx, id); !errors.Is(err, runtime.ErrAgentNotReady) {
		t.Errorf("WaitAgentReady(missing) = %v, want ErrAgentNotReady", err)
	}
	s.wantGone(t, rt, id)
}

func (s *suite) testListOurs(t *testing.T) {
	rtA, _ := s.newRuntime(t)
	rtB, _ := s.newRuntime(t)
	idA, idB := NewSandboxID(), NewSandboxID()
	instA := s.create(t, rtA, s.spec(idA))
	instB := s.create(t, rtB, s.spec(idB))
	if s.cfg.Foreign != nil {
		s.cfg.Foreign(t)
	}
	for _, c := range []struct {
		name string
		rt   runtime.Runtime
		want runtime.Instance
	}{{"A", rtA, instA}, {"B", rtB, instB}} {
		got, err := c.rt.ListOurs(opCtx(t))
		if err != nil {
			t.Fatalf("node %s: ListOurs: %v", c.name, err)
		}
		if diff := cmp.Diff([]runtime.Instance{c.want}, got); diff != "" {
			t.Errorf("node %s: ListOurs (-want +got):\n%s", c.name, diff)
		}
	}
}

func (s *suite) testStats(t *testing.T) {
	s.need(t, ResourceUsage)
	rt, _ := s.newRuntime(t)
	id := NewSandboxID()
	s.create(t, rt, s.spec(id))
	first, err := rt.Stats(opCtx(t), id)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	sampled := time.Now()
	if first.MemoryLimit != uint64(s.memoryMB())<<20 {
		t.Errorf("MemoryLimit = %d, want %d", first.MemoryLimit, s.memoryMB()<<20)
	}
	if first.MemoryUsed == 0 || first.MemoryUsed > first.MemoryLimit {
		t.Errorf("MemoryUsed = %d, want in (0, %d]", first.MemoryUsed, first.MemoryLimit)
	}
	if first.Pids < 1 || first.CPUTime <= 0 || first.At.IsZero() {
		t.Errorf("Stats = %+v, want pids >= 1, cpu time > 0, a sample time", first)
	}
	// A CPU percentage is a rate, and under a quota only a rate over
	// several of the scheduler's periods (100 ms each) keeps to it: within
	// one, a sandbox limited to half a core may run a whole one (seen under
	// gVisor, whose sentry is busy just after boot). So the second sample
	// is taken a second after the first, the window the engine's own
	// stats answer over: a measurement's window, not a wait for a state.
	time.Sleep(time.Until(sampled.Add(time.Second)))
	second, err := rt.Stats(opCtx(t), id)
	if err != nil {
		t.Fatalf("Stats #2: %v", err)
	}
	// 0.5 CPU limit: never more than half a core, allowing for rounding.
	if second.CPUPercent < 0 || second.CPUPercent > 60 || second.CPUTime < first.CPUTime {
		t.Errorf("second Stats = %+v, want 0 <= cpu%% <= 60, cpu time not decreasing from %v", second, first.CPUTime)
	}
}

// sameCaps compares capability lists as sets, with or without the CAP_
// prefix (engines normalize it differently).
func sameCaps(a, b []string) bool {
	norm := func(l []string) []string {
		out := make([]string, 0, len(l))
		for _, c := range l {
			out = append(out, strings.TrimPrefix(strings.ToUpper(c), "CAP_"))
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(norm(a), norm(b))
}
