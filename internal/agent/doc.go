// Package agent is both ends of the sandbox agent's API: the HTTP handler
// that toolboxd (PID 1 of every sandbox) serves on its unix socket, and the
// Go client sandboxd uses to reach it.
//
// # Server
//
// [NewHandler] puts everything on one mux, as envd does: GET /health
// (unauthenticated, 204 No Content), the Connect services process.Process
// (package agent/process) and filesystem.Filesystem (package
// agent/filesystem), GET and POST /files (package agent/files) and CONNECT
// tunnels to ports inside the sandbox (package agent/tunnel). The wire
// protocol is envd's (spec/envd), so E2B SDKs reach these handlers through
// the daemon unchanged. Every request but GET /health must carry the
// agent token in X-Access-Token; a missing or wrong token is 401 with a
// Connect error body {"code":"unauthenticated"}. The token is compared in
// constant time. Streams are long-lived: the server must not set read or
// write timeouts.
//
// # Client
//
// [Client] speaks to one agent over connections a [DialFunc] makes (a unix
// socket with [UnixDialer], or the runtime's DialAgent), HTTP/1.1, with
// the token added to every request. [Client.Exec] runs a command to
// completion with bounded output; [Client.StartProcess] and
// [Client.ConnectProcess] return a [Process] stream with input, signal,
// stdin-close and resize controls; [Client.Upload] and [Client.Download]
// stream files; [Client.Process] and [Client.Filesystem] expose the
// generated Connect clients for everything else.
//
// Process lifetime follows envd: the deadline of a Start stream (sent as
// Connect-Timeout-Ms) is the process's lifetime on the agent. The client
// therefore never forwards the caller's deadline to the stream; it sends
// StartRequest.Lifetime (or ExecRequest.Timeout) instead, and the caller's
// context only governs how long it waits.
package agent
