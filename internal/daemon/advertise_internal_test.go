package daemon

import (
	"net"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/internal/config"
)

// TestAdvertised: a node advertises the host it was configured with (a
// name stays a name) and the port it bound; a listener on every address
// advertises nothing, since another node dialing 0.0.0.0 reaches itself.
func TestAdvertised(t *testing.T) {
	bound := &net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 7070}
	for _, tc := range []struct {
		listen, want string
		wantErr      bool
	}{
		{listen: "127.0.0.1:7070", want: "127.0.0.1:7070"},
		{listen: "node1.example.com:7070", want: "node1.example.com:7070"},
		{listen: "node1.example.com:0", want: "node1.example.com:7070"},
		{listen: "10.0.0.5:7070", want: "10.0.0.5:7070"},
		{listen: "[fd00::5]:7070", want: "[fd00::5]:7070"},
		{listen: "0.0.0.0:7070", wantErr: true},
		{listen: "[::]:7070", wantErr: true},
		{listen: ":7070", wantErr: true},
		{listen: "no-port", wantErr: true},
	} {
		got, err := advertised(tc.listen, bound)
		if tc.wantErr {
			if err == nil {
				t.Errorf("advertised(%q) = %q, want an error", tc.listen, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("advertised(%q) = %q, %v; want %q", tc.listen, got, err, tc.want)
		}
	}
}

// TestReservedHosts_AdvertisedName: the name a node advertises to the
// others is its API's, so no sandbox may bind it as a custom domain, like
// the hosts of its listeners and --api-host names.
func TestReservedHosts_AdvertisedName(t *testing.T) {
	cfg := config.Daemon{
		Listen: "127.0.0.1:7070", HTTPSListen: "sbx1.example.net:443",
		AdvertiseURL: "https://SBX1-api.example.net:8443", APIHosts: []string{"api.example.net"},
	}
	got := reservedHosts(cfg, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7070})
	for _, want := range []string{"api.example.net", "127.0.0.1", "sbx1.example.net", "sbx1-api.example.net"} {
		if !slices.Contains(got, want) {
			t.Errorf("reservedHosts = %q, lacks %q", got, want)
		}
	}
}

// TestPreviewURL: beyond loopback with an HTTPS listener, preview URLs are
// https on its port (none for 443); otherwise plain HTTP on the listener's.
func TestPreviewURL(t *testing.T) {
	const host = "8080-sb-0123456789abcdef.sbx.example.com"
	for _, tc := range []struct {
		cfg  config.Daemon
		want string
	}{
		{config.Daemon{}, "http://" + host + ":7070"},
		{config.Daemon{HTTPSListen: "127.0.0.1:7444"}, "http://" + host + ":7070"},
		{config.Daemon{AllowPublic: true}, "http://" + host + ":7070"},
		{config.Daemon{AllowPublic: true, HTTPSListen: "sbx1.example.net:443"}, "https://" + host},
		{config.Daemon{AllowPublic: true, HTTPSListen: "sbx1.example.net:7444"}, "https://" + host + ":7444"},
	} {
		if got := previewURL(tc.cfg, "7070")(host); got != tc.want {
			t.Errorf("previewURL(%+v) = %q, want %q", tc.cfg, got, tc.want)
		}
	}
}

// TestLoopbackURL: what counts as a loopback URL for the advertise
// warning.
func TestLoopbackURL(t *testing.T) {
	for u, want := range map[string]bool{
		"http://127.0.0.1:7070":          true,
		"https://localhost":              true,
		"http://[::1]:7070":              true,
		"https://sbx1.example.net":       false,
		"https://10.0.0.1:2379":          false,
		"http://cluster-1.sandboxd.test": false,
	} {
		if got := loopbackURL(u); got != want {
			t.Errorf("loopbackURL(%q) = %v, want %v", u, got, want)
		}
	}
}
