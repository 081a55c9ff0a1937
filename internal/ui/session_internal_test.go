package ui

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestSessions_ExpireAfterTTL(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	s := newSessions(c.now)
	id, _, err := s.open("sbx_tok", auth.Principal{Role: auth.RoleUser, Owner: "a"}, binding{})
	if err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(SessionTTL - time.Second)
	if s.get(id) == nil {
		t.Fatal("session gone before its TTL")
	}
	c.t = c.t.Add(time.Second)
	if s.get(id) != nil {
		t.Fatal("session alive at its TTL")
	}
}

func TestSessions_DropRevokes(t *testing.T) {
	s := newSessions(time.Now)
	a, _, _ := s.open("sbx_a", auth.Principal{}, binding{})
	b, _, _ := s.open("sbx_b", auth.Principal{}, binding{})
	a2, _, _ := s.open("sbx_a", auth.Principal{}, binding{})
	s.drop(b)
	if s.get(b) != nil {
		t.Fatal("a dropped session is alive")
	}
	s.dropToken("sbx_a")
	if s.get(a) != nil || s.get(a2) != nil {
		t.Fatal("sessions of a dropped token are alive")
	}
	if s.get("") != nil || s.get("forged") != nil {
		t.Fatal("an unknown id opened a session")
	}
}

func TestSessions_OneTokenCannotFillTheStore(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	s := newSessions(c.now)
	var first string
	for i := range maxSessions + 10 {
		c.t = c.t.Add(time.Millisecond)
		id, _, err := s.open("sbx_greedy", auth.Principal{}, binding{})
		if err != nil {
			t.Fatalf("login %d of one token: %v", i, err)
		}
		if i == 0 {
			first = id
		}
	}
	if n := len(s.m); n != maxSessionsPerToken {
		t.Fatalf("one token holds %d sessions, want %d", n, maxSessionsPerToken)
	}
	if s.get(first) != nil {
		t.Fatal("the token's oldest session survived")
	}
	if _, _, err := s.open("sbx_other", auth.Principal{}, binding{}); err != nil {
		t.Fatalf("another token's login: %v", err)
	}
}

func TestSessions_FullStoreRefuses(t *testing.T) {
	s := newSessions(time.Now)
	for i := range maxSessions {
		if _, _, err := s.open(randomHex(8), auth.Principal{}, binding{}); err != nil {
			t.Fatalf("login %d: %v", i, err)
		}
	}
	if _, _, err := s.open("sbx_late", auth.Principal{}, binding{}); err != errTooManySessions {
		t.Fatalf("login past the bound: %v, want errTooManySessions", err)
	}
}

func TestCheckCSRF(t *testing.T) {
	sess := &session{csrf: randomHex(32)}
	for _, got := range []string{"", "x", sess.csrf[:63], sess.csrf + "0"} {
		if sess.checkCSRF(got) {
			t.Errorf("checkCSRF(%q) = true", got)
		}
	}
	if !sess.checkCSRF(sess.csrf) {
		t.Error("the session's own token refused")
	}
}

func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		origin, site string
		want         bool
	}{
		{"http://127.0.0.1:7070", "", true},
		{"https://127.0.0.1:7070", "", true},
		{"http://evil.example", "", false},
		{"http://127.0.0.1:7071", "", false},
		{"null", "", false},
		{"", "same-origin", true},
		{"", "cross-site", false},
		{"", "same-site", false},
		{"", "", true},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:7070/ui/logout", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if got := sameOrigin(r); got != tc.want {
			t.Errorf("sameOrigin(Origin %q, Sec-Fetch-Site %q) = %v, want %v", tc.origin, tc.site, got, tc.want)
		}
	}
}

func TestSessionCookie_Flags(t *testing.T) {
	for _, u := range []string{"https://sandboxd.example/ui/login", "http://localhost:7070/ui/login", "http://127.0.0.1:7070/ui/login", "http://[::1]:7070/ui/login"} {
		r := httptest.NewRequest(http.MethodPost, u, nil)
		if strings.HasPrefix(u, "https:") {
			r.TLS = &tls.ConnectionState{}
		}
		c := sessionCookie(r, "v", 60)
		if c.Name != "__Host-sandboxd_ui" || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" {
			t.Errorf("cookie at %s: %+v; want __Host-sandboxd_ui, HttpOnly, Secure, SameSite=Strict, Path /, no Domain", u, c)
		}
	}
	for _, u := range []string{"http://sandboxd.example/ui/login", "http://10.0.0.5:7070/ui/login", "http://localhost.example/ui/login"} {
		r := httptest.NewRequest(http.MethodPost, u, nil)
		if c := sessionCookie(r, "v", 60); c.Name != "sandboxd_ui" || c.Secure || c.Path != "/ui/" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Errorf("cookie over plain HTTP at %s: %+v; want sandboxd_ui, not Secure (the browser would drop it), Path /ui/", u, c)
		}
	}
}

func TestOnlyCookie_SeveralAreNone(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "http://sandboxd.example/ui/", nil)
	if _, ok := onlyCookie(r); ok {
		t.Fatal("a request without a cookie has one")
	}
	r.AddCookie(&http.Cookie{Name: httpCookieName, Value: "mine"})
	if c, ok := onlyCookie(r); !ok || c.Value != "mine" {
		t.Fatalf("one cookie: %v, %v", c, ok)
	}
	r.AddCookie(&http.Cookie{Name: httpCookieName, Value: "tossed"})
	if _, ok := onlyCookie(r); ok {
		t.Fatal("two session cookies (one tossed by a sibling host) were trusted")
	}
}

// TestOnlyCookie_SecureContextReadsOnlyTheHostCookie: on localhost a
// cookie of the plain name, which a sibling host can set for the parent
// domain, neither stands for the session nor shadows the __Host- one.
func TestOnlyCookie_SecureContextReadsOnlyTheHostCookie(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "http://localhost:7070/ui/", nil)
	r.AddCookie(&http.Cookie{Name: httpCookieName, Value: "planted"})
	if c, ok := onlyCookie(r); ok {
		t.Fatalf("a sandboxd_ui cookie on localhost was read as the session: %v", c)
	}
	r.AddCookie(&http.Cookie{Name: cookieName, Value: "mine"})
	r.AddCookie(&http.Cookie{Name: httpCookieName, Value: "planted2"})
	if c, ok := onlyCookie(r); !ok || c.Value != "mine" {
		t.Fatalf("beside planted cookies the session is %v, %v; want mine", c, ok)
	}
}

func TestSessions_EndingCancelsTheSessionsContext(t *testing.T) {
	s := newSessions(time.Now)
	id, sess, _ := s.open("sbx_a", auth.Principal{}, binding{})
	ctx, cancel := sess.context(t.Context())
	defer cancel()
	s.drop(id)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a dropped session's context is still live")
	}
	_, sess2, _ := s.open("sbx_b", auth.Principal{}, binding{})
	ctx2, cancel2 := sess2.context(t.Context())
	defer cancel2()
	s.dropToken("sbx_b")
	select {
	case <-ctx2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a revoked token's session context is still live")
	}
}
