package service_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/service"
)

// failingInstall fails the ingress steps of an exposure on demand: the
// route (ExposePort) or the host-port listener (ListenTCP).
type failingInstall struct {
	*faultyRouter
	failRoute, failListen atomic.Bool
}

func (f *failingInstall) ExposePort(ctx context.Context, id string, p ingress.Port) error {
	if f.failRoute.Load() {
		return errInjected
	}
	return f.faultyRouter.ExposePort(ctx, id, p)
}

func (f *failingInstall) ListenTCP(ctx context.Context, hostPort int, id string, port int) error {
	if f.failListen.Load() {
		return errInjected
	}
	return f.faultyRouter.ListenTCP(ctx, hostPort, id, port)
}

// set makes the step named fail ("route" or "listener") fail or not.
func (f *failingInstall) set(step string, fail bool) {
	switch step {
	case "route":
		f.failRoute.Store(fail)
	case "listener":
		f.failListen.Store(fail)
	}
}

// installFaults are the exposures whose install can fail, by step.
var installFaults = []struct{ proto, step string }{
	{"http", "route"},
	{"tcp", "route"},
	{"tcp", "listener"},
}

// newPortsService is the harness's service over a router whose installs
// fail on demand, with a host-port pool of its own.
func newPortsService(t *testing.T) (*harness, *service.Service, *failingInstall) {
	t.Helper()
	h := newHarness(t, harnessOptions{})
	r := &failingInstall{faultyRouter: h.routes}
	svc, _ := newServiceOver(t, h, r, h.store)
	return h, svc, r
}

