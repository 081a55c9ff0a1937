package naming

import (
	"strings"
	"testing"
)

func TestValidLabel(t *testing.T) {
	for s, want := range map[string]bool{
		"a":                            true,
		"sb-0123456789abcdef":          true,
		"0":                            true,
		"a-b-c":                        true,
		strings.Repeat("a", 63):        true,
		strings.Repeat("a", 64):        false,
		"":                             false,
		"-a":                           false,
		"a-":                           false,
		"A":                            false,
		"a_b":                          false,
		"a.b":                          false,
		"é":                            false,
		"a b":                          false,
		"sb-0123456789ABCDEF":          false,
		strings.Repeat("a-", 31):       false, // ends with '-'
		strings.Repeat("a-", 31) + "a": true,
	} {
		if got := ValidLabel(s); got != want {
			t.Errorf("ValidLabel(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestValidHostname(t *testing.T) {
	long := strings.Repeat(strings.Repeat("a", 63)+".", 4) // 256 bytes
	for s, want := range map[string]bool{
		"app.example.com":   true,
		"a.b":               true,
		"10.0.0.1":          true, // an IP literal is labels; callers reject IPs separately
		"localhost":         false,
		"":                  false,
		"App.example.com":   false,
		"app.example.com.":  false,
		"app..example.com":  false,
		"-app.example.com":  false,
		"app_x.example.com": false,
		long[:253]:          true, // four labels, 253 bytes
		long[:254]:          false,
		long:                false,
	} {
		if got := ValidHostname(s); got != want {
			t.Errorf("ValidHostname(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"8080-SB-1.LocalHost.:7070": "8080-sb-1.localhost",
		"App.Example.com":           "app.example.com",
		"app.example.com.":          "app.example.com",
		"[::1]:80":                  "::1",
		"localhost":                 "localhost",
		"":                          "",
	} {
		if got := NormalizeHost(in); got != want {
			t.Errorf("NormalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParsePreviewHost(t *testing.T) {
	type want struct {
		id   string
		port int
		ok   bool
	}
	for _, tc := range []struct {
		host, domain string
		want         want
	}{
		{"8080-sb-0123456789abcdef.localhost", "localhost", want{"sb-0123456789abcdef", 8080, true}},
		{"1-x.sandbox.example.com", "sandbox.example.com", want{"x", 1, true}},
		{"65535-x.localhost", "localhost", want{"x", 65535, true}},
		{"8080-SB-1.LocalHost.:7070", "localhost", want{"sb-1", 8080, true}},
		{"8080-sb-1.localhost", "LocalHost.", want{"sb-1", 8080, true}},
		{"49983-sb-1.localhost:443", "localhost", want{"sb-1", 49983, true}},
		{"65536-sb-1.localhost", "localhost", want{}},
		{"99999-sb-1.localhost", "localhost", want{}},
		{"123456-sb-1.localhost", "localhost", want{}},
		{"0-sb-1.localhost", "localhost", want{}},
		{"080-sb-1.localhost", "localhost", want{}},
		{"+80-sb-1.localhost", "localhost", want{}},
		{"-80-sb-1.localhost", "localhost", want{}},
		{"8o80-sb-1.localhost", "localhost", want{}},
		{"-sb-1.localhost", "localhost", want{}},
		{"8080.localhost", "localhost", want{}},
		{"8080-.localhost", "localhost", want{}},
		{"8080-sb-1-.localhost", "localhost", want{}},
		{"8080-sb_1.localhost", "localhost", want{}},
		{"8080-" + strings.Repeat("a", 64) + ".localhost", "localhost", want{}},
		{"8080-sb-1.other", "localhost", want{}},
		{"8080-sb-1.xlocalhost", "localhost", want{}},
		{"a.8080-sb-1.localhost", "localhost", want{}},
		{"localhost", "localhost", want{}},
		{".localhost", "localhost", want{}},
		{"8080-sb-1.", "", want{}},
		{"8080-sb-1..", "", want{}},
		{"", "localhost", want{}},
	} {
		id, port, ok := ParsePreviewHost(tc.host, tc.domain)
		if got := (want{id, port, ok}); got != tc.want {
			t.Errorf("ParsePreviewHost(%q, %q) = %+v, want %+v", tc.host, tc.domain, got, tc.want)
		}
	}
}

func TestPreviewHost(t *testing.T) {
	if got, want := PreviewHost("localhost", "sb-1", 8080), "8080-sb-1.localhost"; got != want {
		t.Errorf("PreviewHost = %q, want %q", got, want)
	}
}

// FuzzParsePreviewHost: ParsePreviewHost never panics; it accepts only a
// valid id and port, and what it accepts is exactly what PreviewHost
// formats (parse∘format and format∘parse are identities).
func FuzzParsePreviewHost(f *testing.F) {
	f.Add("8080-sb-0123456789abcdef.localhost", "localhost", "sb-0123456789abcdef", 8080)
	f.Add("1-a.example.com.:443", "Example.COM", "a", 1)
	f.Add("080-x.localhost", "localhost", "x-", 0)
	f.Add("65536-x.localhost", "localhost", "X", 65536)
	f.Add("[::1]:80", "", "", -1)
	f.Fuzz(func(t *testing.T, host, domain, id string, port int) {
		gotID, gotPort, ok := ParsePreviewHost(host, domain)
		if ok {
			if !ValidLabel(gotID) || !ValidPort(gotPort) {
				t.Fatalf("ParsePreviewHost(%q, %q) accepted id %q port %d", host, domain, gotID, gotPort)
			}
			if back := PreviewHost(NormalizeHost(domain), gotID, gotPort); back != NormalizeHost(host) {
				t.Fatalf("ParsePreviewHost(%q, %q) = %q %d, formats back as %q", host, domain, gotID, gotPort, back)
			}
		}
		d := NormalizeHost(domain)
		if ValidLabel(id) && ValidPort(port) && d != "" && NormalizeHost(d) == d {
			h := PreviewHost(d, id, port)
			gotID, gotPort, ok := ParsePreviewHost(h, d)
			if !ok || gotID != id || gotPort != port {
				t.Fatalf("round trip %q: got %q %d %v, want %q %d", h, gotID, gotPort, ok, id, port)
			}
		}
	})
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:5000": true, "127.0.0.1": true, "127.0.0.1:5000": true,
		"127.1.2.3:80": true, "::1": true, "[::1]:5000": true,
		"10.0.0.1:5000": false, "registry.example.com:5000": false, "registry.example.com": false, "": false,
	} {
		if got := IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
