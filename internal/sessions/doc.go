// Package sessions is the service's sessions part: long-lived shells (a
// session runs commands one after another, each with its output and exit
// code), terminals (PTYs) and interpreter contexts (a Python namespace that
// persists between executions). The HTTP edges' session, PTY and
// interpreter routes translate onto it; it needs of the service only what
// [Agents] and [Events] say: a sandbox's agent client (the caller has
// checked that its caller owns the sandbox) and the lifecycle events of
// this node's sandboxes.
//
// # State lives in the agent
//
// Every session is an agent process (toolboxd, PID 1 of the sandbox, owns
// processes: see package process of the agent) carrying a tag that names
// it and holds what the daemon needs to rebuild its view:
//
//	sandboxd.session/<id>/<marker token>                    a shell (bash, stdin open)
//	sandboxd.pty/<id>/<cols>x<rows>/<created ms>[/lazy]     a terminal (bash -l on a PTY)
//	sandboxd.interpreter/<id>/<marker token>/<created ms>   an interpreter worker (python3)
//
// A shell also asks the agent to keep its recent output
// (agent.StartRequest.KeepOutput, [ShellKeepOutput]). What the Manager
// holds is a cache: the first use of a sandbox after the daemon starts
// lists the agent's processes and reattaches to each session it finds (a
// shell with a replay of its kept output), and rebuilds the shell's
// commands, exit codes and per-command logs from that replay (that first
// use waits until each replay is read: the agent marks its end with a
// keepalive, agent.Process.Replayed, and the wait is at most 5 s). The
// same happens after a stream to the agent broke. The daemon stopping (Close)
// ends its streams, never the processes: they run on for the next daemon.
//
// # Shells
//
// Each command is written to the shell's stdin as one compound command
// that prints a begin marker on stdout and stderr, runs the command in a
// { } group (not a subshell), and prints an end marker carrying $? on both
// streams. Markers are \x1e<token>:<command id>:B<text>\x1e, where text is
// the command's first 3 KiB in base64 (a rebuilt command shows that), and
// …:E<code>\x1e. Each stream is demultiplexed at the markers, so every
// command has its stdout, stderr and their interleaving in arrival order,
// and ends when both end markers arrived; a begin marker of a command the
// cache does not know (a replay) makes it known. Output of a command whose
// begin marker the agent no longer kept is dropped. Because bash reads the
// whole compound command before running it, input sent to a command is
// what the command reads. Kept output is bounded ([LogLimits]): each
// command keeps its newest 1 MiB, the sessions of one sandbox 8 MiB, those
// of the daemon 128 MiB; past a limit the oldest output goes first, and
// logs begin with a "[sandboxd: N bytes of earlier output dropped]" line
// per stream. Commands beyond the last 1000 per shell are forgotten, and a
// sandbox has at most 64 shells. A shell that exited stays listed with its
// logs until deleted, or until the daemon restarts (the agent lists only
// running processes).
//
// # Terminals
//
// A terminal's output goes to every attached client from its attach on
// (no backlog), each client with its own queue: a client 1 MiB behind, or
// whose push would take the daemon's queued output past 64 MiB, is
// dropped as slow. 32 terminals per sandbox, 8 clients per terminal. After
// a restart of the daemon a terminal reads the size it started with (a
// resize is not recorded in the agent); a lazy terminal not yet started
// is lost with the daemon (it has no process).
//
// # Interpreter contexts
//
// The worker runs each request (a JSON line on its stdin carrying an
// execution id) in one namespace; it marks the execution's begin (B<id>),
// its error (E<id>:<JSON>) and its end (D<id>:<status>) with a random
// per-context token, so output or markers of an execution from before a
// restart of the daemon never end another. 16 contexts per sandbox;
// "default" is made at first use.
//
// # Lifecycle and bounds
//
// A sandbox that leaves the running state for any reason (stop, pause,
// delete, crash, auto-stop) has its cache dropped (its streams end; the
// processes die with the sandbox, or, after a pause, are found again on
// next use). A subscription dropped for falling behind drops every cache.
// Everything the agent answers is hostile input: tags are parsed strictly
// and ignored unless they match, a list is read up to 4096 processes,
// markers are bounded ([maxMarkerLen], 64 KiB for the interpreter's) and
// every cache has the limits above.
package sessions
