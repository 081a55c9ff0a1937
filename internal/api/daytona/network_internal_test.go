package daytona

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/service"
)

func ptr[T any](v T) *T { return &v }

var (
	noNet   = netpolicy.Policy{Mode: netpolicy.ModeNone}
	openNet = netpolicy.Policy{Mode: netpolicy.ModeOpen}
	cutOff  = netpolicy.Policy{Mode: netpolicy.ModeRestricted}
)

func restricted(allow ...string) netpolicy.Policy {
	return netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: allow}
}

// TestCreatePolicy_DaytonasOptions: networkBlockAll is noNet, the lists
// restricted to them, neither open, and without the daemon's network
// noNet, except for a list (which the service then refuses).
func TestCreatePolicy_DaytonasOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       networkSettings
		network bool
		want    netpolicy.Policy
	}{
		{"default", networkSettings{}, true, openNet},
		{"default without the daemon's network", networkSettings{}, false, noNet},
		{"block all", networkSettings{NetworkBlockAll: ptr(true)}, true, noNet},
		{"block all false", networkSettings{NetworkBlockAll: ptr(false)}, true, openNet},
		{"cidrs", networkSettings{NetworkAllowList: ptr(" 10.0.0.0/8, 203.0.113.7/32 ")}, true, restricted("10.0.0.0/8", "203.0.113.7/32")},
		{"domains", networkSettings{DomainAllowList: ptr("example.com,*.daytona.io")}, true, restricted("example.com", "*.daytona.io")},
		{"both", networkSettings{NetworkAllowList: ptr("10.0.0.0/8"), DomainAllowList: ptr("example.com")}, true, restricted("10.0.0.0/8", "example.com")},
		{"empty lists", networkSettings{NetworkAllowList: ptr(""), DomainAllowList: ptr("")}, true, openNet},
		{"block all false and a list", networkSettings{NetworkBlockAll: ptr(false), NetworkAllowList: ptr("10.0.0.0/8")}, true, restricted("10.0.0.0/8")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := createPolicy(tc.n, tc.network)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestNetworkLists_BadOnesAre400s: what is not Daytona's form is a 400
// naming the field.
func TestNetworkLists_BadOnesAre400s(t *testing.T) {
	for name, tc := range map[string]struct {
		n    networkSettings
		want string
	}{
		"not a CIDR":     {networkSettings{NetworkAllowList: ptr("10.0.0.0/8,nonsense")}, `networkAllowList: "nonsense" is not an IPv4 CIDR`},
		"a host name":    {networkSettings{NetworkAllowList: ptr("example.com")}, "not an IPv4 CIDR"},
		"no prefix":      {networkSettings{NetworkAllowList: ptr("10.0.0.1")}, "not an IPv4 CIDR"},
		"IPv6":           {networkSettings{NetworkAllowList: ptr("2001:db8::/32")}, "not an IPv4 CIDR"},
		"six CIDRs":      {networkSettings{NetworkAllowList: ptr("1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,5.0.0.0/8,6.0.0.0/8")}, "at most 5 CIDRs, got 6"},
		"block and list": {networkSettings{NetworkBlockAll: ptr(true), DomainAllowList: ptr("example.com")}, "set one or the other"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := createPolicy(tc.n, true)
			wantBadRequest(t, err, tc.want)
			_, _, err = updatedPolicy(openNet, tc.n)
			wantBadRequest(t, err, tc.want)
		})
	}
}

// TestCreatePolicy_ListsWithoutTheDaemonsNetworkAre400s: an allow list
// asks for network a daemon without --sandbox-network does not give.
func TestCreatePolicy_ListsWithoutTheDaemonsNetworkAre400s(t *testing.T) {
	_, err := createPolicy(networkSettings{NetworkAllowList: ptr("10.0.0.0/8"), DomainAllowList: ptr("example.com")}, false)
	wantBadRequest(t, err, "networkAllowList and domainAllowList: this daemon gives sandboxes no network")
	_, err = createPolicy(networkSettings{DomainAllowList: ptr("example.com")}, false)
	wantBadRequest(t, err, "domainAllowList: this daemon")
	// An empty list asks for nothing.
	if p, err := createPolicy(networkSettings{NetworkAllowList: ptr("")}, false); err != nil || p.Mode != netpolicy.ModeNone {
		t.Errorf("an empty list without the daemon's network: %+v, %v; want none", p, err)
	}
}

func wantBadRequest(t *testing.T, err error, want string) {
	t.Helper()
	if body := classify(err); body.StatusCode != http.StatusBadRequest || !strings.Contains(body.Message, want) {
		t.Errorf("got %d %q, want 400 with %q", body.StatusCode, body.Message, want)
	}
}

// TestUpdatedPolicy_FieldsReplaceWhatTheyName: each field given replaces
// what it names; networkBlockAll false clears the lists; a list unblocks;
// the deny list stays; a sandbox without network stays as it is when
// blocked.
func TestUpdatedPolicy_FieldsReplaceWhatTheyName(t *testing.T) {
	withDeny := netpolicy.Policy{Mode: netpolicy.ModeOpen, Deny: []string{"192.0.2.0/24"}}
	both := restricted("10.0.0.0/8", "example.com")
	for _, tc := range []struct {
		name   string
		cur    netpolicy.Policy
		n      networkSettings
		want   netpolicy.Policy
		change bool
	}{
		{"open, block", openNet, networkSettings{NetworkBlockAll: ptr(true)}, cutOff, true},
		{"blocked, unblock", cutOff, networkSettings{NetworkBlockAll: ptr(false)}, openNet, true},
		{"restricted, unblock clears the lists", both, networkSettings{NetworkBlockAll: ptr(false)}, openNet, true},
		{"open, a CIDR list", openNet, networkSettings{NetworkAllowList: ptr("10.0.0.0/8")}, restricted("10.0.0.0/8"), true},
		{"blocked, a domain list unblocks", cutOff, networkSettings{DomainAllowList: ptr("example.com")}, restricted("example.com"), true},
		{"both, the CIDRs replaced", both, networkSettings{NetworkAllowList: ptr("192.0.2.0/24")}, restricted("192.0.2.0/24", "example.com"), true},
		{"both, the domains cleared", both, networkSettings{DomainAllowList: ptr("")}, restricted("10.0.0.0/8"), true},
		{"CIDRs only, cleared: open", restricted("10.0.0.0/8"), networkSettings{NetworkAllowList: ptr("")}, openNet, true},
		{"blocked, a list cleared: still blocked", cutOff, networkSettings{NetworkAllowList: ptr("")}, cutOff, true},
		{"unblock with a list", cutOff, networkSettings{NetworkBlockAll: ptr(false), NetworkAllowList: ptr("10.0.0.0/8")}, restricted("10.0.0.0/8"), true},
		{"the deny list stays", withDeny, networkSettings{NetworkBlockAll: ptr(true)}, netpolicy.Policy{Mode: netpolicy.ModeRestricted, Deny: withDeny.Deny}, true},
		{"no network, block: no change", noNet, networkSettings{NetworkBlockAll: ptr(true)}, noNet, false},
		{"no network, a list cleared: no change", noNet, networkSettings{NetworkAllowList: ptr("")}, noNet, false},
		{"no network, unblock", noNet, networkSettings{NetworkBlockAll: ptr(false)}, openNet, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, change, err := updatedPolicy(tc.cur, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || change != tc.change {
				t.Errorf("change %v, want %v; policy (-want +got):\n%s", change, tc.change, diff)
			}
		})
	}
	if _, _, err := updatedPolicy(openNet, networkSettings{}); err == nil {
		t.Error("an update setting nothing: no error")
	}
}

// TestDTO_ReportsThePolicyInForce: networkBlockAll for none and for
// restricted to nothing; the lists as Daytona writes them.
func TestDTO_ReportsThePolicyInForce(t *testing.T) {
	for _, tc := range []struct {
		name              string
		p                 netpolicy.Policy
		block             bool
		cidrs, domainList string
	}{
		{"none", noNet, true, "", ""},
		{"zero", netpolicy.Policy{}, true, "", ""},
		{"open", openNet, false, "", ""},
		{"restricted to nothing", cutOff, true, "", ""},
		{"restricted", restricted("10.0.0.0/8", "203.0.113.7/32", "*.daytona.io", "example.com"), false, "10.0.0.0/8,203.0.113.7/32", "*.daytona.io,example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := dto(service.Sandbox{NetworkPolicy: tc.p}, "", false)
			if d.NetworkBlockAll != tc.block || d.NetworkAllowList != tc.cidrs || d.DomainAllowList != tc.domainList {
				t.Errorf("networkBlockAll %v, networkAllowList %q, domainAllowList %q; want %v, %q, %q",
					d.NetworkBlockAll, d.NetworkAllowList, d.DomainAllowList, tc.block, tc.cidrs, tc.domainList)
			}
		})
	}
}
