package service_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

func request() service.CreateRequest {
	return service.CreateRequest{
		Owner:     "alice",
		Image:     busybox,
		Env:       map[string]string{"GREETING": "hi"},
		SecretEnv: map[string]string{"API_KEY": "s3cret"},
		Mounts:    []service.Mount{{Volume: "cache", Path: "/mnt/cache"}},
	}
}

// TestCreate_FailureAtEveryStepLeavesNothing injects a failure at each step
// of the create chain and checks that every earlier step was undone.
func TestCreate_FailureAtEveryStepLeavesNothing(t *testing.T) {
	t.Parallel()
	steps := []struct {
		name   string
		inject func(h *harness)
	}{
		{"store", func(h *harness) { h.store.inject("CreateSandbox") }},
		{"admission", func(h *harness) { h.admFail.failReserve = true }},
		{"mounts", func(h *harness) { h.vols.failPrepare = true }},
		{"runtime", func(h *harness) { h.rt.Inject(runtimetest.Create, runtimetest.Fault{Err: errInjected}) }},
		// The engine created the container but the answer was lost.
		{"runtime answer lost", func(h *harness) {
			h.rt.Inject(runtimetest.Create, runtimetest.Fault{Err: errInjected, After: true})
		}},
		// The agent runs but cannot be handed the secret env.
		{"secret env", func(h *harness) { h.rt.Inject(runtimetest.DialAgent, runtimetest.Fault{Err: errInjected}) }},
		{"route", func(h *harness) { h.routes.failInstall = true }},
		{"store mounts", func(h *harness) { h.store.inject("PutSandboxMounts") }},
		{"commit", func(h *harness) { h.store.inject("CommitCreate") }},
	}
	// Each step fails a create with a whole volume, and one with a
	// subpath: every step after "mounts" then fails after its staged
	// mount, which must go too (assertNothingLeft reads mountinfo).
	variants := map[string]func() service.CreateRequest{
		"whole":   request,
		"subpath": subpathRequest,
	}
	for _, step := range steps {
		for vname, req := range variants {
			t.Run(step.name+"/"+vname, func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, harnessOptions{})
				step.inject(h)
				_, err := h.svc.CreateSandbox(t.Context(), req())
				if err == nil {
					t.Fatal("create succeeded despite the injected fault")
				}
				if !errors.Is(err, errInjected) {
					t.Fatalf("got %v, want the injected fault", err)
				}
				h.assertNothingLeft(t)
				h.assertNoVolumes(t)
			})
		}
	}
}

// subpathRequest is request with its volume mounted by a subpath that the
// create makes.
func subpathRequest() service.CreateRequest {
	req := request()
	req.Mounts[0].Subpath = "users/alice"
	return req
}

func TestCreate_ThenDestroyTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, request())
	if err != nil {
		t.Fatal(err)
	}
	if c.State != store.StateRunning || c.SSHPrivateKey == "" || c.SSHPublicKey == "" {
		t.Fatalf("created sandbox: state %s, keys present %v/%v", c.State, c.SSHPrivateKey != "", c.SSHPublicKey != "")
	}
	var steps []string
	for _, s := range c.Timings {
		steps = append(steps, s.Step)
	}
	// Every step of the chain is timed, in the chain's order (the names
	// are Server-Timing's and the metrics' labels).
	want := []string{"validate", "image", "seal", "store", "admission", "mounts", "runtime", "secret env", "route", "store mounts", "commit"}
	if !slices.Equal(steps, want) {
		t.Errorf("timed steps: got %v, want %v", steps, want)
	}
	// Secret env reaches the process, but not the API view.
	res, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "echo $GREETING $API_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); got != "hi s3cret\n" {
		t.Errorf("env in sandbox: got %q", got)
	}
	got, err := h.svc.Get(ctx, admin, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, leaked := got.Env["API_KEY"]; leaked {
		t.Error("secret env is visible in the sandbox view")
	}
	// Another owner cannot see it.
	if _, err := h.svc.Get(ctx, service.Caller{Owner: "mallory"}, c.ID); !errors.Is(err, service.ErrNotFound) {
		t.Errorf("another owner's Get: got %v, want ErrNotFound", err)
	}
	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Destroy(ctx, admin, c.ID); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("second destroy: got %v, want ErrNotFound", err)
	}
	h.assertNothingLeft(t)
}

