// Package daytona is sandboxd's Daytona facade: the HTTP edge that lets the
// official Daytona SDK (@daytonaio/sdk, tested with 0.218.0) drive sandboxd
// unchanged, with DAYTONA_API_URL=http://<daemon>/daytona/api and
// DAYTONA_API_KEY set to a sandboxd API token. Wire details:
// test/compat/daytona/WIRE.md.
//
// # Routing
//
// [Facade.Match] claims every path under /daytona/api on a host that is not
// a preview host. The control plane is /daytona/api/sandbox…; the toolbox
// (Daytona's in-sandbox daemon API) is /daytona/api/toolbox/{id}/…, which
// is what every sandbox's toolboxProxyUrl points at (the SDK appends /<id>),
// on the host the client reached. /daytona/api/socket.io/ is Daytona's
// event stream (below). Anything else is a 404 in Daytona's shape.
//
// # Event stream
//
// The SDK's notification client (Socket.IO 5 over Engine.IO 4, WebSocket
// transport only) connects to /daytona/api/socket.io/ and authenticates in
// its CONNECT packet (auth {token}: the API key). It joins its owner's room:
// the lifecycle events of that owner's sandboxes and no other's, from
// service.Subscribe — sandbox.created (the DTO, state creating) and
// sandbox.state.updated ({sandbox, oldState, newState}; a deleted sandbox
// is newState destroyed). A served stream is what lets a script exit
// promptly: the SDK unrefs a connected socket, while a refused one keeps
// reconnect timers alive for minutes. Bounds: 16 KiB per client frame, 10 s
// to send CONNECT, 10 s per frame written, 64 subscriptions per owner; a
// client that falls service.EventBuffer events behind is disconnected (the
// SDK reconnects, and polls meanwhile). Polling transport is refused
// (Engine.IO's 400). In a cluster a client sees the events of the node it
// reached only.
//
// # Authentication and errors
//
// Authorization: Bearer <sandboxd API token> on every route (WebSocket
// upgrades too). A user token sees only its owner's sandboxes; others are
// 404. Errors are NestJS's body {statusCode, message, error}, from one
// mapping ([classify]: the facade's own errors, else the table every edge
// shares, package apierr), with Daytona's code and source where the SDK turns
// them into its own classes: a missing file is 404 FILE_NOT_FOUND and a
// command past its timeout 408 PROCESS_EXECUTION_TIMEOUT, both with source
// DAYTONA_DAEMON. A duplicate name is 409.
//
// # Sandboxes
//
// Create, start and stop answer in the final state (started, stopped), so
// the SDK never has to poll. Names resolve through the service's unique
// name index; a sandbox created without a name is named by its id. Labels
// are the sandbox's tags (list filters on them, AND). cpu is in cores,
// memory and disk in GiB; disk is the sandbox's disk limit (0 or absent:
// the daemon's default), enforced by the kernel where the engine can
// (native API: disk_enforced). gpu is refused
// (400), never
// ignored, and so is every other field set to anything but its zero value
// (linkedSandbox, ttlMinutes, autoPauseInterval, secrets, kvm, spot,
// gpuType, outboundProxyUrl, otelEndpointOverride, unknown fields): the
// 400 names the field. volumes [{volumeId, mountPath}] mount the caller's
// volumes (below). A
// snapshot names one of the caller's snapshots, else an image
// (Options.Images, else a locally present image); an `image` the SDK sends
// as a one-line Dockerfile (FROM <ref>) uses that image; building at
// create is refused (snapshot.create builds). State names: running is "started"; creating,
// stopping, stopped and error are themselves; a deleted sandbox is 404.
//
// # Network
//
// Daytona's options are the sandbox's network policy (network.go). On a
// daemon with --sandbox-network: networkBlockAll is no network at all;
// networkAllowList (comma-separated IPv4 CIDRs, at most five) and
// domainAllowList (host names, "*.example.com" for the names under it,
// for HTTP Host and TLS SNI, once the daemon's egress proxy honours
// them; until then they allow nothing) restrict the sandbox to them;
// neither is open (Daytona's default). Without --sandbox-network every
// sandbox has none and reads networkBlockAll true, and an allow list is a
// 400. A bad CIDR, a sixth one, or networkBlockAll with a list is a 400.
// The Sandbox reads the policy in force: networkBlockAll (no network, or
// nothing allowed), networkAllowList and domainAllowList (sorted, joined
// by commas). updateNetworkSettings (POST /sandbox/{id}/network-settings)
// replaces it at once, each field given replacing what it names:
// networkBlockAll true cuts the sandbox off (but for DNS), false restores
// open access and clears the lists, a list replaces that list. A sandbox
// keeps having network or not for its life: one made without can be
// blocked (a no-op) but never given network (400).
//
// # Snapshots and forks
//
// A snapshot is one of the owner's templates (snapshots.go): createSnapshot
// captures a sandbox's filesystem synchronously; snapshot.create builds an
// image name or a Dockerfile-only Image (FROM, RUN, ENV, WORKDIR, USER;
// dockerfile.go) in the background, its output streamed by build-logs;
// fork captures a sandbox and creates one sandbox from the capture. Only
// files carry over, never processes or memory. A token without an owner
// cannot own snapshots (403).
//
// # Refused features
//
// Deactivating snapshots, fork lineage (/sandbox/{id}/forks, ancestors,
// parent), a fork's chosen name, declarative images with local files
// (/object-storage/push-access: object storage), pause, resize, ttl, SSH
// access, signed preview URLs,
// and in the toolbox LSP, computer use and the git operations beyond
// clone and status answer 501 in Daytona's shape with a message saying
// what is not supported (unsupported.go), never a 404, which the SDK
// would report as a missing resource. At create, a declarative image
// (buildInfo beyond one FROM line) is a 400.
//
// # Auto-stop, auto-delete and auto-archive
//
// The intervals (minutes) are the sandbox's lifecycle rules in the
// service (service.Lifecycle, kept on its row and applied by the daemon's
// background loop, so they hold across a restart); the facade only
// translates them at create, in the set… routes and in reads, and keeps no
// timer and no tag for them:
//
//   - autoStopInterval N > 0: the sandbox is stopped (its filesystem kept)
//     N minutes after its last activity — create, start, a change of its
//     rules, or any toolbox call (recorded at most once a minute); 0 (the
//     default here; Daytona's hosted default is 15): never.
//   - autoDeleteInterval N > 0: a stopped sandbox is destroyed N minutes
//     after its stop; 0: at the stop itself (stop and archive answer it
//     destroyed); -1 (the default): never.
//   - autoArchiveInterval: a stopped sandbox becomes archived N minutes
//     after its stop (default 7 days); 0 is Daytona's maximum, 30 days
//     (43200, which reads answer), and larger values are capped to it.
//
// # Archive
//
// Daytona archives a stopped sandbox's filesystem to object storage; here
// the stopped container keeps it. So POST archive is the service's Archive:
// the sandbox is stopped (if it runs) and marked archived (its stop event
// already says archived); start (or recover) starts it and clears the
// mark. The state reads "archived" for a stopped sandbox that is marked,
// whichever edge stopped it. list's states filter knows archived.
// Where the runtime can checkpoint the sandbox (gVisor under --engine
// oci) and it has no auto-delete (whose time counts from a stop), archive
// hibernates it instead of stopping it (Service.Archive): its processes
// and memory go to disk beside its files, it holds no memory, it reads
// "archived" all the same (paused and hibernated in the service, and
// marked), and start (or recover) resumes its processes where they were
// (its sessions live on), clearing the mark. Its event stream shows the
// hibernate's pause (started → paused) rather than a stop.
//
// # One account
//
// Everything the toolbox does — execute, code-run, sessions, files, git —
// runs as the sandbox's user (Daytona's `daytona`, uid 1001, home
// /home/daytona, with passwordless sudo; `user` or `root` on request at
// create), which is the DTO's `user`. The base image has all three; a
// sandbox whose image lacks daytona gets it at create (useradd, or lines
// appended to /etc/passwd and /etc/group; one `id` as root, ~5 ms, when the
// image has it). Its home is also the work
// directory: relative paths and commands without a cwd start there. Only
// chown (files/permissions with owner or group) runs as root.
//
// # Execute and code-run
//
// process/execute runs the command with /bin/bash -c after `exec 2>&1`, so
// `result` has stdout and stderr in the order they were written. A
// timeout is the process group's lifetime on the agent: it is killed when
// the timeout passes, even if the client is gone. process/code-run runs
// the code from stdin in its language, argv appended: python (python3 -u
// -, the default), javascript (node, as a CommonJS module of the work
// directory, process.argv [node, ...argv]) and typescript (transpiled by
// the image's TypeScript compiler, Debian's node-typescript, without type
// checking, as Daytona's ts-node -T; a syntax error is exit 1 with the
// diagnostics). Bookworm's Node 18 has no built-in type stripping. Output
// beyond 16 MiB is dropped.
//
// # Code interpreter
//
// An interpreter context (process/interpreter…, interpreter.go) is one
// python3 worker of the sessions part (package sessions, which keeps the
// contexts and their markers) whose namespace persists between executions,
// and across a restart of the daemon; "default" is made at first use and
// is neither listed nor deletable. Executions run one at a time per
// context. The execute WebSocket takes {code, contextId?, envs?, timeout?}
// as its first message and answers {"type":"stdout"|"stderr","text"} as
// output arrives (line-buffered as on Daytona, valid UTF-8, at most 64 KiB
// each), {"type":"error","name","value","traceback"} for an exception (the
// traceback has the cell's frames only, as File "<stdin>", line N), then
// {"type":"control","text":"completed"} and close 1000. The timeout
// (seconds; none is 10 minutes, 0 none) is a SIGALRM in the worker,
// answered with close 4008 (the SDK's DaytonaTimeoutError); the namespace
// stays. A worker that does not interrupt within 5 s more is killed and
// its context forgotten. Contexts are python only, 16 per sandbox, and
// dropped when the sandbox stops.
//
// # Sessions
//
// A session is a shell of the sessions part (package sessions): one
// long-lived /bin/bash started through the agent with stdin open, so
// shell state carries from one command to the next, and so it survives a
// restart of the daemon (the agent keeps the shell and its recent output;
// the daemon reattaches and rebuilds the commands, exit codes and logs
// from the output's markers). The routes only translate: create (409 for
// an id in use, 429 past 64 per sandbox), list, get, delete (kills the
// shell), exec (sync: 200 with exit code and output once it ends; async:
// 202 {cmdId}), command, logs and input (409 once the command ended).
// Kept output is bounded per command (1 MiB), per sandbox (8 MiB) and per
// daemon (128 MiB); logs begin with a "[sandboxd: N bytes of earlier
// output dropped]" line per stream where output went. The follow
// WebSocket (no subprotocol) sends \x01\x01\x01 before stdout and
// \x02\x02\x02 before stderr chunks, backlog first (a stdout frame
// "[sandboxd: output dropped]" where chunks were dropped before they were
// sent), and closes 1000 when the command has ended. Sessions are dropped
// when the sandbox stops.
//
// # Volumes
//
// /volumes (volumes.go) manages the caller's native volumes (per owner:
// internal/volume). A volume's id is its name, a DNS label; it is ready
// once created and gone once deleted. A duplicate name is 400 and an
// unknown volume 404, as on Daytona; deleting a volume that a sandbox of
// the owner mounts (running or stopped) is 409 naming the sandbox. A
// create with volumes checks that each exists (404) and bind-mounts the
// whole volume at mountPath; the DTO reports them back.
//
// # PTY sessions
//
// A PTY session (process/pty…, pty.go) is a terminal of the sessions part:
// the sandbox user's bash -l on a terminal, TERM xterm-256color unless the
// env says otherwise, which survives a restart of the daemon. create-connect
// creates and attaches in one WebSocket (the env in the
// X-Daytona-Pty-Envs~ subprotocol); connect attaches to an existing one,
// which outlives its clients. A client gets
// {"type":"control","status":"connected"}, then the terminal's output as
// binary messages from then on (no backlog); every message it sends is
// input. When the shell ends each client gets
// {"status":"exited","exitCode","exitReason"} (when it offered
// X-Daytona-Pty-Exit-Control, which the facade then answers) and a close
// whose reason is {"exitCode","exitReason"}: 1000 for exit 0, else 1011; a
// signal N is exit 128+N. Resize sets the terminal size (SIGWINCH); delete
// kills the process group. Bounds: 32 terminals per sandbox, 8 clients per
// terminal, 1 MiB of input per message, and 1 MiB of output queued per
// client, past which the client is closed (1008 "slow consumer") and the
// terminal goes on. Terminals are dropped when the sandbox stops.
//
// # Files and git
//
// File routes use the agent's filesystem service (stat, list, move,
// remove) and its streamed upload and download; mkdir -p with a mode,
// chmod, chown, grep (find) and find (search) run as commands. Bulk upload
// streams each part to its files[i].path (the part's filename is ignored);
// bulk download answers multipart/form-data whose part filenames are the
// requested paths, exactly. Git runs the sandbox's git: clone (any URL git
// accepts, a local path or file:// included; credentials through a
// one-shot credential helper fed from the environment) and status (git
// status --porcelain=v1 -z, parsed).
//
// # Preview URLs
//
// ports/{port}/preview-url exposes the port over HTTP through the ingress
// (public when the sandbox was created public) and returns its URL and, as
// token, the caller's own API token, which the ingress accepts for private
// ports. It is not scoped to the port.
package daytona
