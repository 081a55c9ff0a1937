package daemon

import "testing"

// The dashboard answers on the daemon's own names only: a name someone
// pointed at the daemon (a custom domain not yet verified) gets no login
// page under it.
func TestAPIHostOf(t *testing.T) {
	on := apiHostOf([]string{"sandboxd.example.com", "0.0.0.0"})
	for host, want := range map[string]bool{
		"127.0.0.1:7070":            true,
		"[::1]:7070":                true,
		"localhost:7070":            true,
		"LOCALHOST":                 true,
		"192.0.2.7":                 true,
		"sandboxd.example.com":      true,
		"SandboxD.Example.com:443":  true,
		"bank.example.test":         false,
		"8080-sb-1.localhost:7070":  false,
		"sandboxd.example.com.evil": false,
		"":                          false,
	} {
		if got := on(host); got != want {
			t.Errorf("on API host %q = %v, want %v", host, got, want)
		}
	}
}
