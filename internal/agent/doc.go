// Package agent is the Go client sandboxd uses to reach the sandbox
// agent, toolboxd (PID 1 of every sandbox). The server it talks to is
// package agent/server, which only toolboxd links; the daemon never does
// (cmd/sandboxd/deps_test.go keeps it so). Package agent/tunnel has both
// ends of the CONNECT tunnel.
//
// # Client
//
// [Client] speaks to one agent over connections a [DialFunc] makes (a unix
// socket with [UnixDialer], or the runtime's DialAgent), HTTP/1.1, with
// the token added to every request. [Client.Exec] runs a command to
// completion with bounded output; [Client.StartProcess] and
// [Client.ConnectProcess] return a [Process] stream with input, signal,
// stdin-close and resize controls; [Client.Upload] and [Client.Download]
// stream files; [Client.Logs] reads (or follows) the sandbox's log of
// process output the agent keeps (every line checked, every read bounded:
// the lines, their text, a batch, and the time spent reading the agent,
// not the caller's); [Client.Process] and [Client.Filesystem]
// expose the generated Connect clients for everything else.
//
// Process lifetime follows envd: the deadline of a Start stream (sent as
// Connect-Timeout-Ms) is the process's lifetime on the agent. The client
// therefore never forwards the caller's deadline to the stream; it sends
// StartRequest.Lifetime (or ExecRequest.Timeout) instead, and the caller's
// context only governs how long it waits.
package agent
