package daytona_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// netEnv is a second daemon with --sandbox-network on a bridge of its own
// (and so its firewall), which the shared daemon, giving sandboxes no
// network, cannot show. The first test that needs it starts it; run
// closes it, tears its firewall down and removes its bridge.
var netEnv netStack

type netStack struct {
	agentBin string // set by run

	once   sync.Once
	s      *stack
	err    error
	dir    string
	bridge string
}

// needNetwork returns the network daemon, starting it on first use. Call
// it after testenv.NewNetNS, which skips the test where namespaces (root,
// iproute2) are missing: the firewall needs the same.
func needNetwork(t *testing.T) *stack {
	t.Helper()
	need(t)
	netEnv.once.Do(func() {
		var b [6]byte
		_, _ = rand.Read(b[:])
		suffix := hex.EncodeToString(b[:])
		netEnv.bridge = "dtn" + suffix // an interface name: at most 15 bytes
		if netEnv.dir, netEnv.err = os.MkdirTemp("", "dtn"); netEnv.err != nil {
			return
		}
		nodeID := "dtn-" + suffix
		testenv.Track(nodeID)
		netEnv.s, netEnv.err = newStack(context.Background(), netEnv.dir, nodeID, netEnv.agentBin,
			"--sandbox-network", "--sandbox-network-name", netEnv.bridge)
	})
	if netEnv.err != nil {
		t.Fatalf("the network daemon: %v", netEnv.err)
	}
	return netEnv.s
}

