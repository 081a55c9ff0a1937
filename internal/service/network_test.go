package service_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// serverPort is where the test's servers listen in their namespace.
const serverPort = 8080

// reaches reports whether a connection from sandbox id to addr:port gets
// an HTTP answer (busybox nc; a refused or dropped one fails within 2 s).
func reaches(t *testing.T, h *harness, c service.Caller, id string, addr netip.Addr, port int) bool {
	t.Helper()
	res, err := h.svc.Exec(t.Context(), c, id, service.ExecRequest{
		Command: fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 %s %d`, addr, port),
	})
	if err != nil {
		t.Fatalf("exec in %s: %v", id, err)
	}
	return strings.Contains(string(res.Stdout), " 200 ")
}

func createWith(t *testing.T, h *harness, owner string, p netpolicy.Policy) *service.Created {
	t.Helper()
	c, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: owner, Image: busybox, NetworkPolicy: p})
	if err != nil {
		t.Fatalf("create with %+v: %v", p, err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.Background(), admin, c.ID) })
	return c
}

// restricted lets a sandbox reach its allow list only, deny overriding
// allow; a change of policy holds for the next connection, at once.
func TestNetwork_RestrictedReachesItsAllowListOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true})
	ns := testenv.NewNetNS(t, 2)
	a, b := ns.Addrs[0], ns.Addrs[1]
	ns.Serve(t, a, serverPort)
	ns.Serve(t, b, serverPort)
	alice := service.Caller{Owner: "alice"}

	open := createWith(t, h, "alice", netpolicy.Policy{Mode: netpolicy.ModeOpen})
	if !reaches(t, h, alice, open.ID, a, serverPort) || !reaches(t, h, alice, open.ID, b, serverPort) {
		t.Fatal("an open sandbox does not reach the test's servers: the test's network is broken")
	}
	if got := open.NetworkPolicy; got.Mode != netpolicy.ModeOpen {
		t.Errorf("an open sandbox reports %+v", got)
	}

	s := createWith(t, h, "alice", netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{a.String()}})
	if !reaches(t, h, alice, s.ID, a, serverPort) {
		t.Error("restricted to A: A does not answer")
	}
	if reaches(t, h, alice, s.ID, b, serverPort) {
		t.Error("restricted to A: B answers")
	}
	// Port 53 is DNS to the engine's resolvers only, not a way out.
	ns.Serve(t, b, 53)
	if reaches(t, h, alice, s.ID, b, 53) {
		t.Error("restricted to A: B answers on port 53")
	}

	// Deny overrides allow: the namespace's /29 allowed, B denied.
	subnet := netip.PrefixFrom(a, 29).Masked().String()
	sb, err := h.svc.SetNetworkPolicy(t.Context(), alice, s.ID, netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{subnet}, Deny: []string{b.String()}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.NetworkPolicy.Deny[0] != b.String()+"/32" {
		t.Errorf("the updated sandbox reports %+v", sb.NetworkPolicy)
	}
	if !reaches(t, h, alice, s.ID, a, serverPort) || reaches(t, h, alice, s.ID, b, serverPort) {
		t.Error("allow the /29, deny B: want A only")
	}
	got, err := h.svc.Get(t.Context(), alice, s.ID)
	if err != nil || len(got.NetworkPolicy.Allow) != 1 || got.NetworkPolicy.Allow[0] != subnet {
		t.Errorf("a read after the change reports %+v, %v", got.NetworkPolicy, err)
	}

	// Open to restricted: the next connection is cut.
	if _, err := h.svc.SetNetworkPolicy(t.Context(), alice, open.ID, netpolicy.Policy{Mode: netpolicy.ModeRestricted}); err != nil {
		t.Fatal(err)
	}
	if reaches(t, h, alice, open.ID, a, serverPort) {
		t.Error("after open → restricted with nothing allowed, A still answers")
	}
	// A stop and a start (a new address, maybe) keep the policy.
	if _, err := h.svc.Stop(t.Context(), alice, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Start(t.Context(), alice, s.ID); err != nil {
		t.Fatal(err)
	}
	if !reaches(t, h, alice, s.ID, a, serverPort) || reaches(t, h, alice, s.ID, b, serverPort) {
		t.Error("after a stop and a start: want A only")
	}
}

// Sandboxes reach neither each other (of any owner) nor the host: not
// the daemon's API, not a server the test runs on the host.
func TestNetwork_NoTrafficBetweenSandboxesOrToTheHost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true})
	ns := testenv.NewNetNS(t, 1)
	ns.Serve(t, ns.Addrs[0], serverPort)
	alice, bob := service.Caller{Owner: "alice"}, service.Caller{Owner: "bob"}
	open := netpolicy.Policy{Mode: netpolicy.ModeOpen}
	a := createWith(t, h, "alice", open)
	a2 := createWith(t, h, "alice", open)
	b := createWith(t, h, "bob", open)

	// A server in sandbox a, on every address of it.
	p, err := h.svc.StartProcess(t.Context(), alice, a.ID, service.ProcessRequest{Command: "while true; do printf 'HTTP/1.0 200 OK\\r\\n\\r\\nhi' | nc -l -p 9000; done"})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	res, err := h.svc.Exec(t.Context(), alice, a.ID, service.ExecRequest{Command: "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1"})
	if err != nil {
		t.Fatal(err)
	}
	addrA, err := netip.ParseAddr(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("sandbox a's address %q: %v", res.Stdout, err)
	}
	eventually(t, "sandbox a serves on its own loopback", func() bool { return reaches(t, h, alice, a.ID, netip.MustParseAddr("127.0.0.1"), 9000) })
	if reaches(t, h, bob, b.ID, addrA, 9000) {
		t.Error("bob's sandbox reaches alice's")
	}
	if reaches(t, h, alice, a2.ID, addrA, 9000) {
		t.Error("alice's other sandbox reaches it (traffic between sandboxes is off, whoever owns them)")
	}

	// A server on the host, on every address: the host's address on the
	// sandboxes' bridge is the one a sandbox can name.
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "HTTP/1.0 200 OK\r\n\r\nhost")
			c.Close()
		}
	}()
	res, err = h.svc.Exec(t.Context(), bob, b.ID, service.ExecRequest{Command: "ip route | awk '/default/ {print $3}'"})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := netip.ParseAddr(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("the sandbox's gateway %q: %v", res.Stdout, err)
	}
	if reaches(t, h, bob, b.ID, gw, ln.Addr().(*net.TCPAddr).Port) {
		t.Error("a sandbox reaches a server on the host")
	}
	if reaches(t, h, bob, b.ID, ns.Host, ln.Addr().(*net.TCPAddr).Port) {
		t.Error("a sandbox reaches a server on the host through another of its addresses")
	}
	if !reaches(t, h, bob, b.ID, ns.Addrs[0], serverPort) {
		t.Error("an open sandbox does not reach the test's server: the test's network is broken")
	}
}

// The policy holds before the first command: a sandbox whose first
// command connects where its policy denies never gets through (50 creates).
func TestNetwork_PolicyHoldsFromTheFirstCommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true})
	ns := testenv.NewNetNS(t, 2)
	denied, allowed := ns.Addrs[0], ns.Addrs[1]
	ns.Serve(t, denied, serverPort)
	policy := netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{allowed.String()}}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		through []string
		errs    []error
	)
	sem := make(chan struct{}, 4)
	for range 50 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := h.svc.CreateSandbox(context.Background(), service.CreateRequest{Owner: "alice", Image: busybox, NetworkPolicy: policy})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer h.svc.Destroy(context.Background(), admin, c.ID)
			res, err := h.svc.Exec(context.Background(), service.Caller{Owner: "alice"}, c.ID, service.ExecRequest{
				Command: fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 %s %d`, denied, serverPort),
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if strings.Contains(string(res.Stdout), " 200 ") {
				through = append(through, c.ID)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if len(through) > 0 {
		t.Errorf("%d of 50 sandboxes reached a denied server with their first command: %v", len(through), through)
	}
}

// The engine deletes FORWARD's jump to DOCKER-USER and inserts it again
// whenever any network is created on the host: in that moment DOCKER-USER
// is not walked. The policy holds then too: the bridge's chain is hooked
// in FORWARD itself. Played here by removing this bridge's hook from
// DOCKER-USER (the bridge is the test's own).
func TestNetwork_PolicyHoldsWithoutDockerUser(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true})
	ns := testenv.NewNetNS(t, 1)
	denied := ns.Addrs[0]
	ns.Serve(t, denied, serverPort)
	c := createWith(t, h, "alice", netpolicy.Policy{Mode: netpolicy.ModeRestricted})
	bridge := h.netName
	hook := []string{"-t", "filter", "-D", "DOCKER-USER", "-i", bridge, "-j", "SBXD-F-" + bridge}
	if out, err := exec.CommandContext(t.Context(), "iptables", hook...).CombinedOutput(); err != nil {
		t.Fatalf("remove the DOCKER-USER hook: %v: %s", err, out)
	}
	res, err := h.svc.Exec(t.Context(), service.Caller{Owner: "alice"}, c.ID, service.ExecRequest{
		Command: fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 %s %d`, denied, serverPort),
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout), " 200 ") {
		t.Errorf("a restricted sandbox reached a denied server while DOCKER-USER was not walked: %q", res.Stdout)
	}
}

// Root in a sandbox cannot change its network: no address, route or link
// change is allowed (no CAP_NET_ADMIN), and the policy holds after.
func TestNetwork_RootInTheSandboxCannotChangeIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true})
	ns := testenv.NewNetNS(t, 1)
	ns.Serve(t, ns.Addrs[0], serverPort)
	alice := service.Caller{Owner: "alice"}
	c := createWith(t, h, "alice", netpolicy.Policy{Mode: netpolicy.ModeRestricted})
	for _, cmd := range []string{
		"ip addr add 10.9.9.9/32 dev eth0",
		"ip route del default",
		"ip link set eth0 down",
		"iptables -F",
	} {
		res, err := h.svc.Exec(t.Context(), alice, c.ID, service.ExecRequest{Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 {
			t.Errorf("root in the sandbox ran %q", cmd)
		}
	}
	if reaches(t, h, alice, c.ID, ns.Addrs[0], serverPort) {
		t.Error("the restricted sandbox reaches the server after root tried to change its network")
	}
}

// Bad policies are refused before anything is made.
func TestNetwork_BadPoliciesAreRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true})
	for _, p := range []netpolicy.Policy{
		{Mode: "closed"},
		{Mode: netpolicy.ModeOpen, Allow: []string{"10.0.0.1"}},
		{Mode: netpolicy.ModeNone, Deny: []string{"10.0.0.0/8"}},
		{Mode: netpolicy.ModeRestricted, Allow: []string{"not a host"}},
		{Mode: netpolicy.ModeRestricted, Deny: []string{"example.com"}},
		{Mode: netpolicy.ModeRestricted, Deny: []string{"10.0.0.0/33"}},
	} {
		if _, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Image: busybox, NetworkPolicy: p}); !errors.Is(err, service.ErrInvalidArgument) {
			t.Errorf("create with %+v: %v, want ErrInvalidArgument", p, err)
		}
	}
	if n := h.containers(t); n != 0 {
		t.Errorf("%d containers after refused creates", n)
	}
}

// A name rule lets HTTP for that name through and not another name on the
// same address; it never reaches the host or another sandbox by name.
func TestNetwork_NameRulesFollowTheHostHeader(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true})
	ns := testenv.NewNetNS(t, 1)
	srv := ns.Addrs[0]
	ns.Serve(t, srv, 80)
	alice := service.Caller{Owner: "alice"}
	c := createWith(t, h, "alice", netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{"a.test", "*.b.test"}})
	get := func(addr netip.Addr, host string) string {
		t.Helper()
		res, err := h.svc.Exec(t.Context(), alice, c.ID, service.ExecRequest{
			Command: fmt.Sprintf(`printf 'GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' | nc -w 3 %s 80`, host, addr),
		})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	if got := get(srv, "a.test"); !strings.Contains(got, " 200 ") || !strings.Contains(got, srv.String()+" a.test") {
		t.Errorf("Host a.test (allowed): %q", got)
	}
	if got := get(srv, "x.b.test"); !strings.Contains(got, " 200 ") {
		t.Errorf("Host x.b.test (allowed by *.b.test): %q", got)
	}
	for _, host := range []string{"b.test", "evil.test", "a.test.evil.test"} {
		if got := get(srv, host); strings.Contains(got, " 200 ") || !strings.Contains(got, " 403 ") {
			t.Errorf("Host %s (not allowed): %q, want 403", host, got)
		}
	}
	// An allowed name to the host's address on the bridge reaches nothing.
	res, err := h.svc.Exec(t.Context(), alice, c.ID, service.ExecRequest{Command: "ip route | awk '/default/ {print $3}'"})
	if err != nil {
		t.Fatal(err)
	}
	gw := netip.MustParseAddr(strings.TrimSpace(string(res.Stdout)))
	if got := get(gw, "a.test"); strings.Contains(got, " 200 ") {
		t.Errorf("an allowed name sent to the host's address got through: %q", got)
	}
	// Port 8080 is not proxied: a name does not open it.
	ns.Serve(t, srv, serverPort)
	if reaches(t, h, alice, c.ID, srv, serverPort) {
		t.Error("a name rule opened another port than 80 and 443")
	}
}

// An idle sandbox of a network class reaches nothing; its claim applies
// its owner's policy before the create answers.
func TestNetwork_PooledSandboxGetsItsPolicyAtClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true, pool: []service.PoolTarget{{PoolClass: service.PoolClass{Image: busybox, Network: true}, Size: 1}}})
	runPool(t, h)
	waitReady(t, h, 1)
	ns := testenv.NewNetNS(t, 2)
	a, b := ns.Addrs[0], ns.Addrs[1]
	ns.Serve(t, a, serverPort)
	ns.Serve(t, b, serverPort)
	idle := pooledIDs(t, h)[0]
	ac, err := h.svc.Agent(t.Context(), idle)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ac.Exec(t.Context(), agent.ExecRequest{Cmd: []string{"sh", "-c", fmt.Sprintf(`printf 'GET / HTTP/1.0

' | nc -w 2 %s %d`, a, serverPort)}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout), " 200 ") {
		t.Error("an idle sandbox of the pool reaches the network")
	}
	c, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "alice", Image: busybox,
		NetworkPolicy: netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{a.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.svc.Destroy(context.Background(), admin, c.ID) })
	if !hit(c) {
		t.Fatalf("the create was not served from the pool: %+v", c.Timings)
	}
	alice := service.Caller{Owner: "alice"}
	if !reaches(t, h, alice, c.ID, a, serverPort) || reaches(t, h, alice, c.ID, b, serverPort) {
		t.Error("the claimed sandbox: want A only")
	}
	if c.NetworkPolicy.Mode != netpolicy.ModeRestricted {
		t.Errorf("the claimed sandbox reports %+v", c.NetworkPolicy)
	}
}