func TestCreate_BadInputChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	bad := map[string]service.CreateRequest{
		"name not a DNS label": {Name: "Not_A_Label"},
		"negative cpu":         {MilliCPU: -1},
		"huge cpu":             {MilliCPU: 1_000_000},
		"huge memory":          {MemoryMB: 1 << 30},
		"env key":              {Env: map[string]string{"1BAD": "x"}},
		"env NUL":              {Env: map[string]string{"OK": "a\x00b"}},
		"mount path":           {Mounts: []service.Mount{{Volume: "v", Path: "relative"}}},
		"runtime":              {Runtime: "firecracker"},
		"image missing here":   {Image: "sandboxd/does-not-exist:1"},
	}
	for name, req := range bad {
		_, err := h.svc.CreateSandbox(t.Context(), req)
		if !errors.Is(err, service.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	h.assertNothingLeft(t)
}

// TestCreate_ConcurrentSameNameOneWinner races creates for one name: the
// partial unique index admits one, the rest are ErrNameConflict and leave
// nothing behind.
func TestCreate_ConcurrentSameNameOneWinner(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	const n = 16
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		winners   []string
		conflicts int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Name: "only-one", Image: busybox})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, c.ID)
			case errors.Is(err, service.ErrNameConflict):
				conflicts++
			default:
				t.Errorf("unexpected error: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 || conflicts != n-1 {
		t.Fatalf("winners %v, conflicts %d; want 1 and %d", winners, conflicts, n-1)
	}
	ins, _ := h.rt.ListOurs(t.Context())
	if len(ins) != 1 {
		t.Errorf("containers: %d, want 1", len(ins))
	}
}

// TestAdmission_BudgetRefusesThenFrees: past the budget, create is
// ErrCapacityExhausted with a retry hint and leaves nothing; a destroy
// frees room.
func TestAdmission_BudgetRefusesThenFrees(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{budget: admission.Budget{MilliCPU: 1000, MemoryMB: 1024}})
	ctx := t.Context()
	first, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox, MilliCPU: 1000, MemoryMB: 512})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox, MilliCPU: 500, MemoryMB: 128})
	var ra *service.RetryAfterError
	if !errors.Is(err, service.ErrCapacityExhausted) || !errors.As(err, &ra) || ra.After <= 0 {
		t.Fatalf("over budget: got %v, want ErrCapacityExhausted with RetryAfter", err)
	}
	if err := h.svc.Destroy(ctx, admin, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox, MilliCPU: 500, MemoryMB: 128}); err != nil {
		t.Fatalf("after destroy: %v", err)
	}
}

// TestReap_DestroysExpired drives expiry with the injected clock.
func TestReap_DestroysExpired(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := h.svc.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("before expiry: reaped %d, err %v", n, err)
	}
	// Extending the timeout is an update.
	if _, err := h.svc.UpdateSandbox(ctx, admin, c.ID, service.Update{SetTimeout: true, Timeout: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * time.Minute)
	if n, err := h.svc.Reap(ctx); err != nil || n != 0 {
		t.Fatalf("after extension: reaped %d, err %v", n, err)
	}
	h.clock.Advance(4 * time.Minute)
	if n, err := h.svc.Reap(ctx); err != nil || n != 1 {
		t.Fatalf("after expiry: reaped %d, err %v", n, err)
	}
	h.assertNothingLeft(t)
}

// TestReconcile_RepairsHost: an orphan container is destroyed, a stuck
// creating row is rolled back, a running row whose container vanished goes
// to error, and admission equals the live rows.
func TestReconcile_RepairsHost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()

	// A container with our labels and no row (a create killed before its row).
	orphan := "sb-00000000000000aa"
	if _, err := h.rt.Create(ctx, runtime.Spec{SandboxID: orphan, Image: busybox, AgentBinary: agentBinary, AgentToken: "t"}); err != nil {
		t.Fatal(err)
	}
	// A running sandbox whose container disappears behind our back.
	lost, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Destroy(ctx, lost.ID); err != nil {
		t.Fatal(err)
	}
	// A healthy sandbox that must survive.
	healthy, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Image: busybox, MilliCPU: 500, MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	// A create that died after its row (state creating).
	stuck := &store.Sandbox{ID: "sb-00000000000000bb", Image: busybox, State: store.StateCreating, CPUMillis: 1000, MemoryMB: 512, CreatedAt: h.clock.Now()}
	if err := h.store.Store.CreateSandbox(ctx, stuck); err != nil {
		t.Fatal(err)
	}

	if err := h.svc.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	ins, _ := h.rt.ListOurs(ctx)
	if len(ins) != 1 || ins[0].SandboxID != healthy.ID {
		t.Errorf("containers after reconcile: %v, want only %s", ins, healthy.ID)
	}
	if _, err := h.store.GetSandbox(ctx, stuck.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("stuck creating row: got %v, want it rolled back", err)
	}
	got, err := h.store.GetSandbox(ctx, lost.ID)
	if err != nil || got.State != store.StateError {
		t.Errorf("lost sandbox: state %v err %v, want error", got.State, err)
	}
	if used, _ := h.adm.Usage(); used != (admission.Request{MilliCPU: 500, MemoryMB: 256, DiskMB: service.DefaultDiskMB}) {
		t.Errorf("admission after reconcile: %v, want only the healthy sandbox", used)
	}
}

