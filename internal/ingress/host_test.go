package ingress

import "testing"

func TestParsePreviewHost(t *testing.T) {
	for host, want := range map[string]struct {
		id   string
		port int
		ok   bool
	}{
		"8080-sb-0123456789abcdef.localhost": {"sb-0123456789abcdef", 8080, true},
		"1-x.sandbox.example.com":            {"x", 1, true},
		"65536-sb-1.localhost":               {ok: false},
		"0-sb-1.localhost":                   {ok: false},
		"080-sb-1.localhost":                 {ok: false},
		"8080-.localhost":                    {ok: false},
		"8080-sb-1.other":                    {ok: false},
		"a.8080-sb-1.localhost":              {ok: false},
		"localhost":                          {ok: false},
		"+80-sb-1.localhost":                 {ok: false},
	} {
		domain := "localhost"
		if host == "1-x.sandbox.example.com" {
			domain = "sandbox.example.com"
		}
		id, port, ok := parsePreviewHost(host, domain)
		if ok != want.ok || ok && (id != want.id || port != want.port) {
			t.Errorf("parse %q: got %q %d %v, want %+v", host, id, port, ok, want)
		}
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"8080-SB-1.LocalHost.:7070": "8080-sb-1.localhost",
		"App.Example.com":           "app.example.com",
		"[::1]:80":                  "::1",
	} {
		if got := normalizeHost(in); got != want {
			t.Errorf("normalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzPreviewHost: PreviewHost and parsePreviewHost are inverse for every
// valid id and port, and parsing never accepts an invalid id or port.
func FuzzPreviewHost(f *testing.F) {
	f.Add("sb-0123456789abcdef", 8080, "8080-sb-x.localhost")
	f.Add("a", 1, "1-a.example.com")
	f.Fuzz(func(t *testing.T, id string, port int, host string) {
		if validLabel(id) && validPort(port) {
			gotID, gotPort, ok := parsePreviewHost(PreviewHost("localhost", id, port), "localhost")
			if !ok || gotID != id || gotPort != port {
				t.Fatalf("round trip %q %d: got %q %d %v", id, port, gotID, gotPort, ok)
			}
		}
		if gotID, gotPort, ok := parsePreviewHost(normalizeHost(host), "localhost"); ok && (!validLabel(gotID) || !validPort(gotPort)) {
			t.Fatalf("parse %q accepted id %q port %d", host, gotID, gotPort)
		}
	})
}
