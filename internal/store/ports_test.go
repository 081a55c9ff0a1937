package store_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/store"
)

func tcp(sandboxID string, port int) store.PortRequest {
	return store.PortRequest{SandboxID: sandboxID, Port: port, Protocol: store.ProtocolTCP}
}

func TestTryReserveHostPort_Outcomes(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	a, b := sandboxID(1), sandboxID(2)
	createSandbox(t, s, a, "")
	createSandbox(t, s, b, "")

	out, first, err := s.TryReserveHostPort(ctx, tcp(a, 22), 30000)
	if err != nil || out != store.Reserved || first.HostPort != 30000 {
		t.Fatalf("first = %v %+v %v, want reserved on 30000", out, first, err)
	}
	// The same sandbox port again, on another candidate: the existing row, unchanged.
	out, got, err := s.TryReserveHostPort(ctx, tcp(a, 22), 30001)
	if err != nil || out != store.Existing {
		t.Fatalf("retry = %v %v, want existing", out, err)
	}
	if diff := cmp.Diff(first, got); diff != "" {
		t.Errorf("existing row (-want +got):\n%s", diff)
	}
	// Another sandbox on the taken host port: walk on.
	if out, _, err := s.TryReserveHostPort(ctx, tcp(b, 22), 30000); err != nil || out != store.Taken {
		t.Fatalf("other sandbox = %v %v, want taken", out, err)
	}
	// Another port of the same sandbox on its own host port is also taken.
	if out, _, err := s.TryReserveHostPort(ctx, tcp(a, 23), 30000); err != nil || out != store.Taken {
		t.Fatalf("other port = %v %v, want taken", out, err)
	}
	// Another protocol for the exposed port.
	tls := store.PortRequest{SandboxID: a, Port: 22, Protocol: store.ProtocolTLS}
	if _, _, err := s.TryReserveHostPort(ctx, tls, 30002); !errors.Is(err, store.ErrPortProtocolConflict) {
		t.Fatalf("tls on a tcp port = %v, want ErrPortProtocolConflict", err)
	}
	// A sandbox that does not exist.
	if _, _, err := s.TryReserveHostPort(ctx, tcp("sb-missing", 22), 30003); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing sandbox = %v, want ErrNotFound", err)
	}
}

func TestTryReserveHostPort_InvalidArguments(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	http := store.PortRequest{SandboxID: sandboxID(1), Port: 80, Protocol: store.ProtocolHTTP}
	for _, tc := range []struct {
		name      string
		req       store.PortRequest
		candidate int
	}{
		{"http with host port", http, 30000},
		{"tcp without host port", tcp(sandboxID(1), 22), 0},
		{"port 0", tcp(sandboxID(1), 0), 30000},
		{"port too big", tcp(sandboxID(1), 70000), 30000},
		{"bad protocol", store.PortRequest{SandboxID: sandboxID(1), Port: 22, Protocol: "udp"}, 30000},
		{"empty sandbox", tcp("", 22), 30000},
	} {
		if _, _, err := s.TryReserveHostPort(t.Context(), tc.req, tc.candidate); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}

func TestReserveHostPort_HTTPHasNoHostPort(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	createSandbox(t, s, sandboxID(1), "")
	createSandbox(t, s, sandboxID(2), "")
	pool := store.PortRange{Lo: 30000, Hi: 30000}
	for _, id := range []string{sandboxID(1), sandboxID(2)} {
		req := store.PortRequest{SandboxID: id, Port: 80, Protocol: store.ProtocolHTTP, Public: true}
		ep, reused, err := s.ReserveHostPort(ctx, req, pool, nil)
		if err != nil || reused || ep.HostPort != 0 || !ep.Public {
			t.Fatalf("http expose %s = %+v reused=%v %v", id, ep, reused, err)
		}
		if _, reused, err := s.ReserveHostPort(ctx, req, pool, nil); err != nil || !reused {
			t.Fatalf("http expose %s again: reused=%v %v, want reused", id, reused, err)
		}
	}
	ports, err := s.ListAllExposedPorts(ctx)
	if err != nil || len(ports) != 2 {
		t.Fatalf("ListAllExposedPorts = %v, %v; want 2 rows", ports, err)
	}
}

func TestReserveHostPort_BindFailureWalksOn(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	createSandbox(t, s, sandboxID(1), "")
	pool := store.PortRange{Lo: 30000, Hi: 30003}
	var tried []int
	ep, reused, err := s.ReserveHostPort(ctx, tcp(sandboxID(1), 22), pool, func(hostPort int) error {
		tried = append(tried, hostPort)
		if len(tried) < 3 {
			return fmt.Errorf("bind: %w", store.ErrHostPortUnavailable)
		}
		return nil
	})
	if err != nil || reused || ep.HostPort != tried[2] {
		t.Fatalf("ReserveHostPort = %+v reused=%v %v; tried %v", ep, reused, err, tried)
	}
	ports, _ := s.ListExposedPorts(ctx, sandboxID(1))
	if len(ports) != 1 || ports[0].HostPort != tried[2] {
		t.Errorf("rows after walk: %+v, want only host port %d", ports, tried[2])
	}
}

func TestReserveHostPort_BindErrorStopsAndUndoes(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	createSandbox(t, s, sandboxID(1), "")
	boom := errors.New("permission denied")
	calls := 0
	_, _, err := s.ReserveHostPort(ctx, tcp(sandboxID(1), 22), store.PortRange{Lo: 30000, Hi: 30009},
		func(int) error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("ReserveHostPort = %v after %d binds, want %v after 1", err, calls, boom)
	}
	if ports, _ := s.ListExposedPorts(ctx, sandboxID(1)); len(ports) != 0 {
		t.Errorf("rows left after failed bind: %+v", ports)
	}
}

func TestReleaseReservation_OnlyOwnRow(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	createSandbox(t, s, sandboxID(1), "")
	_, mine, err := s.TryReserveHostPort(ctx, tcp(sandboxID(1), 22), 30000)
	if err != nil {
		t.Fatal(err)
	}
	// Someone unexposes and re-exposes the port on the same host port: not our row any more.
	if _, err := s.DeleteExposedPort(ctx, sandboxID(1), 22); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.TryReserveHostPort(ctx, tcp(sandboxID(1), 22), 30000); err != nil {
		t.Fatal(err)
	}
	if released, err := s.ReleaseReservation(ctx, mine); err != nil || released {
		t.Fatalf("ReleaseReservation(stale) = %v, %v; want false", released, err)
	}
	if ports, _ := s.ListExposedPorts(ctx, sandboxID(1)); len(ports) != 1 {
		t.Fatalf("the re-created row is gone: %+v", ports)
	}
}

func TestDeleteExposedPort_Idempotent(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	createSandbox(t, s, sandboxID(1), "")
	if _, _, err := s.TryReserveHostPort(ctx, tcp(sandboxID(1), 22), 30000); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		if deleted, err := s.DeleteExposedPort(ctx, sandboxID(1), 22); err != nil || deleted != want {
			t.Errorf("delete #%d = %v, %v; want %v", i+1, deleted, err, want)
		}
	}
}

