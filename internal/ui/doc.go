// Package ui is the browser dashboard the daemon serves at /ui/ (and /,
// redirected there): sandboxes (create, destroy, a terminal, files,
// ports), templates with their build logs, and warm pools.
//
// # A client of the API, in process
//
// The dashboard holds no rule of its own: every page is one or more calls
// of the native API (through the Go SDK, sdk/go) made with the session's
// token over an in-memory connection to the daemon's own handler, so the
// API decides what a caller may see or do (a user token sees only its
// owner's sandboxes; another owner's are 404) and, in a cluster, its
// forwarding reaches the sandbox's node. The terminal is a terminal of
// the sessions part (package sessions) reached through the Daytona
// facade's PTY WebSocket route (create-connect) in the same way, and
// deleted when its WebSocket ends.
//
// # Sessions, cookies and CSRF
//
// The login form takes an API token in a POST body, checks it as the API
// does, and opens a server-side session holding it in memory; the browser
// gets only a random session id, in a cookie that is HttpOnly,
// SameSite=Strict, Secure when served over TLS, scoped to /ui/, and
// valid for [SessionTTL] at most. No token ever appears in a URL, a page
// or the browser's storage. Logging out deletes the session at once; an
// API answer of 401 (the token was revoked) deletes every session of that
// token. An open terminal ends with its session, whichever way it ends. The store holds at most 4096 sessions; sessions die with the
// daemon (log in again after a restart).
//
// Every state-changing request (a POST, the terminal's WebSocket) needs
// the session's CSRF token — a hidden form field, the X-CSRF-Token header,
// or for the WebSocket, which carries no header of the page's, the csrf
// query parameter — and a same-origin Origin header (or Sec-Fetch-Site)
// where the browser sends one. The login POST, which has no session yet,
// needs the same-origin check. The Origin check is what stops a sandbox's
// own pages: a preview host such as 8080-<id>.localhost is the same site as
// a dashboard opened on localhost, so SameSite alone would let its
// requests carry the cookie. For the same reason a request carrying more
// than one session cookie (a sibling host can set one for the parent
// domain, to slip the browser a session of its own) is treated as having
// none.
//
// # Untrusted content
//
// Everything a sandbox or a tenant controls — names, tags, images, file
// names, logs, terminal output — is hostile. Pages are html/template
// (contextual escaping); the terminal writes output as text (textContent),
// never as HTML; downloads and build logs are attachments or text/plain
// with nosniff and a sandboxing CSP. Every answer carries a strict
// Content-Security-Policy (scripts, styles and connections from the
// dashboard's own origin only; no inline script, no framing). Every asset
// is embedded in the binary; nothing is fetched from elsewhere.
package ui