// TestCreate_RefusedInputLeavesNothing: a create the request dooms is
// ErrInvalidArgument (a 4xx at every edge, never a 500) and leaves no
// row, container, route, capacity or volume directory: those refused by
// validation before any side effect, the rest (an image only the engine
// knows is missing) undone.
func TestCreate_RefusedInputLeavesNothing(t *testing.T) {
	t.Parallel()
	withMount := func(path string) service.CreateRequest {
		r := request()
		r.Mounts = []service.Mount{{Volume: "v", Path: path}}
		return r
	}
	cases := map[string]service.CreateRequest{
		"image path":        {Image: "../../etc/passwd", Mounts: request().Mounts},
		"image uppercase":   {Image: "Busybox", Mounts: request().Mounts},
		"image not present": {Image: "sandboxd/not-built:never", Mounts: request().Mounts},
	}
	for _, p := range []string{
		"/run/sandboxd", "/run/sandboxd/x", "/run", "/opt/sandboxd/toolboxd", "/opt/sandboxd", "/opt",
		"/proc", "/proc/sys", "/sys", "/sys/fs/cgroup", "/dev", "/dev/shm", "/etc/hosts", "/etc",
	} {
		cases["mount "+p] = withMount(p)
	}
	h := newHarness(t, harnessOptions{})
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := h.svc.CreateSandbox(t.Context(), req)
			if !errors.Is(err, service.ErrInvalidArgument) {
				t.Fatalf("create = %v, want ErrInvalidArgument", err)
			}
			h.assertNothingLeft(t)
			h.assertNoVolumes(t)
		})
	}
}

// A started agent has lost the secret env with its memory: Start hands it
// over again from the sealed row. When that fails the sandbox stays
// stopped, its container stopped and its capacity released.
func TestStart_HandsTheSecretEnvOverAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ctx := t.Context()
	c, err := h.svc.CreateSandbox(ctx, request())
	if err != nil {
		t.Fatal(err)
	}
	echo := func() string {
		t.Helper()
		res, err := h.svc.Exec(ctx, admin, c.ID, service.ExecRequest{Command: "echo $API_KEY"})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	if _, err := h.svc.Stop(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Start(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	if got := echo(); got != "s3cret\n" {
		t.Errorf("after a stop and a start: API_KEY = %q", got)
	}

	if _, err := h.svc.Stop(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	h.rt.Inject(runtimetest.DialAgent, runtimetest.Fault{Err: errInjected})
	if _, err := h.svc.Start(ctx, admin, c.ID); !errors.Is(err, errInjected) {
		t.Fatalf("start with the agent unreachable: %v, want the injected fault", err)
	}
	h.rt.Clear(runtimetest.DialAgent)
	got, err := h.svc.Get(ctx, admin, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StateStopped {
		t.Errorf("after the failed start: state %s, want stopped", got.State)
	}
	if st, err := h.rt.Inspect(ctx, c.ID); err != nil || st.State == runtime.StateRunning {
		t.Errorf("after the failed start: container %+v, %v; want it stopped", st, err)
	}
	if r, _ := h.adm.Held(c.ID); r.MilliCPU != 0 || r.MemoryMB != 0 {
		t.Errorf("after the failed start: it still holds %v of the host (a stopped sandbox holds only its disk)", r)
	}
	if _, err := h.svc.Start(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	if got := echo(); got != "s3cret\n" {
		t.Errorf("after the retried start: API_KEY = %q", got)
	}
	if err := h.svc.Destroy(ctx, admin, c.ID); err != nil {
		t.Fatal(err)
	}
	h.assertNothingLeft(t)
}