// newServiceOver is a second service over the harness's dependencies, with
// router and st in place of its router and store, "localhost" as the
// preview domain and a pool of 8 host ports of its own, [lo, lo+7].
func newServiceOver(t *testing.T, h *harness, router service.Router, st service.Store) (svc *service.Service, lo int) {
	t.Helper()
	lo = freePorts(t, 8)
	deps := h.svc.Deps
	deps.Router = router
	deps.Store = st
	svc, err := service.New(service.Config{
		NodeID:       h.nodeID,
		DefaultImage: busybox,
		AgentBinary:  agentBinary,
		Domain:       "localhost",
		HostPortLo:   lo,
		HostPortHi:   lo + 7,
	}, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Reconcile(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	return svc, lo
}

// TestExposePort_InstallFails injects a failure after the exposure's row
// committed: the row this call inserted is removed, and no route or
// listener is left behind.
func TestExposePort_InstallFails(t *testing.T) {
	for _, tt := range installFaults {
		proto := tt.proto
		t.Run(proto+"/"+tt.step, func(t *testing.T) {
			h, svc, r := newPortsService(t)
			ctx := t.Context()
			sb, err := svc.CreateSandbox(ctx, service.CreateRequest{Owner: "admin", Image: busybox})
			if err != nil {
				t.Fatal(err)
			}

			r.set(tt.step, true)
			if _, err := svc.ExposePort(ctx, admin, sb.ID, 8080, proto, proto != "http"); !errors.Is(err, errInjected) {
				t.Fatalf("expose with a failing install: %v, want the injected fault", err)
			}
			rows, err := h.store.ListExposedPorts(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 0 {
				t.Errorf("rows after a failed install: %+v, want none", rows)
			}

			// The failure was this call's only: the next one succeeds.
			r.set(tt.step, false)
			e, err := svc.ExposePort(ctx, admin, sb.ID, 8080, proto, proto != "http")
			if err != nil {
				t.Fatalf("expose after the fault cleared: %v", err)
			}
			if proto == "tcp" && e.HostPort == 0 {
				t.Errorf("exposure %+v has no host port", e)
			}
			if err := svc.UnexposePort(ctx, admin, sb.ID, 8080); err != nil {
				t.Fatal(err)
			}

			// Nothing of the failed call is left in the ingress either, so
			// the port is free for another protocol.
			r.set(tt.step, true)
			_, _ = svc.ExposePort(ctx, admin, sb.ID, 8080, proto, proto != "http")
			r.set(tt.step, false)
			if ps := h.routes.Ports(sb.ID); len(ps) != 0 {
				t.Errorf("routes after a failed install: %+v, want none", ps)
			}
			other := map[string]string{"http": "tcp", "tcp": "http"}[proto]
			if _, err := svc.ExposePort(ctx, admin, sb.ID, 8080, other, other != "http"); err != nil {
				t.Errorf("expose as %s after a failed %s expose: %v", other, proto, err)
			}
		})
	}
}

// TestExposePort_RetryInstallFails exposes a port, then retries the
// expose with a failing install: the retry fails, and the first call's
// row, route and listener all stay.
func TestExposePort_RetryInstallFails(t *testing.T) {
	for _, tt := range installFaults {
		proto := tt.proto
		t.Run(proto+"/"+tt.step, func(t *testing.T) {
			h, svc, r := newPortsService(t)
			ctx := t.Context()
			sb, err := svc.CreateSandbox(ctx, service.CreateRequest{Owner: "admin", Image: busybox})
			if err != nil {
				t.Fatal(err)
			}
			first, err := svc.ExposePort(ctx, admin, sb.ID, 8080, proto, proto != "http")
			if err != nil {
				t.Fatal(err)
			}

			r.set(tt.step, true)
			if _, err := svc.ExposePort(ctx, admin, sb.ID, 8080, proto, proto != "http"); !errors.Is(err, errInjected) {
				t.Fatalf("retry with a failing install: %v, want the injected fault", err)
			}
			r.set(tt.step, false)

			rows, err := h.store.ListExposedPorts(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 || rows[0].Port != 8080 || rows[0].HostPort != first.HostPort {
				t.Errorf("rows after a failed retry: %+v, want the first call's", rows)
			}
			if ps := h.routes.Ports(sb.ID); len(ps) != 1 || string(ps[0].Protocol) != proto {
				t.Errorf("routes after a failed retry: %+v, want the first call's", ps)
			}
			if proto == "tcp" {
				// The listener is still bound: the host port cannot be taken.
				ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first.HostPort)))
				if err == nil {
					ln.Close()
					t.Errorf("host port %d is free after a failed retry; the first call's listener is gone", first.HostPort)
				}
			}
			again, err := svc.ExposePort(ctx, admin, sb.ID, 8080, proto, proto != "http")
			if err != nil || again != first {
				t.Errorf("expose after the fault cleared = %+v, %v; want %+v", again, err, first)
			}
		})
	}
}

// gatedBind holds the first BindDomain until release is closed and then
// fails it; every later BindDomain goes through. entered is closed once the
// first one is held.
type gatedBind struct {
	*faultyRouter
	calls            atomic.Int32
	entered, release chan struct{}
}

func (g *gatedBind) BindDomain(ctx context.Context, hostname, id string, port int) error {
	if g.calls.Add(1) == 1 {
		close(g.entered)
		<-g.release
		return errInjected
	}
	return g.faultyRouter.BindDomain(ctx, hostname, id, port)
}

// failingBind fails every BindDomain.
type failingBind struct{ *faultyRouter }

func (failingBind) BindDomain(context.Context, string, string, int) error { return errInjected }

var errRelease = errors.New("injected release fault")

// failingRelease fails the undo of a domain binding, fenced or not.
type failingRelease struct{ *faultyStore }

func (failingRelease) ReleaseCustomDomain(context.Context, string, string, int64) (bool, error) {
	return false, errRelease
}

func (failingRelease) RemoveCustomDomain(context.Context, string, string) (bool, error) {
	return false, errRelease
}

// TestAddDomain_RollbackIsFencedAndErrorReturned: a bind that fails after
// its row was written takes back only what it wrote — never a binding an
// identical call has meanwhile reported as success — and a rollback that
// fails is returned with the bind's error, not dropped.
func TestAddDomain_RollbackIsFencedAndErrorReturned(t *testing.T) {
	const host = "app.example.com"

	t.Run("fenced", func(t *testing.T) {
		h := newHarness(t, harnessOptions{})
		r := &gatedBind{faultyRouter: h.routes, entered: make(chan struct{}), release: make(chan struct{})}
		svc, _ := newServiceOver(t, h, r, h.store)
		ctx := t.Context()
		sb, err := svc.CreateSandbox(ctx, service.CreateRequest{Owner: "admin", Image: busybox})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.ExposePort(ctx, admin, sb.ID, 8080, "http", false); err != nil {
			t.Fatal(err)
		}

		// The first call writes the row and is held in its bind (until
		// the end of the test at the latest, so it never leaks).
		release := sync.OnceFunc(func() { close(r.release) })
		t.Cleanup(release)
		first := make(chan error, 1)
		go func() {
			_, err := svc.AddDomain(ctx, admin, sb.ID, host, 8080)
			first <- err
		}()
		select {
		case <-r.entered:
		case err := <-first:
			t.Fatalf("first bind returned before its bind: %v", err)
		}
		// An identical call finds the row, binds, and reports success.
		if _, err := svc.AddDomain(ctx, admin, sb.ID, host, 8080); err != nil {
			t.Fatalf("identical bind: %v", err)
		}
		// Now the first call's bind fails, and it rolls back.
		release()
		if err := <-first; !errors.Is(err, errInjected) {
			t.Fatalf("first bind: %v, want the injected fault", err)
		}

		ds, err := svc.ListDomains(ctx, admin, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := []service.Domain{{Hostname: host, SandboxID: sb.ID, Port: 8080, Verified: true}}
		if diff := cmp.Diff(want, ds, cmpopts.IgnoreFields(service.Domain{}, "TXTName", "TXTValue")); diff != "" {
			t.Errorf("domains after the first call's rollback (-want +got):\n%s", diff)
		}
		if !h.routes.Routable(host) {
			t.Errorf("%s is not routed after the first call's rollback", host)
		}
	})

	t.Run("error returned", func(t *testing.T) {
		h := newHarness(t, harnessOptions{})
		svc, _ := newServiceOver(t, h, failingBind{h.routes}, failingRelease{h.store})
		ctx := t.Context()
		sb, err := svc.CreateSandbox(ctx, service.CreateRequest{Owner: "admin", Image: busybox})
		if err != nil {
			t.Fatal(err)
		}
		_, err = svc.AddDomain(ctx, admin, sb.ID, host, 8080)
		if !errors.Is(err, errInjected) || !errors.Is(err, errRelease) {
			t.Fatalf("bind and rollback both failing: %v; want both faults", err)
		}
	})
}

// TestExposeUnexposeInterleaving_LeavesNoOrphanRoute races tcp exposes,
// unexposes and http exposes of one sandbox port. Whatever the order, once
// the calls return the ingress holds exactly what the store holds: no
// route or listener without its row (which made a later http expose fail
// with a protocol conflict), no row without its route.
func TestExposeUnexposeInterleaving_LeavesNoOrphanRoute(t *testing.T) {
	const (
		port    = 8080
		rounds  = 50
		callers = 9
	)
	h := newHarness(t, harnessOptions{})
	svc, lo := newServiceOver(t, h, h.routes, h.store)
	ctx := t.Context()
	sb, err := svc.CreateSandbox(ctx, service.CreateRequest{Owner: "admin", Image: busybox})
	if err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		do   func() error
	}{
		{"expose tcp", func() error { _, err := svc.ExposePort(ctx, admin, sb.ID, port, "tcp", true); return err }},
		{"unexpose", func() error { return svc.UnexposePort(ctx, admin, sb.ID, port) }},
		{"expose http", func() error { _, err := svc.ExposePort(ctx, admin, sb.ID, port, "http", false); return err }},
	}
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range callers {
			op := ops[(i+round)%len(ops)]
			wg.Go(func() {
				// Another protocol for an exposed port is a conflict;
				// nothing else may fail.
				if err := op.do(); err != nil && !errors.Is(err, service.ErrConflict) {
					t.Errorf("round %d: %s: %v", round, op.name, err)
				}
			})
		}
		wg.Wait()
		assertIngressMatchesStore(t, h, sb.ID, lo, lo+7)
		if t.Failed() {
			t.Fatalf("round %d left the ingress and the store apart", round)
		}
	}

	// The symptom: with the port unexposed, an http expose succeeds.
	if err := svc.UnexposePort(ctx, admin, sb.ID, port); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ExposePort(ctx, admin, sb.ID, port, "http", false); err != nil {
		t.Errorf("http expose after the race: %v", err)
	}
	assertIngressMatchesStore(t, h, sb.ID, lo, lo+7)
}