// close stops the network daemon, if one was started, and removes its
// firewall and bridge (the daemon keeps both when it stops, for sandboxes
// that run on).
func (n *netStack) close() error {
	if n.dir == "" {
		return nil
	}
	var errs []error
	if n.s != nil {
		errs = append(errs, n.s.Close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs = append(errs, netpolicy.New(netpolicy.Options{Bridge: n.bridge}).Teardown(ctx))
	if exec.CommandContext(ctx, "docker", "network", "inspect", n.bridge).Run() == nil {
		errs = append(errs, testenv.RemoveNetwork(ctx, n.bridge))
	}
	errs = append(errs, os.RemoveAll(n.dir))
	return errors.Join(errs...)
}

// serverPort is where the test's servers listen in their namespace.
const serverPort = 8080

// servers are two HTTP servers, A and B, in a namespace of the test's.
func servers(t *testing.T) (a, b netip.Addr) {
	t.Helper()
	ns := testenv.NewNetNS(t, 2)
	a, b = ns.Addrs[0], ns.Addrs[1]
	ns.Serve(t, a, serverPort)
	ns.Serve(t, b, serverPort)
	return a, b
}

// reaches reports whether sandbox id gets addr's answer, through the
// toolbox (curl; a refused or dropped connection fails within 3 s).
func (s *stack) reaches(t *testing.T, id string, addr netip.Addr) bool {
	t.Helper()
	resp := s.do(t, s.User, http.MethodPost, "/toolbox/"+id+"/process/execute", map[string]any{
		"command": fmt.Sprintf("curl -sS -m 3 http://%s:%d/", addr, serverPort), "timeout": 10,
	})
	if resp.status != http.StatusOK {
		t.Fatalf("execute: %d %s", resp.status, resp.body)
	}
	var out struct {
		ExitCode int    `json:"exitCode"`
		Result   string `json:"result"`
	}
	decode(t, resp.body, &out)
	return out.ExitCode == 0 && strings.HasPrefix(out.Result, addr.String()+" ")
}

// setNetwork is updateNetworkSettings.
func (s *stack) setNetwork(t *testing.T, id string, body map[string]any) sandbox {
	t.Helper()
	resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+id+"/network-settings", body)
	if resp.status != http.StatusOK {
		t.Fatalf("network-settings %v: %d %s", body, resp.status, resp.body)
	}
	var sb sandbox
	decode(t, resp.body, &sb)
	return sb
}

// cidr is addr's /32, as Daytona writes it.
func cidr(addr netip.Addr) string { return addr.String() + "/32" }

// TestNetwork_BlockAllHasNoNetwork: Daytona's default reaches the test's
// server; networkBlockAll: true reaches nothing, and reads so.
func TestNetwork_BlockAllHasNoNetwork(t *testing.T) {
	a, _ := servers(t)
	s := needNetwork(t)
	open := s.create(t, s.User, nil)
	if !open.reaches(t, s, a) {
		t.Fatal("a sandbox with Daytona's default does not reach the test's server: the test's network is broken")
	}
	if *open.NetworkBlockAll || open.NetworkAllow != "" {
		t.Errorf("the default reads networkBlockAll %v, networkAllowList %q: want false, none", *open.NetworkBlockAll, open.NetworkAllow)
	}
	blocked := s.create(t, s.User, map[string]any{"networkBlockAll": true})
	if blocked.reaches(t, s, a) {
		t.Error("networkBlockAll: the test's server answers")
	}
	if !*blocked.NetworkBlockAll {
		t.Error("networkBlockAll: reads false")
	}
}

func (sb sandbox) reaches(t *testing.T, s *stack, addr netip.Addr) bool {
	t.Helper()
	return s.reaches(t, sb.ID, addr)
}

// TestNetwork_AllowListLetsOnlyItThrough: networkAllowList of A reaches A,
// not B, and reads back (create, get, list); domainAllowList names pass
// through to the policy and read back too.
func TestNetwork_AllowListLetsOnlyItThrough(t *testing.T) {
	a, b := servers(t)
	s := needNetwork(t)
	sb := s.create(t, s.User, map[string]any{"networkAllowList": cidr(a), "domainAllowList": "Example.com, *.daytona.io"})
	if !sb.reaches(t, s, a) {
		t.Error("allow list A: A does not answer")
	}
	if sb.reaches(t, s, b) {
		t.Error("allow list A: B answers")
	}
	var got sandbox
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox/"+sb.ID, nil).body, &got)
	for what, d := range map[string]sandbox{"create": sb, "get": got} {
		if *d.NetworkBlockAll || d.NetworkAllow != cidr(a) || d.DomainAllow != "*.daytona.io,example.com" {
			t.Errorf("%s reads networkBlockAll %v, networkAllowList %q, domainAllowList %q; want false, %q, %q",
				what, *d.NetworkBlockAll, d.NetworkAllow, d.DomainAllow, cidr(a), "*.daytona.io,example.com")
		}
	}
	var page struct{ Items []sandbox }
	decode(t, s.do(t, s.User, http.MethodGet, "/sandbox?limit=200", nil).body, &page)
	for _, item := range page.Items {
		if item.ID == sb.ID && item.NetworkAllow != cidr(a) {
			t.Errorf("list reads networkAllowList %q, want %q", item.NetworkAllow, cidr(a))
		}
	}
}

// TestNetwork_UpdateTakesEffectAtOnce: updateNetworkSettings changes where
// a running sandbox's next connection goes, and the answer reads it.
func TestNetwork_UpdateTakesEffectAtOnce(t *testing.T) {
	a, b := servers(t)
	s := needNetwork(t)
	sb := s.create(t, s.User, nil)
	if !sb.reaches(t, s, a) || !sb.reaches(t, s, b) {
		t.Fatal("an open sandbox does not reach the test's servers: the test's network is broken")
	}

	got := s.setNetwork(t, sb.ID, map[string]any{"networkAllowList": cidr(b)})
	if *got.NetworkBlockAll || got.NetworkAllow != cidr(b) {
		t.Errorf("allow list B reads networkBlockAll %v, networkAllowList %q", *got.NetworkBlockAll, got.NetworkAllow)
	}
	if sb.reaches(t, s, a) || !sb.reaches(t, s, b) {
		t.Error("allow list B: want B only")
	}

	got = s.setNetwork(t, sb.ID, map[string]any{"networkBlockAll": true})
	if !*got.NetworkBlockAll || got.NetworkAllow != "" {
		t.Errorf("block all reads networkBlockAll %v, networkAllowList %q", *got.NetworkBlockAll, got.NetworkAllow)
	}
	if sb.reaches(t, s, a) || sb.reaches(t, s, b) {
		t.Error("block all: a server answers")
	}

	got = s.setNetwork(t, sb.ID, map[string]any{"networkBlockAll": false})
	if *got.NetworkBlockAll || got.NetworkAllow != "" {
		t.Errorf("unblocked reads networkBlockAll %v, networkAllowList %q", *got.NetworkBlockAll, got.NetworkAllow)
	}
	if !sb.reaches(t, s, a) || !sb.reaches(t, s, b) {
		t.Error("unblocked: want both")
	}
}

// TestNetwork_BadCIDRIs400AndChangesNothing: a networkAllowList that is
// not IPv4 CIDRs is a 400 saying so; a create makes nothing, an update
// leaves the policy as it was.
func TestNetwork_BadCIDRIs400AndChangesNothing(t *testing.T) {
	a, b := servers(t)
	s := needNetwork(t)
	before := footprint(t, s)
	for _, bad := range []string{"10.0.0.0/33", "example.com", cidr(a) + ",nonsense"} {
		got := wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox", map[string]any{"networkAllowList": bad}), http.StatusBadRequest)
		if !strings.Contains(got.Message, "networkAllowList") || !strings.Contains(got.Message, "not an IPv4 CIDR") {
			t.Errorf("create with %q: message %q", bad, got.Message)
		}
	}
	if after := footprint(t, s); after != before {
		t.Errorf("before %s, after %s", before, after)
	}

	sb := s.create(t, s.User, map[string]any{"networkAllowList": cidr(a)})
	got := wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/network-settings", map[string]any{"networkAllowList": "nonsense"}), http.StatusBadRequest)
	if !strings.Contains(got.Message, "not an IPv4 CIDR") {
		t.Errorf("update: message %q", got.Message)
	}
	if !sb.reaches(t, s, a) || sb.reaches(t, s, b) {
		t.Error("after a refused update: want A only, as before")
	}
}

// TestNetworkSettings_WithoutTheDaemonsNetwork: on a daemon without
// --sandbox-network, blocking a sandbox is what it is already (200), and
// giving it network is a 400 saying why.
func TestNetworkSettings_WithoutTheDaemonsNetwork(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.User, nil)
	if got := s.setNetwork(t, sb.ID, map[string]any{"networkBlockAll": true}); !*got.NetworkBlockAll {
		t.Error("blocked: reads networkBlockAll false")
	}
	for _, body := range []map[string]any{{"networkBlockAll": false}, {"networkAllowList": "10.0.0.0/8"}} {
		got := wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/network-settings", body), http.StatusBadRequest)
		if !strings.Contains(got.Message, "--sandbox-network") {
			t.Errorf("%v: message %q does not say the daemon has no network", body, got.Message)
		}
	}
	got := wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/network-settings", map[string]any{}), http.StatusBadRequest)
	if !strings.Contains(got.Message, "at least one of") {
		t.Errorf("an empty update: message %q", got.Message)
	}
	wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox/sb-0000000000000000/network-settings", map[string]any{"networkBlockAll": true}), http.StatusNotFound)
}
