// Package process is the agent's process.Process Connect service: it starts
// commands inside the sandbox, streams their output to any number of
// clients, and takes input, signals and terminal resizes for them. It
// speaks envd's wire protocol (spec/envd/process/process.proto), so E2B SDKs
// and sandboxd's own client use it alike.
//
// # Streams
//
// Start and Connect streams carry start{pid} first, then data events
// (stdout, stderr, or pty bytes, at most 32 KiB, 16 KiB for a PTY, per
// event, one reader goroutine per output), then end{exit_code, exited,
// status, error}. A keepalive event is sent whenever a stream has been
// quiet for the interval of the Keepalive-Ping-Interval header (seconds;
// 90 s when absent).
//
// # Lifetime
//
// A process belongs to the agent, not to the stream that started it, as in
// envd: when the client of a Start stream goes away the process keeps
// running, and can be reattached with Connect (by pid or tag), until it
// exits or its lifetime passes. The lifetime is the Connect-Timeout-Ms
// header of the Start request (none when absent or zero); when it passes the
// process group gets SIGKILL.
//
// A process runs in its own process group (its own session with a PTY),
// and signals (SendSignal, the lifetime, Shutdown) go to the whole group,
// so the commands a shell started stop with it. After the process exits its
// output is read until EOF for at most [Options.OutputGrace]; a descendant
// that keeps the pipes open longer is cut off (output already written is
// still delivered), so that the end event always comes.
//
// # Fan-out and back pressure
//
// Every stream attached to a process gets every event published while it is
// attached, in order. Delivery is lossless: a subscriber that falls more
// than 64 events behind makes the readers wait for it, so a slow client
// slows the process down the way a slow reader of a pipe would. A client
// that disconnects is dropped at once. Output published while nobody is
// attached is discarded, so an unwatched process never blocks on its
// output.
//
// # Kept output (sandboxd's)
//
// A Start request with X-Sandboxd-Keep-Output: N makes the process keep its
// newest N bytes of output (each event counting 64 bytes more; capped at
// [MaxKeepOutput]; oldest events dropped first, one larger event trimmed
// to its tail), whether or not anyone is attached. A Connect with X-Sandboxd-Replay: 1 then sends that
// output after start{pid} and before the live events, none lost or
// repeated between the two, followed by one keepalive event that marks
// where the kept output ends; it also reaches such a process for
// [EndedKeep] after its end (at most [MaxEnded] of them): the stream then
// carries the kept output and the end. This is what lets the daemon's
// sessions survive a daemon restart: the shell runs on in the agent, and
// the daemon reattaches and rebuilds its view from the replay. List and
// every other call see only running processes, as in envd.
//
// # The sandbox's log (sandboxd's)
//
// Every process the service starts writes its output to the service's
// logbook (package server/logbook, [Options].Logbook), named "pid-N",
// whether or not anyone is attached. A Start with X-Sandboxd-Log: start
// names it "start" (the template's start command); X-Sandboxd-Log: off
// keeps it out (the daemon's own probes); any other value is
// invalid_argument. The daemon's proxies drop X-Sandboxd-* headers, so
// only the daemon sets them.
//
// # Users
//
// The request's user (Authorization: Basic base64("user:"), root when
// absent) is resolved with package account; the process runs with that
// user's uid and gid, HOME, USER and LOGNAME, in its home directory unless
// the request names a cwd. PATH comes from the agent; then come the
// service's Env, what [Service.SetEnv] set last (the sandbox's secret env)
// and the request's variables, a later one overriding an earlier one.
// Nothing else of the agent's environment is inherited (in particular not
// its token).
//
// # Lookup
//
// A tag selects the earliest started process that carries it, considering
// every tracked process. A process is tracked from its start until its end
// event has been published; after that, pid and tag lookups are not_found.
//
// # Reaping
//
// Exit statuses come from a [reaper] so that the agent can also be PID 1
// and reap orphans: see package reaper for why one reaper owns every
// wait.
//
// Errors are mapped to Connect codes in one place (toConnect): unknown
// pid or tag is not_found; bad requests, unknown users and commands that
// cannot start are invalid_argument; input of the wrong kind is
// failed_precondition.
package process
