package auth

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
)

// CredentialHeaders are the request headers that carry a credential of
// this daemon, or of one of its facades, and nothing meant for a
// sandbox's own server: StripCredentials removes them all.
//
//   - X-API-Key: the E2B facade's API key (an API token, either form).
//   - X-Access-Token: an E2B sandbox's envd access token.
//   - E2B-Traffic-Access-Token: an E2B sandbox's traffic access token.
//   - X-Daytona-Preview-Token: a preview token (one port of one sandbox).
//
// Every header whose name starts with X-Sandboxd- goes too
// (credentialPrefix): X-Sandboxd-Token, the native API token for private
// preview ports, and X-Sandboxd-Node/-Node-Auth, a cluster node's request
// MAC, which verifies for a minute and must not be replayed from inside
// a sandbox.
var CredentialHeaders = []string{
	"X-Api-Key", "X-Access-Token", "E2b-Traffic-Access-Token", "X-Daytona-Preview-Token",
}

// CredentialCookie is the cookie in which a browser may carry an API
// token to private preview ports (the daemon reads it beside
// X-Sandboxd-Token). StripCredentials always removes it.
const CredentialCookie = "sandboxd_token"

// DashboardCookies are the dashboard's session cookies (package ui):
// __Host-sandboxd_ui, the one browsers keep over TLS and on loopback
// hosts, and sandboxd_ui, over plain HTTP elsewhere. A session id stands
// for the API token it was opened with, and the first is scoped to every
// path of the dashboard's host (a __Host- cookie's Path is /), where
// E2B's envd routes forward requests to a sandbox: StripCredentials
// always removes both.
var DashboardCookies = []string{"__Host-sandboxd_ui", "sandboxd_ui"}

// credentialPrefix starts the name of every header the daemon itself
// reads as a credential or writes between nodes.
const credentialPrefix = "X-Sandboxd-"

// StripCredentials removes from h, a request's headers on their way to a
// sandbox, every credential of this daemon: CredentialHeaders, every
// X-Sandboxd- header, CredentialCookie, DashboardCookies and every cookie named in cookies
// or holding an API token, and each Authorization header that carries an API token
// ([IsToken]) in any scheme, Basic included (as its user or its
// password). An Authorization that carries no API token (Basic
// credentials, a bearer token of another service) is the sandbox app's
// and passes: the app behind a preview URL may do its own
// authentication.
func StripCredentials(h http.Header, cookies ...string) {
	for _, k := range CredentialHeaders {
		h.Del(k)
	}
	for k := range h {
		if len(k) >= len(credentialPrefix) && strings.EqualFold(k[:len(credentialPrefix)], credentialPrefix) {
			delete(h, k)
		}
	}
	if vs := h.Values("Authorization"); len(vs) > 0 {
		kept := vs[:0:0]
		for _, v := range vs {
			if !authorizationHasToken(v) {
				kept = append(kept, v)
			}
		}
		h.Del("Authorization")
		for _, v := range kept {
			h.Add("Authorization", v)
		}
	}
	stripCookies(h, append(append(cookies[:len(cookies):len(cookies)], CredentialCookie), DashboardCookies...))
}

// IsToken reports whether s is an API token in either of its forms,
// sbx_… or its E2B form e2b_… ([E2BKey]), whether or not the token
// exists: a well-formed token is a secret wherever it goes. Surrounding
// space is ignored.
func IsToken(s string) bool {
	s = strings.TrimSpace(s)
	if _, err := Parse(s); err == nil {
		return true
	}
	_, err := FromE2BKey(s)
	return err == nil
}

// authorizationHasToken reports whether an Authorization value carries
// an API token: as any word after the scheme, or inside Basic
// credentials as the user or the password.
func authorizationHasToken(v string) bool {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
	if IsToken(scheme) { // no scheme at all: the bare token
		return true
	}
	for w := range strings.FieldsFuncSeq(rest, func(r rune) bool { return r == ' ' || r == ',' || r == '=' || r == '"' }) {
		if IsToken(w) {
			return true
		}
	}
	if strings.EqualFold(scheme, "Basic") {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
		if err != nil {
			raw, err = base64.RawStdEncoding.DecodeString(strings.TrimSpace(rest))
		}
		if err == nil {
			user, pass, _ := strings.Cut(string(raw), ":")
			return IsToken(user) || IsToken(pass)
		}
	}
	return false
}

// stripCookies removes from the Cookie headers every cookie whose name is
// in names or whose value is an API token, keeping the others in order.
func stripCookies(h http.Header, names []string) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			part = strings.TrimSpace(part)
			k, v, _ := strings.Cut(part, "=")
			if part != "" && !slices.Contains(names, strings.TrimSpace(k)) && !IsToken(strings.Trim(v, `"`)) {
				kept = append(kept, part)
			}
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}
