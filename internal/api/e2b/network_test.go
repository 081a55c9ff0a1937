package e2b_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// serverPort is where the test's servers listen in their namespace.
const serverPort = 8080

// reaches reports whether sandbox id gets an HTTP answer from addr:port
// (a refused or dropped connection fails within 2 s).
func reaches(t *testing.T, h *harness, id string, addr netip.Addr) bool {
	t.Helper()
	res, err := h.svc.Exec(t.Context(), service.Caller{Admin: true}, id, service.ExecRequest{
		Command: fmt.Sprintf("curl -sS -m 2 -o /dev/null -w '%%{http_code}' http://%s:%d/", addr, serverPort),
	})
	if err != nil {
		t.Fatalf("exec in %s: %v", id, err)
	}
	return string(res.Stdout) == "200"
}

// networkInfo is what getInfo reads of a sandbox's network.
type networkInfo struct {
	AllowInternetAccess *bool `json:"allowInternetAccess"`
	Network             *struct {
		AllowOut []string `json:"allowOut"`
		DenyOut  []string `json:"denyOut"`
	} `json:"network"`
}

func (h *harness) networkInfo(t *testing.T, id string) networkInfo {
	t.Helper()
	resp := h.do(t, h.admin, http.MethodGet, "/sandboxes/"+id, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, resp.status, resp.body)
	}
	var info networkInfo
	decode(t, resp.body, &info)
	return info
}

// TestNetwork_E2BEgress: on a daemon with --sandbox-network, the SDK's
// settings hold: the default is open; allowInternetAccess false is no
// network; denyOut refuses its address while another answers; allowOut
// with ALL_TRAFFIC denied lets only its server through; getInfo shows
// each policy; updateNetwork changes it for the next connection.
func TestNetwork_E2BEgress(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{network: true})
	ns := testenv.NewNetNS(t, 2)
	a, b := ns.Addrs[0], ns.Addrs[1]
	ns.Serve(t, a, serverPort)
	ns.Serve(t, b, serverPort)

	open := h.create(t, map[string]any{"templateID": "base"})
	if !reaches(t, h, open.SandboxID, a) || !reaches(t, h, open.SandboxID, b) {
		t.Fatal("a default sandbox does not reach the test's servers: the test's network is broken")
	}
	if info := h.networkInfo(t, open.SandboxID); info.AllowInternetAccess != nil || info.Network != nil {
		t.Errorf("an open sandbox reads %+v, want neither allowInternetAccess nor network", info)
	}

	off := h.create(t, map[string]any{"templateID": "base", "allow_internet_access": false})
	if reaches(t, h, off.SandboxID, a) {
		t.Error("allowInternetAccess false: A answers")
	}
	if sb, err := h.svc.Get(t.Context(), service.Caller{Admin: true}, off.SandboxID); err != nil || sb.NetworkPolicy.Mode != netpolicy.ModeNone {
		t.Errorf("allowInternetAccess false: policy %+v, %v; want mode none", sb.NetworkPolicy, err)
	}
	if info := h.networkInfo(t, off.SandboxID); info.AllowInternetAccess == nil || *info.AllowInternetAccess || info.Network == nil || !slices.Equal(info.Network.DenyOut, []string{"0.0.0.0/0"}) {
		t.Errorf("allowInternetAccess false reads %+v", info)
	}

	deny := h.create(t, map[string]any{"templateID": "base", "network": map[string]any{"denyOut": []string{b.String()}}})
	if !reaches(t, h, deny.SandboxID, a) || reaches(t, h, deny.SandboxID, b) {
		t.Error("denyOut B: want A only")
	}
	if info := h.networkInfo(t, deny.SandboxID); info.Network == nil || !slices.Equal(info.Network.DenyOut, []string{b.String() + "/32"}) || info.Network.AllowOut != nil {
		t.Errorf("denyOut B reads %+v", info)
	}

	allow := h.create(t, map[string]any{"templateID": "base", "network": map[string]any{"allowOut": []string{a.String()}, "denyOut": []string{"0.0.0.0/0"}}})
	if !reaches(t, h, allow.SandboxID, a) || reaches(t, h, allow.SandboxID, b) {
		t.Error("allowOut A, denyOut ALL_TRAFFIC: want A only")
	}
	if info := h.networkInfo(t, allow.SandboxID); info.Network == nil || !slices.Equal(info.Network.AllowOut, []string{a.String() + "/32"}) || !slices.Equal(info.Network.DenyOut, []string{"0.0.0.0/0"}) {
		t.Errorf("allowOut A reads %+v", info)
	}

	// updateNetwork: allow B instead; then deny everything; then an empty
	// update (every field cleared) opens it.
	put := func(id string, body map[string]any) response {
		return h.do(t, h.admin, http.MethodPut, "/sandboxes/"+id+"/network", body)
	}
	if resp := put(allow.SandboxID, map[string]any{"allowOut": []string{b.String()}, "allow_internet_access": false}); resp.status != http.StatusNoContent {
		t.Fatalf("update: %d %s", resp.status, resp.body)
	}
	if reaches(t, h, allow.SandboxID, a) || !reaches(t, h, allow.SandboxID, b) {
		t.Error("updated to allowOut B: want B only")
	}
	if resp := put(allow.SandboxID, map[string]any{"denyOut": []string{"0.0.0.0/0"}}); resp.status != http.StatusNoContent {
		t.Fatalf("update: %d %s", resp.status, resp.body)
	}
	if reaches(t, h, allow.SandboxID, b) {
		t.Error("updated to deny ALL_TRAFFIC: B answers")
	}
	if resp := put(allow.SandboxID, map[string]any{}); resp.status != http.StatusNoContent {
		t.Fatalf("update: %d %s", resp.status, resp.body)
	}
	if !reaches(t, h, allow.SandboxID, a) || !reaches(t, h, allow.SandboxID, b) {
		t.Error("updated with nothing (open): want A and B")
	}

	// A sandbox made without network cannot get one; denying it
	// everything is what holds already.
	wantError(t, put(off.SandboxID, map[string]any{}), http.StatusBadRequest)
	if resp := put(off.SandboxID, map[string]any{"allow_internet_access": false}); resp.status != http.StatusNoContent {
		t.Errorf("deny everything to a sandbox without network: %d %s", resp.status, resp.body)
	}
	wantError(t, put(open.SandboxID, map[string]any{"denyOut": []string{"10.0.0.0/33"}}), http.StatusBadRequest)
	wantError(t, put("sb-00000000deadbeef", map[string]any{}), http.StatusNotFound)
}

