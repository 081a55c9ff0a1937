// Package e2b is sandboxd's E2B facade: the HTTP edge that lets the
// official E2B SDKs (`e2b`, `@e2b/code-interpreter`, Python `e2b`) drive
// sandboxd unchanged, with E2B_API_URL and E2B_SANDBOX_URL both set to the
// daemon's base URL. docs/design.md (section 7) says how it maps onto the
// service; test/compat/e2b runs the real SDKs against it.
//
// # Routing
//
// [Facade.Match] claims two kinds of request on the daemon's one listener:
//
//   - envd traffic: any request carrying E2b-Sandbox-Id (the port in
//     E2b-Sandbox-Port, default 49983), or whose Host is
//     <port>-<sandbox-id>.<Options.Domain> with port 49983 or 49999 (other
//     preview ports belong to the ingress, whatever the path or headers:
//     /sandboxes on 8080-<id> is the sandbox app's; the ingress hands a
//     preview host whose port it has not exposed to [Facade.ServePort],
//     which serves it for a running E2B sandbox, as E2B serves any port by
//     host, and declines anything else). Port 49983 is reverse-proxied
//     unchanged to the sandbox's agent, which speaks envd's wire natively
//     (Connect JSON services, /files, /health); every other port is
//     proxied to that port inside the sandbox through service.DialPort
//     (49999 is the code-interpreter server). Responses are flushed per
//     write, so Connect streams and NDJSON arrive message by message.
//   - the control plane: /sandboxes…, /v2/sandboxes… and every other
//     top-level path of E2B's API (controlPrefixes), answered here with
//     E2B's JSON shapes and its error body {"code": <status>, "message": …}
//     on every failure, the status from the table every edge shares
//     (package apierr) unless the facade raised the error itself (the SDKs
//     read `code` from the body: kill() is false
//     only on code 404, pause() only on 409). What E2B has and the facade
//     does not (template builds, logs, teams, …:
//     unsupported.go) is 501 naming it, never 404, which the SDK would read
//     as "sandbox not found".
//
// The sandbox is named by its id only, never by a name (envd requests
// carry no API key to scope a name by, and an answer that differed for
// another tenant's name would tell it exists). An envd request for a
// sandbox that does not exist or is not running, or that names it any
// other way than by id, is 502, which the SDKs read as "sandbox not
// running" (isRunning() false, SandboxNotFoundError on a command), with
// E2B's edge body {"sandboxId", "message": "The sandbox was not found",
// "code": 502} (code "unavailable", Connect's, on the Connect paths).
//
// # Authentication
//
// The control plane takes X-API-KEY: one of our API tokens, or its
// `e2b_`-prefixed hex form (auth.E2BKey) that the Python SDK's key check
// accepts. A user token sees only its owner's sandboxes. envd traffic
// carries no API key (the SDKs never send one there); it is authorized, as
// on E2B, by per-sandbox tokens:
//
//   - Port 49983 (envd) of a secure sandbox wants its envd access token in
//     X-Access-Token on every request but GET /health, else 401. A sandbox
//     is secure unless it was created through v1 with `secure: false`. v2
//     has no `secure` field because E2B secures every v2 sandbox ("all
//     system communication with the sandbox is always secured"), so v2
//     sandboxes are secure; so are sandboxes made through the native API.
//   - Port 49999 (the code interpreter) of a secure sandbox wants the
//     envd access token in X-Access-Token to run code (401 without):
//     @e2b/code-interpreter 2.8.0 sends it with runCode. Its context calls
//     carry none, so GET /health, POST and GET /contexts, DELETE
//     /contexts/{id} and POST /contexts/{id}/restart pass without one
//     (interpreterOpenRequest: exact method and path; none runs code); a
//     token that is sent must be right.
//   - Other ports are public, guarded only by the unguessable sandbox id,
//     as on E2B, whose SDKs rely on it, unless the sandbox was created
//     with network.allowPublicTraffic=false: then they (49999 included)
//     want its traffic access token in E2B-Traffic-Access-Token, else 403
//     as on E2B. Their
//     requests keep the caller's Host, or, when the sandbox was created
//     with network.maskRequestHost, go out with that host, ${PORT}
//     replaced by the port (a mask that makes no valid host[:port] is
//     502).
//   - Both tokens are HMAC-SHA256(Options.AccessTokenKey, label || sandbox
//     id), hex, with a distinct label per kind: derived, never stored, and
//     recomputable after a restart with the same key. They are returned
//     (envdAccessToken, trafficAccessToken) by create and connect, and the
//     envd token by GET /sandboxes/{id}: only to callers whose API token
//     can see the sandbox. Tokens are compared in constant time and removed
//     before forwarding (the agent gets its own token), with every other
//     credential of the daemon (auth.StripCredentials) and any
//     Authorization holding one of the sandbox's own tokens.
//
// Signed /files URLs (sbx.uploadUrl(), sbx.downloadUrl() of a secure
// sandbox) stand in for X-Access-Token on GET and POST /files: a request
// there without the header must carry `signature` = "v1_" +
// base64(sha256(path:operation:user:accessToken[:expiration])), "="
// stripped (operation "read" or "write"; path, user and expiration the
// `path`, `username` and `signature_expiration` parameters as sent), and,
// with an expiration, arrive no later than it; else 401 in envd's body. A
// signed request acts as the user it signs (its Authorization header is
// dropped). The SDK builds these URLs on E2B_SANDBOX_URL, with no sandbox
// id: such a URL goes to the running sandbox whose access token signed it
// (one HMAC and one hash per running E2B sandbox); on the sandbox's envd
// host, 49983-<id>.<Options.Domain>, or with E2b-Sandbox-Id, it is
// checked against that sandbox only.
//
// # Users
//
// Hosted E2B runs commands and file operations as `user` (home /home/user)
// unless the caller names another; our agent defaults to root. The facade
// records the default user of a sandbox at create (`user` for the base and
// code-interpreter templates, none for other images) and adds it as envd's
// user selector (Authorization: Basic base64("user:")) to envd requests
// that name no user, so relative paths and file ownership match E2B.
//
// # Create
//
// Templates: `base` is the daemon's default image (--default-image,
// sandboxd/base:bookworm unless set), `code-interpreter-v1` is
// sandboxd/code-interpreter:v1 (scripts/build-images.sh); any other
// template id names one of the caller's service templates (a snapshot's
// id, tpl-…, or a template's name, with or without ":default"), else a
// locally present image (404 in the E2B shape when there is none). In a code-interpreter sandbox the facade starts the
// interpreter server (tag "code-interpreter", as `user`) after create and
// after every resume, and waits until port 49999 accepts.
//
// MCP: a create with `mcp` servers (the SDK then names the template
// `mcp-gateway`, which is the base image here) is accepted; the SDK then
// runs `mcp-gateway --config …` in the sandbox, and the built-in images'
// mcp-gateway exits 1 saying that sandboxd has no gateway, so the SDK
// kills the sandbox and throws "Failed to start MCP gateway: …".
//
// The timeout is in seconds; when absent (the JS SDK omits it unless the
// user set timeoutMs) it is 300 s for v1 and v2 alike (the infra spec's v1
// default of 15 s would surprise Python users, whose SDK always sends it).
// envVars become the sandbox environment and metadata its tags (keys must
// follow our tag rules: 400 otherwise). allow_internet_access and
// network's allowOut and denyOut are the sandbox's network policy
// (network.go: E2B's allow-before-deny mapped onto sandboxd's
// deny-over-allow; no network on a daemon without --sandbox-network), and
// PUT /sandboxes/{id}/network changes it; reads show the policy in force.
// allow_internet_access, network, autoPause, autoPauseMemory and
// autoResume are recorded as annotations too. autoPause is enforced: such
// a sandbox is paused, not killed, when its timeout passes
// (service.Lifecycle.PauseOnTimeout; lifecycle.onTimeout "pause"), as
// pause does with autoPauseMemory as its memory (the SDK sends it only
// with onTimeout.keepMemory): absent freezes, true hibernates, false stops
// it keeping its file system (service.Lifecycle.TimeoutPause).
//
// autoResume is enforced (service.Lifecycle.AutoResume, Service.Wake): a
// request for a paused sandbox (frozen or hibernated) that would be
// served if it ran resumes it and is then served, on envd, on any port by
// host (ServePort) and on ports exposed through the ingress. It must
// carry the sandbox's credential where its port has one (wakes): the
// requests a secure sandbox lets through without a token (GET /health,
// the interpreter's context calls) do not wake it. Otherwise, and without
// autoResume, the answer is the not-running 502 as before. A wake that
// fails answers its error (429 over quota, 503 for the engine), in envd's
// shape.
//
// # Pause and connect
//
// Pausing a sandbox freezes its processes in memory (service.Pause: the
// engine's cgroup freezer, whatever keepMemory says) and clears its timeout
// (a paused sandbox never expires); connect, and the legacy resume, thaw
// them where they were (service.Resume: a background command keeps its pid,
// a server answers again) and give it a timeout again (the request's, else
// 300 s). A sandbox paused for longer than the daemon's --pause-max was
// stopped with its file system kept: connect starts it, its processes
// restarted (E2B's answer has no word for that; the native API's does). A
// paused or stopped sandbox is "paused" to E2B; pausing it again is 409.
//
// # Create dedupe
//
// Identical create bodies are distinct intents (an SDK loop, a
// Promise.all): by default (DedupeUndelivered, README "Create dedupe",
// docs/design.md section 4) each makes its own sandbox, and only a create
// whose client went away before its answer (the request's context ended,
// or writing the answer failed) is shared: one identical create of the same
// owner within the replay window (Options.ReplayWindow, 10 s) adopts it,
// and if none does it is destroyed after the window. The fingerprint is the
// SHA-256 of the normalized request — owner, template, sorted env,
// metadata, timeout, lifecycle flags, network posture, secure — and
// nothing per-request; each create holds its own delivery claim in scope
// "e2b.create.delivery" under it. The handler hands the create over right
// before writing the answer (with its Content-Length, flushed), and reports
// a failed write; a client that left gets nothing written.
//
// DedupeBody is the old rule (scope "e2b.create", pending lock 2 min):
// identical bodies within the window answer one sandbox whether or not its
// first answer was delivered; the sandbox id is derived from the
// fingerprint and the claim. DedupeOff dedupes nothing: a create whose
// client went away lives until its timeout.
//
// An Idempotency-Key header takes precedence under every rule: scope
// "e2b.create.key", keyed by (owner, key), replayable for 24 h, and the same
// key with another body is 422.
//
// # Snapshots and fork
//
// snapshots.go: createSnapshot is Service.Snapshot (synchronous; with the
// running processes where the runtime can checkpoint them, as E2B's,
// else the file system), its snapshotID the template's id; listSnapshots lists the
// caller's templates of kind snapshot; deleteSnapshot is DELETE
// /templates/{id} (Service.DeleteTemplate). fork is Service.Fork, then
// each fork's timeout (default 15 s) and interpreter; forks keep the
// source's annotations, so they answer like its create. A fork's
// processes and memory do not carry over: it captures files.
//
// # envdVersion
//
// Every sandbox reports envd 0.6.4, the highest version the SDKs gate a
// feature on (e2b 2.51.0 src/envd/versions.ts), because the agent
// implements each of them: stdin control, closeStdin, octet-stream upload
// (0.5.7), file metadata as user.e2b.* extended attributes (0.6.2; see
// internal/agent/server/filemeta), entry info on watch events (0.6.3) and
// watching network mounts only when asked (0.6.4).
package e2b
