// Package server is the sandbox agent's HTTP API, served by toolboxd (PID
// 1 of every sandbox) on its unix socket; package agent is the client the
// daemon uses, and the daemon never links this package.
//
// [NewHandler] puts everything on one mux, as envd does: GET /health
// (unauthenticated, 204 No Content), the Connect services process.Process
// (package server/process) and filesystem.Filesystem (package
// server/filesystem), GET and POST /files (package server/files), GET
// /sandboxd/logs (the sandbox's log, package server/logbook), and
// CONNECT tunnels to ports inside the sandbox (package agent/tunnel). The
// wire protocol is envd's (spec/envd), so E2B SDKs reach these handlers
// through the daemon unchanged. Every request but GET /health must carry
// the agent token in X-Access-Token; a missing or wrong token is 401 with
// a Connect error body {"code":"unauthenticated"}. The token is compared
// in constant time. Streams are long-lived: the server must not set read
// or write timeouts.
package server
