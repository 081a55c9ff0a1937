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
	// 8080-<id>.localhost beside a dashboard on localhost) cannot set,
	// replace or shadow it, as it could a cookie for the parent domain.
	// Its Path is / (the prefix demands it), so it travels with every
	// request to the dashboard's host: what forwards one to a sandbox
	// removes it (auth.StripCredentials, auth.DashboardCookies).
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
	created   time.Time
	expires   time.Time
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

// open starts a session for token (already authenticated as p) and
// returns the cookie value.
func (s *sessions) open(token string, p auth.Principal) (string, *session, error) {
	id, csrf := randomHex(32), randomHex(32)
	now := s.now()
	sess := &session{token: token, principal: p, csrf: csrf, created: now, expires: now.Add(SessionTTL), ended: make(chan struct{})}
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
	if r.TLS != nil {
		return true
	}
	host := r.Host
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
