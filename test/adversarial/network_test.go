package adversarial_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// networkDaemon starts a daemon of t's own with --sandbox-network on a
// bridge of t's own, removed (with its firewall) after the daemon stops.
func networkDaemon(t *testing.T, name string) *daemontest.Daemon {
	t.Helper()
	requireDocker(t) // before the cleanup below: nothing to tear down then
	var b [5]byte
	_, _ = rand.Read(b[:])
	bridge := "adv" + hex.EncodeToString(b[:]) // an interface name: at most 15 bytes
	// Registered before the daemon's own cleanup, so it runs after it.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if exec.CommandContext(ctx, "docker", "network", "inspect", bridge).Run() == nil {
			if err := netpolicy.New(netpolicy.Options{Bridge: bridge}).Teardown(ctx); err != nil {
				t.Errorf("firewall teardown: %v", err)
			}
			if err := testenv.RemoveNetwork(ctx, bridge); err != nil {
				t.Error(err)
			}
		}
	})
	return startDaemon(t, name, "--sandbox-network", "--sandbox-network-name", bridge)
}

// noForwarding is a policy with network whose DNS queries for names the
// engine's resolver does not know itself go nowhere: the deny list wins
// over the resolvers' port 53, so nothing leaves the machine.
var noForwarding = &sandboxd.NetworkPolicy{Mode: sandboxd.NetworkOpen, Deny: []string{"0.0.0.0/1", "128.0.0.0/1"}}

// askResolver is what a sandbox with network runs to learn its
// neighbour's id from the engine's resolver: the reverse name of the
// neighbour's address (through libc, and a raw PTR query straight to
// 127.0.0.11, whatever resolv.conf says), and a forward lookup of the
// neighbour's id. It prints everything it learns.
const askResolver = `
import socket, sys, struct, random
addr, nid = sys.argv[1], sys.argv[2]
print("resolv.conf:", open("/etc/resolv.conf").read().replace("\n", " | "))
try:
    print("gethostbyaddr:", socket.gethostbyaddr(addr))
except OSError as e:
    print("gethostbyaddr failed:", e)
try:
    print("RESOLVED", nid, socket.gethostbyname(nid))
except OSError as e:
    print("gethostbyname failed:", e)
name = ".".join(reversed(addr.split("."))) + ".in-addr.arpa"
q = struct.pack(">HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 12, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
try:
    s.sendto(q, ("127.0.0.11", 53))
    print("raw PTR answer:", s.recv(4096))
except OSError as e:
    print("raw PTR failed:", e)
`

// TestNetwork_ResolverGivesNoNeighbourIDs: a sandbox
// with network asks the engine's resolver on the shared bridge for the
// name of another tenant's sandbox's address (PTR, through libc and
// straight to 127.0.0.11) and for that sandbox's id: no answer shows the
// id. Before container names were keyed, the PTR answered
// "<id>.<bridge>" and the id resolved (the hostname was the id).
func TestNetwork_ResolverGivesNoNeighbourIDs(t *testing.T) {
	t.Parallel()
	d := networkDaemon(t, "dns")
	victim := sandbox(t, tenant(t, d, "victim"), sandboxd.CreateRequest{Image: baseImage, NetworkPolicy: noForwarding})
	mallory := tenant(t, d, "mallory")
	sb := sandbox(t, mallory, sandboxd.CreateRequest{Image: baseImage, NetworkPolicy: noForwarding})

	// The victim's address, as a scan of the bridge's subnet would find it.
	admin := adminClient(d)
	res, err := admin.Exec(t.Context(), victim.ID, sandboxd.ExecRequest{Cmd: []string{"python3", "-c",
		`import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("192.0.2.1", 9)); print(s.getsockname()[0])`}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("victim's address: %+v, %v", res, err)
	}
	addr := strings.TrimSpace(res.Stdout)

	res, err = mallory.Exec(t.Context(), sb.ID, sandboxd.ExecRequest{Cmd: []string{"python3", "-c", askResolver, addr, victim.ID}, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("ask the resolver: %+v, %v", res, err)
	}
	t.Logf("what the sandbox learnt about %s (%s):\n%s", victim.ID, addr, res.Stdout)
	// The engine's embedded resolver, which knows the containers' names.
	// Under --engine oci there is none: resolv.conf names the host's
	// resolvers, which know nothing of sandboxes; no answer may show the
	// id all the same.
	wantResolver := "127.0.0.11"
	if d.Engine() == "oci" {
		wantResolver = "resolv.conf: nameserver "
	}
	if !strings.Contains(res.Stdout, wantResolver) {
		t.Fatalf("the sandbox's resolver is not the engine's (%q): the check looks in the wrong place", wantResolver)
	}
	if strings.Contains(res.Stdout, victim.ID) || strings.Contains(res.Stdout, victim.ID[3:]) {
		t.Errorf("the engine's resolver gave the neighbour's id %s away:\n%s", victim.ID, res.Stdout)
	}
	if strings.Contains(res.Stdout, "RESOLVED") {
		t.Errorf("the neighbour's id resolves to an address:\n%s", res.Stdout)
	}
	// And the sandbox's own hostname is not its id either (it is the name
	// its neighbours' queries would answer).
	if res := sh(t, mallory, sb.ID, "hostname"); strings.Contains(res.Stdout, sb.ID[3:]) {
		t.Errorf("hostname %q shows the sandbox id", res.Stdout)
	}
}
