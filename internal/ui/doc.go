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
// trip (live.go). Those 4 are shared fairly (usage.go): one owner holds
// at most 2, freed slots go to the waiting owners in turn, a call has
// 5 s, and one call per sandbox and token serves all that token's
// requests (its tabs) and is kept 3 s; so an owner whose samples never
// come cannot stall another's. The logs pane follows
// GET /v1/sandboxes/{id}/logs through the API, so whichever part keeps
// the logs, and keeps the last 1000 lines in the browser: it opens with
// the last 200 lines (at most 1000 when asked; a reconnect from where it
// was, at most 1000 too); a session follows at most 8 at once. Both
// routes are GETs that answer the dashboard's own script only: they need
// the session's CSRF token in the X-CSRF-Token header (below).
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
// envd routes that forward to a sandbox: the HTTP paths that forward a
// request to a sandbox (the ingress's preview proxy, the E2B facade)
// remove it (auth.StripCredentials); the raw TCP path cannot (below).
// Over plain HTTP on other hosts, where browsers drop Secure cookies, it
// is sandboxd_ui, scoped to /ui/, under the rule below for several
// cookies. No token ever appears in a URL, a page or the browser's
// storage. Logging out deletes the session at once; an
// API answer of 401 (the token was revoked) deletes every session of that
// token. An open terminal ends with its session, whichever way it ends. The store holds at most 4096 sessions; sessions die with the
// daemon (log in again after a restart).
//
// Browsers scope cookies by host, not by port, and a raw TCP exposure
// (internal/ingress/tcp.go) passes bytes through untouched: a request a
// browser sends to an exposure on the dashboard's host carries the
// cookie to the sandbox. So the exposures listen elsewhere: --tcp-host
// defaults to 127.0.0.2 (config.DefaultTCPHost), which none of the
// dashboard's loopback names (localhost, 127.0.0.1, ::1) reaches, and the
// dashboard answers 421 over plain HTTP on the TCP host (and on localhost
// when that is 127.0.0.1 or ::1; Options.TCPHost), so no cookie is ever
// set where an exposure listens (test/e2e's
// TestDashboard_TCPExposureGetsNoCookie). Over TLS it serves the TCP
// host: the cookie is Secure, and a sandbox cannot complete TLS for the
// dashboard's name on an exposure's port.
// And a cookie that leaks all the same opens nothing elsewhere: a session
// answers only requests with the Host, the scheme (TLS or not) and the
// class of client address (loopback, private, public) of its login, and
// plain HTTP naming a loopback host is refused (403, login included)
// unless the client is on loopback, since no browser of another machine
// sends that. What remains: an operator who gives --tcp-host another
// name of the dashboard's own address (names are not resolved); a
// process on this machine that reads a cookie can use it, as it can any
// loopback credential it reads. A sandbox that reads
// one cannot: it reaches no loopback address of the host (its packets
// leave through its veth, where the kernel drops loopback destinations
// with route_localnet off, and the firewall rejects every host port for
// it: the SBXD-I chain of internal/netpolicy/firewall.go).
//
// Every state-changing request (a POST, the terminal's WebSocket) needs
// the session's CSRF token — a hidden form field, the X-CSRF-Token header,
// or for the WebSocket, which carries no header of the page's, the csrf
// query parameter — and a same-origin Origin header (or Sec-Fetch-Site)
// where the browser sends one. The live routes (GET /ui/usage, the logs
// stream) need the X-CSRF-Token header too: over plain HTTP a browser
// sends neither Origin nor Sec-Fetch-Site on a GET, so an <img> of a
// same-site page would pass the Origin check; it cannot send a header,
// and a cross-origin fetch with one needs a preflight the dashboard
// never answers. The login POST, which has no session yet, needs the
// same-origin check. The Origin check is what stops the dashboard's
// same-site neighbours, whose requests SameSite lets carry the cookie:
// on loopback, pages of other ports of the same host; under a domain,
// sibling hosts too (a sandbox's preview 8080-<id>.sandboxd.example.com
// beside a dashboard on sandboxd.example.com). A preview host under
// localhost (8080-<id>.localhost) is not one: under the public suffix
// list's default rule a single label such as localhost is a suffix, so
// each <name>.localhost is a site of its own, cross-site to a dashboard
// on localhost (Chromium sends its requests Sec-Fetch-Site: cross-site
// and no SameSite=Strict cookie). For the same reason, where the cookie is sandboxd_ui, a
// request carrying more than one (a sibling host can set one for the
// parent domain, to slip the browser a session of its own) is treated as
// having none; where it is __Host-sandboxd_ui, a sandboxd_ui cookie is
// never read.
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
