// Package sandboxd is the Go client of the sandboxd native API v1
// (docs/api-v1.md): create sandboxes, run commands in them, move files in
// and out, expose their ports, and manage API tokens.
//
//	c := sandboxd.New(sandboxd.DefaultBaseURL, token)
//	sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: "sandboxd/base:bookworm"})
//	…
//	res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "uname -a"})
//
// # Errors
//
// Every answer other than 2xx is an *APIError carrying the API's error
// code. Match codes with errors.Is and the Err* sentinels
// (errors.Is(err, sandboxd.ErrNotFound)), or use errors.As for the status,
// message and Retry-After. Transport failures are returned as they are,
// wrapped with the operation.
//
// # Retries
//
// A call is retried only when repeating it cannot change its outcome, and
// only after a transient failure: a transport error, or an answer marked
// retryable (429, 500, 502, 503, 504). Waits grow exponentially with
// jitter, honour Retry-After, are bounded by RetryPolicy.MaxAttempts and
// stop as soon as the context ends (or would end before the next attempt).
//
//   - Reads, StartSandbox, StopSandbox, UpdateSandbox, ExposePort and
//     RemoveFile are retried as they are: the API makes them idempotent.
//   - CreateSandbox sends an Idempotency-Key and resends the identical body
//     with the same key, so the daemon answers a retry with the sandbox of
//     the first attempt instead of creating another.
//   - DestroySandbox, UnexposePort, RemoveDomain and RevokeToken are
//     retried, and a 404 on a retry that follows an attempt that may have
//     reached the daemon (a broken connection or a 5xx) is success: that
//     attempt did the work. A 404 on the first attempt is ErrNotFound.
//   - AddDomain is retried, and treats a hostname_conflict for a binding
//     that already is the one asked for as success.
//   - Exec, CreateToken and UploadFile are never retried: the first two are
//     not idempotent, and an upload's body cannot be replayed.
//   - ExecStream retries only its WebSocket handshake; the command starts
//     once, after it.
//
// # Streaming
//
// ExecStream runs a command over a WebSocket and returns a *Process:
// output arrives live (to writers given in the StreamRequest, or from
// Process.Stdout and Process.Stderr), Write feeds stdin, and Resize and
// Signal control the process. UploadFile and DownloadFile stream file
// contents without holding them in memory.
package sandboxd
