// Package runtime defines what sandboxd needs from the thing that runs
// sandboxes, independently of how it runs them: containers through the Docker
// Engine today (package runtime/docker), a direct OCI runtime or microVMs later.
//
// # Identity
//
// Every operation is keyed by the sandbox id, never by an engine-specific id:
// the container (or VM) is found by its labels, so a daemon that lost its
// database can still find, inspect and destroy its sandboxes. A sandbox id must be a DNS
// label (see [ValidSandboxID]); the API hands out "sb-" + 16 lowercase hex.
//
// # The container contract (runtime/docker)
//
// Create turns a [Spec] into one running container and returns only once the
// agent inside answers:
//
//   - name and hostname: a keyed hash of the sandbox id, never the id
//     (docker.Runtime.ContainerName: the engine's resolver answers them to
//     the sandbox's neighbours);
//   - labels sandboxd.managed=1, sandboxd.node=<node id>, sandboxd.sandbox=<sandbox id>
//     (see [LabelManaged], [LabelNode], [LabelSandbox]) plus the caller's labels,
//     so the reconciler, and anyone auditing a host, can find every container
//     sandboxd owns and which node owns it; and sandboxd.attempt=<random>,
//     naming the Create call that made it, so that a Create whose engine
//     answer was lost removes its own container and never another's;
//   - limits: CPU (NanoCPUs), memory (no extra swap) and pids, as the Spec says;
//     and the disk ([Spec.DiskMB]) as the engine's storage option "size"
//     where its storage driver enforces one ([DiskLimiter]: btrfs, whose
//     qgroup counts the image too, so the image's size is added; overlay2
//     on xfs with pquota); elsewhere the limit is not enforced and the
//     daemon says so at start;
//   - never privileged; every capability dropped but [SandboxCapabilities];
//     a private cgroup namespace; the engine's default seccomp profile (and
//     no no-new-privileges: setuid programs such as sudo keep working); no
//     init process injected by the engine (the agent is PID 1 and reaps
//     zombies itself); no restart policy (the daemon decides);
//   - the agent's oom_score_adj -1000 where the engine may lower scores (the
//     daemon holds CAP_SYS_RESOURCE), else the engine's default; the agent
//     keeps its children 1000 above itself;
//   - network mode "none" unless [Spec.Network] is set: sandboxes have no
//     route anywhere, not even to each other's agents or to the daemon;
//   - the agent binary (a static executable on the host) bind-mounted
//     read-only at [AgentPath] and used as the entrypoint, with no arguments;
//   - a per-sandbox host directory <socket root>/<sandbox id>, created 0700
//     by Create and removed by Destroy, bind-mounted read-only at
//     [AgentSocketDir]; the agent listens on the unix socket
//     [AgentSocketPath] inside it, which is how the daemon reaches it (no
//     TCP port, no network needed). The daemon creates that socket and hands
//     it to the agent over [AgentHandoffName] at every start (package
//     agent/handoff; under gVisor the directory is writable and the agent
//     makes its own), and refuses any connection whose peer is not the
//     agent ([ErrAgentImpostor]);
//   - the agent token handed over at every boot, never in the sandbox's
//     environment or its files: with the socket over [AgentHandoffName],
//     or under gVisor in the socket directory's token file, which the
//     agent removes before it serves (package agent/handoff). The runtime
//     keeps it for Start (a label sealed with the node key). A container
//     created before carries [EnvAgentToken] in its environment instead,
//     which its agent takes and unsets.
//
// # The agent contract
//
// The agent serves GET /health on its socket without authentication and
// answers 204 No Content once it is ready; everything else requires the
// header X-Access-Token: <agent token>. [Runtime.WaitAgentReady] polls that
// endpoint; Create and Start return only after it answered.
//
// # Failure behaviour
//
// Create never leaks: when any step after the container was created fails
// (start, agent readiness, a cancelled context), it removes the container and
// the socket directory, with a fresh context, before returning the error.
// Destroy is idempotent. Errors are classified by sentinels ([ErrNotFound],
// [ErrImageNotFound], [ErrAlreadyExists], [ErrInvalidSpec], [ErrAgentNotReady]),
// matched with errors.Is; [AgentNotReadyError] carries the details.
//
// # Checkpoints
//
// A runtime that can save a sandbox's processes and memory to disk and
// bring them back implements [Checkpointer] (hibernate: package service's
// Hibernate); [CanCheckpoint] says, per isolation, whether it can here
// and if not why. The oci runtime checkpoints gVisor sandboxes with runsc;
// runc-class ones would need CRIU, and the Docker runtime has none.
//
// # Testing
//
// Package runtime/runtimetest holds the conformance suite every
// implementation passes against the real engine, and runtimetest.Faulty, a
// wrapper that fails chosen methods on demand for failure-path tests.
// Package runtime/memory passes the same suite without an engine (the facts
// only an engine has declared lacking, see runtimetest.Config.Lacks): a
// real agent served in-process per sandbox, for tests that need no Docker.
package runtime