func TestTryReserveHostPort_RaceSameHostPort(t *testing.T) {
	s, _ := newStore(t)
	for i := range races {
		createSandbox(t, s, sandboxID(i), "")
	}
	var reserved, taken atomic.Int32
	race(races, func(i int) {
		out, _, err := s.TryReserveHostPort(t.Context(), tcp(sandboxID(i), 8080), 30000)
		switch {
		case err != nil:
			t.Error(err)
		case out == store.Reserved:
			reserved.Add(1)
		case out == store.Taken:
			taken.Add(1)
		default:
			t.Errorf("sandbox %d: outcome %v", i, out)
		}
	})
	if reserved.Load() != 1 || taken.Load() != races-1 {
		t.Errorf("reserved %d, taken %d; want 1 and %d", reserved.Load(), taken.Load(), races-1)
	}
}

func TestTryReserveHostPort_RaceSameSandboxPort(t *testing.T) {
	s, _ := newStore(t)
	createSandbox(t, s, sandboxID(1), "")
	var (
		mu       sync.Mutex
		outcomes = map[store.ReserveOutcome]int{}
		hosts    = map[int]bool{}
	)
	race(races, func(i int) {
		out, ep, err := s.TryReserveHostPort(t.Context(), tcp(sandboxID(1), 8080), 30000+i)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		outcomes[out]++
		hosts[ep.HostPort] = true
	})
	want := map[store.ReserveOutcome]int{store.Reserved: 1, store.Existing: races - 1}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if len(hosts) != 1 {
		t.Errorf("callers saw host ports %v, want one", hosts)
	}
	if ports, _ := s.ListAllExposedPorts(t.Context()); len(ports) != 1 {
		t.Errorf("rows: %d, want 1", len(ports))
	}
}

// TestReserveHostPort_RacePoolExhaustion: 32 sandboxes, two callers each (a request and its
// retry), race for a pool of 16 host ports.
func TestReserveHostPort_RacePoolExhaustion(t *testing.T) {
	const sandboxes, poolSize = 32, 16
	s, _ := newStore(t)
	for i := range sandboxes {
		createSandbox(t, s, sandboxID(i), "")
	}
	pool := store.PortRange{Lo: 31000, Hi: 31000 + poolSize - 1}
	results := make([]error, races)
	hostPorts := make([]int, races)
	race(races, func(i int) {
		ep, _, err := s.ReserveHostPort(t.Context(), tcp(sandboxID(i%sandboxes), 9000), pool, nil)
		results[i], hostPorts[i] = err, ep.HostPort
	})

	owner := map[int]int{} // host port → sandbox
	for i, err := range results {
		sb := i % sandboxes
		var pe *store.PoolExhaustedError
		switch {
		case err == nil:
			if prev, ok := owner[hostPorts[i]]; ok && prev != sb {
				t.Errorf("host port %d given to sandboxes %d and %d", hostPorts[i], prev, sb)
			}
			owner[hostPorts[i]] = sb
		case errors.Is(err, store.ErrPoolExhausted) && errors.As(err, &pe):
			if *pe != (store.PoolExhaustedError{Pool: "host-port", Lo: pool.Lo, Hi: pool.Hi}) {
				t.Errorf("PoolExhaustedError = %+v", pe)
			}
		default:
			t.Errorf("caller %d: %v", i, err)
		}
		// A request and its retry agree.
		if j := i + sandboxes; j < races && (results[j] == nil) != (err == nil) {
			t.Errorf("sandbox %d: caller %d got %v, its retry %d got %v", sb, i, err, j, results[j])
		}
	}
	if len(owner) != poolSize {
		t.Errorf("%d sandboxes got a host port, want %d", len(owner), poolSize)
	}
	ports, err := s.ListAllExposedPorts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != poolSize {
		t.Errorf("rows: %d, want %d", len(ports), poolSize)
	}
	if n := len(uniqueHostPorts(ports)); n != len(ports) {
		t.Errorf("%d rows share %d host ports", len(ports), n)
	}
}

func uniqueHostPorts(ports []store.ExposedPort) map[int]bool {
	m := map[int]bool{}
	for _, p := range ports {
		m[p.HostPort] = true
	}
	return m
}
