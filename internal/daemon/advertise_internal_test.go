package daemon

import (
	"net"
	"testing"
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
