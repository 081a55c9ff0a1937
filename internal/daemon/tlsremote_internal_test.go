package daemon

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/cluster"
)

// fakeDirectory is a cluster directory in memory.
type fakeDirectory struct {
	hostnames  map[string]string
	placements map[string]cluster.Placement
	nodes      []cluster.NodeInfo
}

func (f fakeDirectory) HostnameTarget(host string) (string, bool) {
	id, ok := f.hostnames[host]
	return id, ok
}

func (f fakeDirectory) Placement(id string) (cluster.Placement, bool) {
	p, ok := f.placements[id]
	return p, ok
}

func (f fakeDirectory) Nodes() []cluster.NodeInfo { return f.nodes }

var _ tlsDirectory = (*cluster.Node)(nil)

func TestTLSRemote(t *testing.T) {
	dir := fakeDirectory{
		hostnames: map[string]string{"app.example.com": "sb-b", "mine.example.com": "sb-a"},
		placements: map[string]cluster.Placement{
			"sb-a":       {ID: "sb-a", Node: "a", State: cluster.StateRunning},
			"sb-b":       {ID: "sb-b", Node: "b", State: cluster.StateRunning},
			"sb-c":       {ID: "sb-c", Node: "c", State: cluster.StateRunning},
			"sb-gone":    {ID: "sb-gone", Node: "d", State: cluster.StateRunning},
			"sb-lost":    {ID: "sb-lost", Node: "b", State: cluster.StateLost},
			"sb-deleted": {ID: "sb-deleted", Node: "b", State: cluster.StateDeleted},
		},
		nodes: []cluster.NodeInfo{
			{ID: "a", TLSAddr: "10.0.0.1:7443"},
			{ID: "b", TLSAddr: "10.0.0.2:7443"},
			{ID: "c"}, // no SNI listener
		},
	}
	remote := tlsRemote(dir, "a", "sandboxes.example.com")
	for name, tc := range map[string]struct {
		serverName string
		want       string
	}{
		"preview host of another node":   {"8443-sb-b.sandboxes.example.com", "10.0.0.2:7443"},
		"any case, a trailing dot":       {"8443-SB-B.Sandboxes.Example.com.", "10.0.0.2:7443"},
		"custom domain":                  {"app.example.com", "10.0.0.2:7443"},
		"this node's":                    {"8443-sb-a.sandboxes.example.com", ""},
		"this node's custom domain":      {"mine.example.com", ""},
		"node without a TLS listener":    {"8443-sb-c.sandboxes.example.com", ""},
		"node gone":                      {"8443-sb-gone.sandboxes.example.com", ""},
		"lost":                           {"8443-sb-lost.sandboxes.example.com", ""},
		"deleted":                        {"8443-sb-deleted.sandboxes.example.com", ""},
		"unknown sandbox":                {"8443-sb-x.sandboxes.example.com", ""},
		"unbound hostname":               {"other.example.com", ""},
		"preview host of another domain": {"8443-sb-b.example.org", ""},
		"no server name":                 {"", ""},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := remote(tc.serverName)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("remote(%q) = %q, %v; want %q, %v", tc.serverName, got, ok, tc.want, tc.want != "")
			}
		})
	}
}

// TestServesElsewhere: the HTTPS listener's local CA may issue for a
// preview host of a sandbox placed on another live node (its requests are
// forwarded there) that the node would serve: any port of a running E2B
// sandbox, an http port another sandbox exposes. Never for another port
// (it used to admit every port of every sandbox placed elsewhere), one
// of a sandbox being (re)created, lost, deleted or unknown, one whose
// node is gone, or a name of no preview shape; and it names the owner.
func TestServesElsewhere(t *testing.T) {
	dir := fakeDirectory{
		placements: map[string]cluster.Placement{
			"sb-a":       {ID: "sb-a", Node: "a", State: cluster.StateRunning, PortHosts: true},
			"sb-b":       {ID: "sb-b", Node: "b", State: cluster.StateRunning, PortHosts: true, Owner: "alice"},
			"sb-native":  {ID: "sb-native", Node: "b", State: cluster.StateRunning, Owner: "bob", Ports: []cluster.PortIntent{{Port: 3000, Protocol: "http"}, {Port: 5432, Protocol: "tcp"}}},
			"sb-new":     {ID: "sb-new", Node: "b", State: cluster.StateCreating, PortHosts: true},
			"sb-gone":    {ID: "sb-gone", Node: "d", State: cluster.StateRunning},
			"sb-lost":    {ID: "sb-lost", Node: "b", State: cluster.StateLost},
			"sb-deleted": {ID: "sb-deleted", Node: "b", State: cluster.StateDeleted},
		},
		nodes: []cluster.NodeInfo{{ID: "a"}, {ID: "b"}},
	}
	for host, want := range map[string]bool{
		"8080-sb-b.sandboxes.example.com":       true,
		"1-sb-b.sandboxes.example.com":          true,
		"3000-sb-native.sandboxes.example.com":  true,  // exposed over http
		"8080-sb-native.sandboxes.example.com":  false, // not exposed; not an E2B sandbox
		"5432-sb-native.sandboxes.example.com":  false, // exposed over tcp: no preview host
		"8080-sb-new.sandboxes.example.com":     false, // being (re)created: its node serves nothing yet
		"8080-sb-a.sandboxes.example.com":       false, // this node's: the local checks say
		"8080-sb-gone.sandboxes.example.com":    false,
		"8080-sb-lost.sandboxes.example.com":    false,
		"8080-sb-deleted.sandboxes.example.com": false,
		"8080-sb-none.sandboxes.example.com":    false,
		"sb-b.sandboxes.example.com":            false,
		"8080-sb-b.elsewhere.example.com":       false,
	} {
		if _, got := servesElsewhere(dir, "a", "sandboxes.example.com", host); got != want {
			t.Errorf("%s: %v, want %v", host, got, want)
		}
	}
	if owner, _ := servesElsewhere(dir, "a", "sandboxes.example.com", "3000-sb-native.sandboxes.example.com"); owner != "bob" {
		t.Errorf("owner %q, want the placement's, bob", owner)
	}
}
