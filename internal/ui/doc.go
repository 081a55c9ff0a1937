// Package ui is the browser dashboard the daemon serves at /ui/ (and /,
// redirected there): sandboxes (create, destroy, live usage, logs, a
// terminal, files, ports), templates with their build logs, quotas with
// what each owner holds, warm pools and cluster nodes.
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
// facade's PTY WebSocket route (create-connect) in the same way, resized
// through its resize route (the page sends its element's size on open and
// whenever it changes; the sessions part passes it to the agent), and
// deleted when its WebSocket ends.
//
// # Live usage and logs
//
// A sandbox's page and the list show live CPU, memory, disk and network
// from the API's per-sandbox metrics (GET /v1/sandboxes/{id}/metrics),
// polled by the page's script through GET /ui/usage: at most 20 sandboxes
// a request (the list asks for the running rows in view, in turn when
// more are), one request per session at a time, and at most 4 metrics
// calls of the whole dashboard in flight, since each is an engine round
// trip (live.go). The logs pane follows GET /v1/sandboxes/{id}/logs
// through the API, so whichever part keeps the logs, and keeps the last
// 1000 lines in the browser; a session follows at most 8 at once.
//
// # Sessions, cookies and CSRF
//
// The login form takes an API token in a POST body, checks it as the API
// does, and opens a server-side session holding it in memory; the browser
// gets only a random session id, in a cookie that is HttpOnly,
// SameSite=Strict and valid for [SessionTTL] at most. Over TLS, and over
// plain HTTP on loopback hosts (localhost, 127.0.0.1, ::1: browsers treat
// them as secure contexts and keep Secure cookies from them; chromium
// does, TestDashboard checks it), it is __Host-sandboxd_ui: Secure, Path
// /, no Domain, so no other host can set, replace or shadow it. Its Path
// / takes it to every route of the dashboard's host, among them E2B's
// envd routes that forward to a sandbox, so whatever forwards a request
// to a sandbox removes it (auth.StripCredentials). Over plain HTTP on
// other hosts, where browsers drop Secure cookies, it is sandboxd_ui,
// scoped to /ui/, under the rule below for several cookies. No token ever appears in a URL, a page
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
// requests carry the cookie. For the same reason, where the cookie is
// sandboxd_ui, a request carrying more than one (a sibling host can set
// one for the parent domain, to slip the browser a session of its own) is
// treated as having none; where it is __Host-sandboxd_ui, a sandboxd_ui
// cookie is never read.
//
// # Untrusted content
//
// Everything a sandbox or a tenant controls — names, tags, images, file
// names, logs, terminal output — is hostile. Pages are html/template
// (contextual escaping); the terminal, the logs pane and the usage cells
// write what they get as text (textContent), never as HTML; downloads and build logs are attachments or text/plain
// with nosniff and a sandboxing CSP. Every answer carries a strict
// Content-Security-Policy (scripts, styles and connections from the
// dashboard's own origin only; no inline script, no framing). Every asset
// is embedded in the binary; nothing is fetched from elsewhere.
package ui