// servePings counts the lines sent on the connections to addr:port in ns,
// answering each with one of its own, until the test ends.
func servePings(t *testing.T, ns *testenv.NetNS, addr netip.Addr, port int) *atomic.Int64 {
	t.Helper()
	ln, err := ns.Listen(netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var conns sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				stop := context.AfterFunc(t.Context(), func() { c.Close() })
				defer stop()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					n.Add(1)
					if _, err := io.WriteString(c, "pong\n"); err != nil {
						return
					}
				}
			})
		}
	}()
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	return &n
}

// pingerLines is how many lines a pinger sends when nothing cuts its
// connection.
const pingerLines = 100

// pinger keeps one connection from sandbox id to addr:port, a line every
// 200 ms, pingerLines of them; its channel gets the exec's end: nil when
// the connection was cut before the last line, an error when it was not
// (or the exec failed).
func pinger(t *testing.T, h *harness, c service.Caller, id string, addr netip.Addr, port int) <-chan error {
	t.Helper()
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		// The loop records each line sent; once nc is gone (the
		// connection cut) the next line kills the loop (SIGPIPE).
		f := fmt.Sprintf("/tmp/pinger-%s-%d", addr, port)
		res, err := h.svc.Exec(context.Background(), c, id, service.ExecRequest{
			Command: fmt.Sprintf(`echo 0 >%[1]s; i=0; while [ $i -lt %[4]d ]; do echo ping; i=$((i+1)); echo $i >%[1]s; sleep 0.2; done | nc -w 2 %[2]s %[3]d >/dev/null; cat %[1]s`, f, addr, port, pingerLines),
			Timeout: time.Minute,
		})
		switch {
		case err != nil:
		case strings.TrimSpace(string(res.Stdout)) == strconv.Itoa(pingerLines):
			err = fmt.Errorf("all %d lines went through", pingerLines)
		case strings.TrimSpace(string(res.Stdout)) == "0":
			err = fmt.Errorf("no line went through: %q %q", res.Stdout, res.Stderr)
		}
		done <- err
	}()
	t.Cleanup(func() { <-finished })
	return done
}