// assertIngressMatchesStore checks that the router's routes for sandbox id
// are its exposed_ports rows, port for port and protocol for protocol, and
// that of the host ports in [lo, hi] the router listens on exactly those
// the rows hold.
func assertIngressMatchesStore(t *testing.T, h *harness, id string, lo, hi int) {
	t.Helper()
	rows, err := h.store.ListExposedPorts(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	inStore, held := map[int]string{}, map[int]bool{}
	for _, ep := range rows {
		inStore[ep.Port] = string(ep.Protocol)
		if ep.HostPort > 0 {
			held[ep.HostPort] = true
		}
	}
	inRouter := map[int]string{}
	for _, p := range h.routes.Ports(id) {
		inRouter[p.Number] = string(p.Protocol)
	}
	if !maps.Equal(inStore, inRouter) {
		t.Errorf("routes %v, rows %v; want the same ports and protocols", inRouter, inStore)
	}
	for hp := lo; hp <= hi; hp++ {
		// A listener for a sandbox port that is not exposed: the router
		// answers ErrHostPortConflict iff it already listens on hp (and
		// ErrNotExposed otherwise), without binding anything.
		err := h.routes.ListenTCP(t.Context(), hp, "sb-0000000000000000", 1)
		listening := errors.Is(err, ingress.ErrHostPortConflict)
		if !listening && !errors.Is(err, ingress.ErrNotExposed) {
			t.Fatalf("probe host port %d: %v", hp, err)
		}
		if listening != held[hp] {
			t.Errorf("host port %d: router listening %v, a row holds it %v", hp, listening, held[hp])
		}
	}
}

// freePorts finds n consecutive loopback ports that are free right now.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for lo := 31000; lo < 39000; lo += n {
		free := true
		for p := lo; p < lo+n && free; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				free = false
				continue
			}
			ln.Close()
		}
		if free {
			return lo
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}
