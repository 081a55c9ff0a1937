// Package v1 is sandboxd's native HTTP API, the contract of
// docs/api-v1.md: sandboxes, exec (buffered and over a WebSocket), files,
// API tokens, /healthz and /metrics. spec/openapi.yaml is its machine form.
//
// The package is a thin edge. Each handler decodes, calls the domain layer
// (the [Service] interface, implemented by internal/service) and encodes;
// it holds no business rules. Three things are centralised:
//
//   - The route table ([routes]) is the only list of routes. New registers
//     every handler from it, and a test checks that spec/openapi.yaml has
//     exactly the same routes, so the two cannot drift.
//   - Errors. Handlers return errors; one function, classify, turns
//     domain, store and auth errors into the wire's code, HTTP status and
//     retryable flag (the edge's own *Error, else the table every edge
//     shares, package apierr), and writeError sends {"error":{code,message,retryable}}
//     (with Retry-After on capacity_exhausted) and counts it by code. A
//     client error carries the domain's own message; a server error
//     carries a fixed one and a request id, and only the log has the
//     detail, so nothing internal or secret leaks.
//   - Unmatched requests get the same JSON shape: not_found for an unknown
//     path, and 405 (code invalid_argument, with Allow) for a known path
//     with another method.
//   - Authentication. Each route declares its access (public, any token,
//     admin). A user token acts as service.Caller{Owner}: it sees only its
//     owner's sandboxes, and another owner's are not_found, never
//     permission_denied, so that their existence does not leak.
//
// # Input
//
// JSON bodies are one object, decoded with unknown fields rejected, nothing
// allowed after it, and at most Options.MaxBodyBytes (1 MiB by default;
// beyond that 413 payload_too_large). File uploads are streamed and not
// capped. Query parameters are validated too: unknown or repeated
// parameters are invalid_argument, and so is a NUL byte anywhere in the
// path or query. Wire units are converted here and nowhere else: cpu is in
// cores (0.5) and becomes millicores, timeout_s seconds becomes a Duration.
// Values are range-checked by the service; the conversions saturate rather
// than wrap, so a huge value stays huge and is rejected. An image that is
// not on the host is invalid_argument, not not_found: images are never
// pulled, so the request can never succeed as sent, and not_found is kept
// for the resource the path names.
//
// # Idempotent create
//
// POST /v1/sandboxes with an Idempotency-Key (1-255 printable ASCII) runs
// through service.Idempotent, scope "v1.create", keyed by the SHA-256 of
// owner and key (so tenants' keys never collide). The request hash is the
// SHA-256 of the decoded request re-encoded canonically, so whitespace,
// field order and map order do not matter, and the same key with another
// body is 422 idempotency_key_reused. Concurrent duplicates wait for the
// first call; any duplicate gets the first call's sandbox with 201 and
// "Idempotent-Replayed: true", without ssh_private_key (shown once, never
// stored). A failed create deletes its claim, so a retry starts afresh.
//
// # Exec
//
// POST …/exec is buffered: each of stdout and stderr is capped at 1 MiB
// (truncated says so). A command that timeout_s kills answers 200 with
// timed_out and exit code 124, as timeout(1) would.
//
// # Streaming exec
//
// GET /v1/sandboxes/{id}/exec/stream authenticates and finds the sandbox
// before upgrading, so those failures are ordinary JSON errors. After the
// upgrade one goroutine forwards the client's frames (stdin, stdin_close,
// resize, signal) to the process in order, and the handler's goroutine
// forwards the process's output. Closing the socket kills the process; a
// failure is an error frame followed by a close (1008 for the client's
// errors, 1011 for ours). The agent's protocol signals only TERM and KILL;
// SIGINT is sent as ^C on a terminal, which is what a terminal does.
//
// # Observability
//
// Every request gets an X-Request-Id and one log line (method, path,
// status, bytes, duration; never headers or query strings, which carry
// tokens and paths). /metrics serves the injected registry: the service's
// create-step histogram, sandboxd_api_errors_total{code} and
// sandboxd_sandboxes{state}, counted from the database at scrape time.
// Create answers carry Server-Timing with one entry per create step.
package v1
