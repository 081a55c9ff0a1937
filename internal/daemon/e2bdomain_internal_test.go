package daemon

import (
	"net"
	"testing"

	"github.com/sandboxd/sandboxd/internal/config"
)

// TestE2BDomain: in local mode E2B's create reports localhost with the
// port its names are served on, so getHost(port) opens in the default
// setup (it was "localhost", port 80, where nothing listens).
func TestE2BDomain(t *testing.T) {
	ln := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7070}
	for _, tc := range []struct {
		name string
		cfg  config.Daemon
		want string
	}{
		{"default", config.Daemon{Domain: "localhost"}, "localhost:7070"},
		{"https", config.Daemon{Domain: "localhost", HTTPSListen: "127.0.0.1:7443"}, "localhost:7443"},
		{"https on 443", config.Daemon{Domain: "localhost", HTTPSListen: "127.0.0.1:443"}, "localhost"},
		{"a real domain", config.Daemon{Domain: "sbx.example.com"}, "sbx.example.com"},
	} {
		if got := e2bDomain(tc.cfg, ln); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := e2bDomain(config.Daemon{Domain: "localhost"}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}); got != "localhost" {
		t.Errorf("on port 80: %q, want localhost", got)
	}
}
