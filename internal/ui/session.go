package ui

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// Session bounds. A session is short-lived on purpose: it holds the API
// token it was opened with, so its lifetime is how long a stolen cookie is
// worth anything.
const (
	// SessionTTL is a session's whole life, however active it is.
	SessionTTL = time.Hour
	// maxSessions bounds the store: a caller holding a valid token could
	// otherwise grow the daemon's memory one login at a time.
	maxSessions = 4096
	// maxSessionsPerToken bounds one token's share of the store: its
	// oldest session gives way to a new one, so one token cannot fill
	// the store and lock every other tenant out.
	maxSessionsPerToken = 16
	// cookieName is the session cookie wherever the browser keeps a
	// Secure cookie (secureContext): a __Host- cookie, which a browser
	// accepts only with Secure, Path=/ and no Domain, and so only from the
	// dashboard's own host. A page of a sibling host (a sandbox's preview
	// 8080-<id>.sandboxd.example.com beside a dashboard on
	// sandboxd.example.com) cannot set, replace or shadow it, as it could
	// a cookie for the parent domain. Its Path is / (the prefix demands
	// it), so it travels with every request to the dashboard's host, any
	// port: what forwards one to a sandbox over HTTP removes it
	// (auth.StripCredentials, auth.DashboardCookies); raw TCP exposures,
	// which cannot, listen on another address (config.DefaultTCPHost),
	// and a copy that leaks opens nothing elsewhere (binding).
	cookieName = "__Host-sandboxd_ui"
	// httpCookieName is the session cookie over plain HTTP on a host
	// that is not loopback, where browsers drop Secure cookies: Path /ui/,
	// and a request carrying more than one is treated as carrying none
	// (onlyCookie). Use TLS there.
	httpCookieName = "sandboxd_ui"
)

// errTooManySessions is a login refused because the store is full of
// sessions that have not expired.
var errTooManySessions = errors.New("too many dashboard sessions: try again later or log out elsewhere")

// session is one login: the token it was opened with (kept in memory
// only, never sent back to the browser), who it stands for, and its CSRF
// secret.
type session struct {
	token     string
	principal auth.Principal
	csrf      string
	// opened is what the session was opened with: it answers requests
	// that match it only (admits), so a cookie that leaked (to a raw TCP
	// exposure on the same host, whose port the browser does not tell
	// apart) is worth nothing sent to another Host, scheme, or from
	// another class of client address.
	opened  binding
	created time.Time
	expires time.Time
	// ended is closed when the session is dropped (logout, the token's
	// revocation, another session taking its place); with expires it
	// bounds what outlives a request, such as the terminal's WebSocket.
	ended     chan struct{}
	endedOnce sync.Once

	// usageBusy is set while a /ui/usage of this session runs (one at a
	// time); logFollows counts its open logs panes.
	usageBusy  atomic.Bool
	logFollows atomic.Int32
}

func (sess *session) end() { sess.endedOnce.Do(func() { close(sess.ended) }) }

// context returns parent ended also when the session ends or expires.
func (sess *session) context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(parent, sess.expires)
	go func() {
		select {
		case <-sess.ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// sessions is the server-side session store, keyed by the SHA-256 of the
// cookie's value (so the map's keys are not usable cookies). Deleting a
// session revokes its cookie at once.
type sessions struct {
	now func() time.Time

	mu sync.Mutex
	m  map[[32]byte]*session
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{now: now, m: map[[32]byte]*session{}}
}

// open starts a session for token (already authenticated as p), bound to
// b (the login request's bindingOf), and returns the cookie value.
func (s *sessions) open(token string, p auth.Principal, b binding) (string, *session, error) {
	id, csrf := randomHex(32), randomHex(32)
	now := s.now()
	sess := &session{token: token, principal: p, csrf: csrf, opened: b, created: now, expires: now.Add(SessionTTL), ended: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.capTokenLocked(token)
	if len(s.m) >= maxSessions {
		s.pruneLocked()
		if len(s.m) >= maxSessions {
			return "", nil, errTooManySessions
		}
	}
	s.m[sha256.Sum256([]byte(id))] = sess
	return id, sess, nil
}

// get returns the live session of cookie value id, or nil.
func (s *sessions) get(id string) *session {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.m[key]
	if sess == nil {
		return nil
	}
	if !s.now().Before(sess.expires) {
		delete(s.m, key)
		sess.end()
		return nil
	}
	return sess
}

// drop revokes the session of cookie value id.
func (s *sessions) drop(id string) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	if sess := s.m[key]; sess != nil {
		delete(s.m, key)
		sess.end()
	}
	s.mu.Unlock()
}

// dropToken revokes every session opened with token (the API refused it:
// revoked or gone).
func (s *sessions) dropToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, sess := range s.m {
		if sess.token == token {
			delete(s.m, k)
			sess.end()
		}
	}
}

// capTokenLocked drops the oldest sessions of token until one more fits
// within maxSessionsPerToken.
func (s *sessions) capTokenLocked(token string) {
	for {
		var oldest [32]byte
		n, found := 0, false
		for k, sess := range s.m {
			if sess.token != token {
				continue
			}
			n++
			if !found || sess.created.Before(s.m[oldest].created) {
				oldest, found = k, true
			}
		}
		if n < maxSessionsPerToken {
			return
		}
		s.m[oldest].end()
		delete(s.m, oldest)
	}
}

func (s *sessions) pruneLocked() {
	now := s.now()
	for k, sess := range s.m {
		if !now.Before(sess.expires) {
			delete(s.m, k)
			sess.end()
		}
	}
}

// checkCSRF reports whether got is the session's CSRF token, in constant
// time.
func (sess *session) checkCSRF(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}

// sessionCookie is the cookie carrying value: HttpOnly (no script reads
// it), SameSite=Strict (no other site's page sends it), gone with the
// session, and, where the browser keeps Secure cookies (secureContext),
// the __Host- cookie (Secure, Path /, host-only); elsewhere, over plain
// HTTP, httpCookieName scoped to /ui/.
func sessionCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	c := &http.Cookie{
		Name: cookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode,
	}
	if !secureContext(r) {
		c.Name, c.Path, c.Secure = httpCookieName, "/ui/", false
	}
	return c
}