// A connection the policy no longer allows is cut at its next packet,
// whether an earlier policy allowed it (restricted to A and B, then to B)
// or no policy held when it opened (an open sandbox, restricted since:
// as a packet that slipped through while rules were rewritten); one the
// new policy still allows goes on, and a port exposed through the daemon
// still answers. Before, established traffic passed whatever the policy
// said: the connection to A went on.
func TestNetwork_PolicyCutsTheConnectionsItNoLongerAllows(t *testing.T) {
	t.Parallel()
	testConnectionsCut(t, newHarness(t, harnessOptions{network: true}))
}

func testConnectionsCut(t *testing.T, h *harness) {
	ns := testenv.NewNetNS(t, 2)
	a, b := ns.Addrs[0], ns.Addrs[1]
	const port = 9100
	toA, toB := servePings(t, ns, a, port), servePings(t, ns, b, port)
	alice := service.Caller{Owner: "alice"}
	restricted := createWith(t, h, "alice", netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{a.String(), b.String()}})
	open := createWith(t, h, "alice", netpolicy.Policy{Mode: netpolicy.ModeOpen})

	// A server in the restricted sandbox, reached through the daemon.
	p, err := h.svc.StartProcess(t.Context(), alice, restricted.ID, service.ProcessRequest{Command: "while true; do printf 'HTTP/1.0 200 OK\\r\\n\\r\\nhi' | nc -l -p 9000; done"})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	exposed := func() bool {
		conn, err := h.svc.DialPort(t.Context(), restricted.ID, 9000)
		if err != nil {
			return false
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(conn, "GET / HTTP/1.0\r\n\r\n")
		b, _ := io.ReadAll(conn)
		return strings.Contains(string(b), "hi")
	}
	eventually(t, "the restricted sandbox's server answers through the daemon", exposed)

	restrictedA := pinger(t, h, alice, restricted.ID, a, port)
	pingB := pinger(t, h, alice, restricted.ID, b, port)
	openA := pinger(t, h, alice, open.ID, a, port)
	eventually(t, "both sandboxes' connections to A and the one to B carry pings", func() bool {
		return toA.Load() >= 10 && toB.Load() >= 5
	})

	onlyB := netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{b.String()}}
	for _, id := range []string{restricted.ID, open.ID} {
		if _, err := h.svc.SetNetworkPolicy(t.Context(), alice, id, onlyB); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []struct {
		what string
		done <-chan error
	}{{"the restricted sandbox's connection to A", restrictedA}, {"the connection to A the sandbox opened while open", openA}} {
		select {
		case err := <-w.done:
			if err != nil {
				t.Errorf("%s was never cut: %v", w.what, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s still open 30 s after the policy denied A (%d pings reached A)", w.what, toA.Load())
		}
	}
	beforeB := toB.Load()
	eventually(t, "the connection to B, still allowed, carries pings after the change", func() bool {
		return toB.Load() >= beforeB+5
	})
	if !exposed() {
		t.Error("the exposed port does not answer after the policy change")
	}
	// The connection to B lasts its whole run.
	if err := <-pingB; err == nil || !strings.Contains(err.Error(), "all ") {
		t.Errorf("the connection to B, allowed throughout, was cut (%v, %d pings reached B)", err, toB.Load())
	}
}