// TestNetwork_BadEgressMakesNothing: a bad CIDR or host name, a rule
// sandboxd cannot hold, or an egress proxy is a 400 naming it, and no
// sandbox is made — with or without --sandbox-network.
func TestNetwork_BadEgressMakesNothing(t *testing.T) {
	t.Parallel()
	for _, network := range []bool{false, true} {
		t.Run(fmt.Sprintf("sandbox-network=%v", network), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOptions{network: network})
			for _, tc := range []struct {
				network map[string]any
				mention string
			}{
				{map[string]any{"denyOut": []string{"10.0.0.0/33"}}, "10.0.0.0/33"},
				{map[string]any{"denyOut": []string{"example.com"}}, "domain names are not supported"},
				{map[string]any{"allowOut": []string{"-bad-.example"}, "denyOut": []string{"0.0.0.0/0"}}, "-bad-.example"},
				{map[string]any{"allowOut": []string{"example.com"}}, "ALL_TRAFFIC"},
				{map[string]any{"allowOut": []string{"10.1.2.3"}, "denyOut": []string{"10.0.0.0/8"}}, "exception"},
				{map[string]any{"egressProxy": map[string]any{"address": "proxy.example.com:1080"}}, "egressProxy"},
			} {
				resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "base", "network": tc.network})
				wantError(t, resp, http.StatusBadRequest)
				if !strings.Contains(string(resp.body), tc.mention) {
					t.Errorf("%v: body %s does not mention %q", tc.network, resp.body, tc.mention)
				}
			}
			if n := h.containers(t); n != 0 {
				t.Errorf("%d containers after refused creates, want 0", n)
			}
		})
	}
}

// TestNetwork_NoSandboxNetwork: on a daemon without --sandbox-network
// every E2B sandbox has no network, whatever the create asked, and
// getInfo says so; updateNetwork can only deny everything.
func TestNetwork_NoSandboxNetwork(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "allow_internet_access": true, "network": map[string]any{"denyOut": []string{"10.0.0.0/8"}, "maskRequestHost": "x-${PORT}"}})
	info := h.networkInfo(t, c.SandboxID)
	if info.AllowInternetAccess == nil || *info.AllowInternetAccess || info.Network == nil || !slices.Equal(info.Network.DenyOut, []string{"0.0.0.0/0"}) {
		t.Errorf("a sandbox without network reads %+v", info)
	}
	resp := h.do(t, h.admin, http.MethodPut, "/sandboxes/"+c.SandboxID+"/network", map[string]any{"allowOut": []string{"1.1.1.1"}, "denyOut": []string{"0.0.0.0/0"}})
	wantError(t, resp, http.StatusBadRequest)
	if !strings.Contains(string(resp.body), "--sandbox-network") {
		t.Errorf("update on a daemon without network: %s does not say why", resp.body)
	}
	if resp := h.do(t, h.admin, http.MethodPut, "/sandboxes/"+c.SandboxID+"/network", map[string]any{"denyOut": []string{"0.0.0.0/0"}}); resp.status != http.StatusNoContent {
		t.Errorf("deny everything: %d %s", resp.status, resp.body)
	}
}
