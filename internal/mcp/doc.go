// Package mcp is sandboxd's Model Context Protocol server: the tools an
// agent drives sandboxes with (create, list, exec with streamed output,
// read and write files, list a directory, expose a port, destroy), built
// on the official Go MCP SDK (github.com/modelcontextprotocol/go-sdk).
//
// # One implementation, two transports
//
// The tools are a translator over the Go SDK client of the native API
// (sdk/go): every tool call is one or two API v1 calls made with the
// caller's own token. Two transports share them:
//
//   - `sandboxd mcp` ([Command]) speaks MCP on its standard input and
//     output and calls the daemon at SBX_API_URL with SBX_TOKEN (or the
//     local admin token), found the way sbx finds them.
//   - `/mcp` on the daemon ([NewHTTPHandler]) speaks the streamable HTTP
//     transport, stateless: each POST is served on its own and nothing is
//     kept between requests. The handler checks the caller's bearer token
//     first (no valid token: 401, before any MCP is read), then forwards
//     that same token to the daemon's own API over an in-process
//     connection (no socket, no network): the /v1 edge authenticates it
//     again and applies every rule it applies to any client.
//
// Forwarding the token, rather than calling the service with the
// caller's principal, keeps authorization in one place: the /v1 edge
// decides who sees which sandbox (another tenant's is not_found), which
// routes need an admin, quotas, and, in a cluster, which node owns the
// sandbox (the cluster's forwarding wraps the same handler). The MCP
// package holds no rule of its own that could drift from the API's.
//
// # Bounds
//
// Every input and every output is bounded, and each tool's description
// says how: a command's length, its stdin, its run time; the output an
// exec returns (the first and last part of each stream, with a note of
// what was left out) and the output it streams; the bytes read_file
// returns and write_file takes; the entries list_directory and
// list_sandboxes return. The streamable HTTP transport caps a request's
// body at the SDK's default (4 MiB).
//
// # Errors
//
// A failed call is an MCP tool error (isError: true) whose text names
// the tool's operation, the API's error code and message (written for
// users by the service and classified by internal/api/apierr, whose
// table says whether a retry may succeed), and what to do next. A
// sandbox the caller cannot see reads as not found, whether it belongs
// to another tenant or never existed.
package mcp