// secureContext reports whether a browser keeps a Secure cookie that r's
// answer sets: r came over TLS, or over plain HTTP to a loopback host
// (localhost, 127.0.0.0/8, ::1), which browsers treat as a secure context
// (Chromium keeps Secure and __Host- cookies from http://localhost and
// http://127.0.0.1; TestDashboard checks it).
func secureContext(r *http.Request) bool {
	return r.TLS != nil || loopbackHost(r.Host)
}

// binding is what a session is bound to: the Host it was opened on, over
// TLS or not, and the class of the client's address. A browser sends the
// session's cookie to every port of the host it came from, a raw TCP
// exposure's among them when it shares the dashboard's address (see
// tcpHost in ui.go): a cookie read there and replayed with another Host,
// from another network, or over another scheme opens nothing.
type binding struct {
	host  string // r.Host, lower-cased, without a trailing dot
	tls   bool
	class addrClass
}

// addrClass is the kind of a client's address; a session opened from one
// kind answers only clients of the same kind.
type addrClass uint8

const (
	addrOther    addrClass = iota // not an IP address (a unix socket)
	addrLoopback                  // 127.0.0.0/8, ::1
	addrPrivate                   // RFC 1918, fc00::/7, link-local
	addrPublic                    // the rest
)

// classOf is the class of a request's RemoteAddr.
func classOf(remoteAddr string) addrClass {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return addrOther
	}
	switch a := ap.Addr().Unmap(); {
	case a.IsLoopback():
		return addrLoopback
	case a.IsPrivate(), a.IsLinkLocalUnicast():
		return addrPrivate
	default:
		return addrPublic
	}
}

// bindingOf is what r would open a session with.
func bindingOf(r *http.Request) binding {
	return binding{host: normalHost(r.Host), tls: r.TLS != nil, class: classOf(r.RemoteAddr)}
}

// admits reports whether r may use a session bound to b: the same Host,
// scheme and client address class, and, for a session of plain HTTP on
// a loopback host, a loopback client (loopbackOnly: a browser treats
// such a host as a secure context, so it carries the __Host- cookie, but
// only a client on this machine reaches a loopback host honestly).
func (b binding) admits(r *http.Request) bool {
	return bindingOf(r) == b && !loopbackOnly(r)
}

// loopbackOnly reports whether r must be refused for coming from another
// machine: plain HTTP that names a loopback host (Host: localhost,
// 127.0.0.1, [::1]) from a client address that is not loopback. No
// browser of another machine sends that; a replayed cookie does.
func loopbackOnly(r *http.Request) bool {
	return r.TLS == nil && loopbackHost(r.Host) && classOf(r.RemoteAddr) != addrLoopback
}

// normalHost is a Host header lower-cased, without a trailing dot.
func normalHost(host string) string {
	host = strings.ToLower(host)
	if h, p, err := net.SplitHostPort(host); err == nil {
		return net.JoinHostPort(strings.TrimSuffix(h, "."), p)
	}
	return strings.TrimSuffix(host, ".")
}

// loopbackHost reports whether host (a Host header, with or without a
// port) names loopback: localhost, 127.0.0.0/8 or ::1.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
