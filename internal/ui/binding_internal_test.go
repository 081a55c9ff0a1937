package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// loginAt logs in to h through its login form at base, from remote, and
// returns the session cookie it set (nil when none).
func loginAt(t *testing.T, h http.Handler, base, remote string) (*http.Cookie, int) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, base+"/ui/login", strings.NewReader(url.Values{"token": {"sbx_admintoken"}}.Encode()))
	r.RemoteAddr = remote
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", base)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	for _, c := range w.Result().Cookies() {
		if strings.HasSuffix(c.Name, "sandboxd_ui") && c.Value != "" {
			return c, w.Code
		}
	}
	return nil, w.Code
}

func adminDashboard(t *testing.T, tcpHost string) *Handler {
	t.Helper()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"items": []}`)
	})
	h, err := New(Options{API: api, APIHost: "127.0.0.1:1", TCPHost: tcpHost, Authenticate: func(context.Context, string) (auth.Principal, error) {
		return auth.Principal{Role: auth.RoleAdmin, Owner: "admin"}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestSession_StolenCookieReplayed: an admin's session cookie, opened at
// http://localhost:7070 from a browser on this machine, leaked (a raw TCP
// exposure on the same host reads it: browsers do not scope cookies by
// port). Replayed from another machine with Host: localhost, with another
// Host, or over TLS, it opens nothing; a login from another machine that
// names a loopback host is refused. The browser's own requests go on.
func TestSession_StolenCookieReplayed(t *testing.T) {
	h := adminDashboard(t, "127.0.0.2")
	const base = "http://localhost:7070"
	c, code := loginAt(t, h, base, "127.0.0.1:50000")
	if c == nil || c.Name != cookieName {
		t.Fatalf("login from this machine: %d, cookie %+v", code, c)
	}
	page := func(target, remote string, tls bool) int {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.RemoteAddr = remote
		if !tls {
			r.TLS = nil
		}
		r.AddCookie(&http.Cookie{Name: cookieName, Value: c.Value})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if got := page(base+"/ui/tokens", "127.0.0.1:50001", false); got != http.StatusOK {
		t.Fatalf("the browser's own request: %d, want 200", got)
	}
	for _, tc := range []struct {
		what, target, remote string
		tls                  bool
	}{
		{"from another machine, Host: localhost", base + "/ui/tokens", "203.0.113.7:40404", false},
		{"from the LAN, Host: localhost", base + "/ui/tokens", "192.168.1.9:40404", false},
		{"from this machine, Host: 127.0.0.1", "http://127.0.0.1:7070/ui/tokens", "127.0.0.1:50002", false},
		{"from this machine, another port", "http://localhost:40001/ui/tokens", "127.0.0.1:50003", false},
		{"from another machine over TLS, Host: localhost", "https://localhost:7070/ui/tokens", "203.0.113.7:40404", true},
		{"from another machine, Host: a name", "http://sandboxd.example.com/ui/tokens", "203.0.113.7:40404", false},
	} {
		if got := page(tc.target, tc.remote, tc.tls); got == http.StatusOK {
			t.Errorf("the stolen cookie replayed %s: %d, want no page", tc.what, got)
		}
	}
	if got := page(base+"/ui/tokens", "127.0.0.1:50004", false); got != http.StatusOK {
		t.Fatalf("the browser's own request after the replays: %d, want 200 (a thief cannot log its owner out)", got)
	}
	if c, code := loginAt(t, h, base, "203.0.113.7:40404"); c != nil || code != http.StatusForbidden {
		t.Fatalf("a login at %s from another machine: %d, cookie %+v; want 403 and none", base, code, c)
	}
}

// TestSession_BoundToItsClientClass: a session opened from a private
// address over a LAN name answers that class only.
func TestSession_BoundToItsClientClass(t *testing.T) {
	h := adminDashboard(t, "127.0.0.2")
	const base = "http://sandboxd.lan:7070"
	c, code := loginAt(t, h, base, "192.168.1.9:50000")
	if c == nil {
		t.Fatalf("login from the LAN: %d, no cookie", code)
	}
	for remote, want := range map[string]int{"192.168.1.10:1": http.StatusOK, "203.0.113.7:1": http.StatusSeeOther, "127.0.0.1:1": http.StatusSeeOther} {
		r := httptest.NewRequest(http.MethodGet, base+"/ui/tokens", nil)
		r.RemoteAddr = remote
		r.AddCookie(c)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("the LAN session from %s: %d, want %d", remote, w.Code, want)
		}
	}
}

// TestDashboard_NotServedOnTheTCPHost: the dashboard answers no plain
// HTTP request whose Host is the one raw TCP exposures listen on (or
// localhost for 127.0.0.1 and ::1), so no session cookie is ever set
// where a browser would hand it to an exposure; over TLS it does (the
// cookie is Secure, and an exposure's port cannot complete TLS for the
// name).
func TestDashboard_NotServedOnTheTCPHost(t *testing.T) {
	for _, tc := range []struct {
		tcpHost, base string
		served        bool
	}{
		{"127.0.0.2", "http://127.0.0.2:7070", false},
		{"127.0.0.2", "http://localhost:7070", true},
		{"127.0.0.2", "http://127.0.0.1:7070", true},
		{"127.0.0.1", "http://localhost:7070", false},
		{"127.0.0.1", "http://127.0.0.1:7070", false},
		{"127.0.0.1", "http://[::1]:7070", true},
		{"localhost", "http://[::1]:7070", false},
		{"sbx1.example.net", "http://SBX1.example.net.:7070", false},
		{"sbx1.example.net", "http://api.example.net:7070", true},
		{"sbx1.example.net", "https://sbx1.example.net", true}, // Secure: never sent to a raw port without TLS
	} {
		h := adminDashboard(t, tc.tcpHost)
		c, code := loginAt(t, h, tc.base, "127.0.0.1:50000")
		if served := c != nil; served != tc.served || !tc.served && code != http.StatusMisdirectedRequest {
			t.Errorf("--tcp-host %s, login at %s: %d, cookie %v; want served=%v", tc.tcpHost, tc.base, code, c != nil, tc.served)
		}
	}
}
