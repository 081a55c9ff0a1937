package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/naming"
)

// Runtime runs sandboxes. Implementations are safe for concurrent use; calls
// for different sandboxes never wait on each other inside the implementation.
type Runtime interface {
	// Create creates and starts the sandbox described by spec and returns
	// once its agent answers (see WaitAgentReady).
	//
	// On any failure Create leaves nothing behind that it created: no
	// container, no socket directory. An id that is already taken fails with
	// ErrAlreadyExists and leaves the existing sandbox untouched. A missing
	// image fails with ErrImageNotFound (Create never pulls: see Puller), an invalid
	// spec with ErrInvalidSpec, an agent that does not come up with
	// ErrAgentNotReady.
	Create(ctx context.Context, spec Spec) (Instance, error)

	// Start starts a stopped sandbox and returns once its agent answers.
	// Starting a running sandbox is a no-op (apart from the readiness check).
	// A missing sandbox is ErrNotFound. Start never destroys anything: when
	// the agent does not come up the sandbox is left as it is.
	Start(ctx context.Context, sandboxID string) error

	// Stop stops a sandbox, keeping it (and its filesystem) for a later
	// Start. The agent gets a grace period to exit before it is killed.
	// Stopping a stopped sandbox is a no-op; a missing one is ErrNotFound.
	Stop(ctx context.Context, sandboxID string) error

	// Pause freezes every process of a running sandbox in memory (the
	// cgroup freezer): nothing runs, nothing is lost, and Resume thaws
	// them where they were. Pausing a paused sandbox is a no-op; a missing
	// one is ErrNotFound, one that is not running ErrNotRunning. A paused
	// sandbox's Status and Instance say Paused (and State running).
	Pause(ctx context.Context, sandboxID string) error

	// Resume thaws a paused sandbox. Resuming a running sandbox that is
	// not paused is a no-op; a missing one is ErrNotFound, one that is not
	// running ErrNotRunning. Stop and Destroy work on a paused sandbox.
	Resume(ctx context.Context, sandboxID string) error

	// Destroy removes the sandbox, running or not, and its socket directory.
	// It is idempotent: a sandbox that is already gone is not an error.
	Destroy(ctx context.Context, sandboxID string) error

	// Inspect reports the sandbox's state. A sandbox that does not exist is
	// not an error: its Status has State StateMissing.
	Inspect(ctx context.Context, sandboxID string) (Status, error)

	// ListOurs lists every sandbox this node's runtime manages (by label),
	// whatever its state, and nothing else: not other nodes' sandboxes
	// sharing the engine, not foreign containers. The reconciler compares it
	// with the database.
	ListOurs(ctx context.Context) ([]Instance, error)

	// DialAgent connects to the sandbox agent's socket. The caller owns the
	// connection. A sandbox without a socket directory is ErrNotFound.
	DialAgent(ctx context.Context, sandboxID string) (net.Conn, error)

	// WaitAgentReady polls the agent's GET /health (expecting 204) with a
	// short backoff until it answers, the sandbox stops running, ctx ends or
	// the runtime's readiness deadline passes; the last three return an
	// *AgentNotReadyError (errors.Is ErrAgentNotReady) with the last probe
	// error, the sandbox's state and the tail of its output.
	WaitAgentReady(ctx context.Context, sandboxID string) error

	// Stats samples the sandbox's resource usage once (no streaming).
	// A missing sandbox is ErrNotFound.
	Stats(ctx context.Context, sandboxID string) (Stats, error)
}

// Sentinel errors; implementations wrap them with context, callers match them
// with errors.Is.
var (
	// ErrNotFound: the sandbox has no container (or never had one).
	ErrNotFound = errors.New("sandbox not found in runtime")
	// ErrImageNotFound: the image is not present locally. Create never
	// pulls; a Puller does, before it.
	ErrImageNotFound = errors.New("image not found locally")
	// ErrAlreadyExists: a sandbox with this id already exists.
	ErrAlreadyExists = errors.New("sandbox already exists in runtime")
	// ErrInvalidSpec: the Spec is not acceptable (see Spec.Validate).
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrNotRunning: Pause or Resume of a sandbox that is not running.
	ErrNotRunning = errors.New("sandbox not running")
	// ErrAgentNotReady: the agent did not answer its health check in time,
	// or the sandbox stopped before it did. See AgentNotReadyError.
	ErrAgentNotReady = errors.New("sandbox agent not ready")
	// ErrAgentImpostor: something other than the sandbox's agent answers
	// on its socket (code in the sandbox replaced it). The connection is
	// refused, never used.
	ErrAgentImpostor = errors.New("agent socket answered by a process other than the sandbox's agent")
	// ErrUnavailable: the engine did not answer (its socket is gone or
	// refuses connections, or the connection broke mid-call). Nothing is
	// known about the sandbox; retry once the engine is back.
	ErrUnavailable = errors.New("container engine unavailable")
	// ErrNoSpace: the engine (or the host directory a runtime writes)
	// ran out of disk space. Retry once space is freed.
	ErrNoSpace = errors.New("no space left on device")
)

// AgentNotReadyError is returned (wrapped) when a sandbox's agent does not
// become ready. Its message leaves the sandbox id to the wrapping context. errors.Is(err, ErrAgentNotReady) holds, and so does
// errors.Is(err, target) for the last probe error (for example
// context.DeadlineExceeded when the caller's context ended).
type AgentNotReadyError struct {
	SandboxID string
	Waited    time.Duration
	// Status is the sandbox's state when waiting stopped (it may have exited).
	Status Status
	// LogsTail is the end of the sandbox's combined stdout and stderr (the
	// agent's own output), bounded in size; empty when unavailable.
	LogsTail string
	// Err is the last probe error.
	Err error
}

func (e *AgentNotReadyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent not ready after %s", e.Waited.Round(time.Millisecond))
	if e.Status.State != "" {
		fmt.Fprintf(&b, " (container %s", e.Status.State)
		if e.Status.State == StateExited {
			fmt.Fprintf(&b, ", exit code %d", e.Status.ExitCode)
		}
		b.WriteString(")")
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.LogsTail != "" {
		fmt.Fprintf(&b, "; output tail: %q", e.LogsTail)
	}
	return b.String()
}

// Unwrap exposes both ErrAgentNotReady and the last probe error to errors.Is.
func (e *AgentNotReadyError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrAgentNotReady}
	}
	return []error{ErrAgentNotReady, e.Err}
}

// Paths and names inside every sandbox; see the package documentation.
const (
	// AgentPath is where the agent binary is mounted (read-only) and what
	// the sandbox runs as PID 1.
	AgentPath = "/opt/sandboxd/toolboxd"
	// AgentSocketDir is where the per-sandbox host socket directory is mounted.
	AgentSocketDir = "/run/sandboxd"
	// AgentSocketName is the agent socket's file name in that directory.
	AgentSocketName = "agent.sock"
	// AgentSocketPath is the agent's socket inside the sandbox.
	AgentSocketPath = AgentSocketDir + "/" + AgentSocketName
	// AgentHandoffName is the socket, beside the agent socket, over which
	// a runtime that mounts the socket directory read-only hands the
	// agent its socket (package agent/handoff).
	AgentHandoffName = "handoff.sock"
	// AgentParkedName is the file, beside the agent socket, a parked
	// agent writes (under gVisor, before a checkpoint: cmd/toolboxd's
	// park.go) and removes when it listens again.
	AgentParkedName = "parked"
	// EnvAgentHandoff tells the agent the handoff socket's path inside
	// the sandbox; without it the agent creates its socket itself.
	EnvAgentHandoff = "SANDBOXD_AGENT_HANDOFF"
	// EnvAgentToken carries the agent token to the agent, which unsets it.
	EnvAgentToken = "SANDBOXD_AGENT_TOKEN"
	// EnvAgentIsolation tells the agent its sandbox runs under gVisor
	// (value "gvisor"; unset under runc). The agent then starts its
	// children without holding them at their exec (cmd/toolboxd): gVisor
	// refuses PTRACE_TRACEME to the child of a non-dumpable process, and
	// its sentry has no OOM killer whose order the hold would set.
	EnvAgentIsolation = "SANDBOXD_AGENT_ISOLATION"
	// EnvAgentSocket overrides the agent's socket path (tests only; the
	// runtime never sets it).
	EnvAgentSocket = "SANDBOXD_AGENT_SOCKET"
	// HeaderAccessToken is the agent's authentication header.
	HeaderAccessToken = "X-Access-Token"
	// HealthPath answers 204 without authentication once the agent is ready.
	HealthPath = "/health"
)

// SandboxCapabilities are the Linux capabilities a sandbox's processes keep
// (the agent's, and what root in the sandbox gets); a runtime drops all
// others. They are what the agent, package managers and sudo need:
//
//   - CHOWN, DAC_OVERRIDE, FOWNER, FSETID: dpkg and tar set owners, modes
//     and setuid bits; root edits files it does not own (the agent writes
//     its children's oom_score_adj, owned by them);
//   - SETUID, SETGID: the agent runs commands as other users, apt drops to
//     _apt, su and sudo switch users;
//   - KILL: the agent signals processes of other users;
//   - SETPCAP: programs that drop capabilities from their bounding set;
//   - NET_BIND_SERVICE: servers on ports below 1024;
//   - SYS_CHROOT: build tools and package scripts that chroot;
//   - AUDIT_WRITE: PAM (su, sudo, login) writes audit records.
//
// Dropped beyond Docker's defaults: MKNOD (device nodes), NET_RAW (raw and
// packet sockets: spoofing on a shared bridge; ping falls back to ICMP
// datagram sockets) and SETFCAP (file capabilities; dpkg scripts fall back
// to setuid bits).
var SandboxCapabilities = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_NET_BIND_SERVICE", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}

// Labels every sandbox carries; the reconciler finds orphans with them.
const (
	LabelManaged = "sandboxd.managed" // always "1"
	LabelNode    = "sandboxd.node"    // the owning node's id
	LabelSandbox = "sandboxd.sandbox" // the sandbox id
	// LabelPrefix is reserved: callers' labels may not use it.
	LabelPrefix = "sandboxd."
)

// Spec describes a sandbox to create.
type Spec struct {
	// SandboxID names the sandbox (and its container); see ValidSandboxID.
	SandboxID string
	// Image is a local image reference, e.g. "sandboxd/base:bookworm".
	Image string
	// CPU is the CPU limit in cores (1.5 = one and a half); 0 means no limit.
	CPU float64
	// MemoryMB is the memory limit in MiB, swap included; 0 means no limit.
	MemoryMB int64
	// PidsLimit bounds the number of processes; 0 means no limit.
	PidsLimit int64
	// DiskMB bounds, in MiB, what the sandbox may write to its own file
	// system (its writable layer: files it writes, uploads into it); 0
	// means no limit. A write past it fails with ENOSPC or EDQUOT. Only a
	// runtime that reports DiskLimits.Enforced enforces it; others ignore
	// it (see DiskLimiter).
	DiskMB int64
	// Env is added to the sandbox's environment (the agent's, which its
	// processes inherit). Keys must be valid and must not be EnvAgentToken
	// or EnvAgentHandoff.
	Env map[string]string
	// Labels are added to the container's labels; keys may not start with
	// LabelPrefix.
	Labels map[string]string
	// Network gives the sandbox a network; without it the sandbox has none.
	Network bool
	// Mounts are host directories bind-mounted into the sandbox.
	Mounts []Mount
	// AgentBinary is the host path of the static agent executable.
	AgentBinary string
	// AgentToken is the secret the agent requires on every request but
	// /health. It is passed in the environment and never logged.
	AgentToken string
	// Isolation is the kernel boundary between the sandbox and the host
	// (IsolationContainer when empty).
	Isolation Isolation
	// RestoreImage, when set, is a checkpoint image directory
	// (Checkpointer.Checkpoint's) of another sandbox of the same isolation
	// whose file system Image holds (a capture taken while it was
	// checkpointed): the new sandbox starts from that image's processes
	// and memory instead of booting. Its agent then still takes the
	// token of the sandbox checkpointed, not AgentToken, until told
	// otherwise; Env is the checkpointed processes', not this spec's.
	// Only a Checkpointer that can checkpoint Isolation accepts it;
	// every other runtime refuses it with ErrCheckpointUnsupported.
	RestoreImage string
}

// DiskLimiter is implemented by runtimes that can say whether they
// enforce Spec.DiskMB. A runtime that does not implement it enforces no
// disk limit.
type DiskLimiter interface {
	// DiskLimits reports how the runtime enforces Spec.DiskMB. It asks
	// the engine once and remembers a successful answer; an error (the
	// engine does not answer) is not remembered, so a later call asks
	// again.
	DiskLimits(ctx context.Context) (DiskLimits, error)
}

// DiskLimits is what a runtime says of its disk limits.
type DiskLimits struct {
	// Enforced: every sandbox created with Spec.DiskMB > 0 gets a limit
	// enforced by the kernel (a write past it fails with ENOSPC or
	// EDQUOT). Without it Spec.DiskMB is only recorded: nothing polls.
	Enforced bool
	// How names the mechanism ("btrfs qgroup", "overlay2 size on xfs
	// pquota") or, when not enforced, why not; for logs.
	How string
}

// Isolation is what stands between a sandbox's processes and the host
// kernel.
type Isolation string

// The isolations a runtime may offer.
const (
	// IsolationContainer is the host kernel behind namespaces, cgroups,
	// seccomp and a reduced capability set (runc). Every runtime has it.
	IsolationContainer Isolation = ""
	// IsolationGVisor puts gVisor's application kernel (runsc) between the
	// sandbox's processes and the host: their system calls are served in
	// user space. It has no network here (see scripts/setup-gvisor.sh).
	IsolationGVisor Isolation = "gvisor"
)

// The smallest limits a gVisor sandbox starts with: runsc's own kernel
// and file proxy, and their threads, are charged to the sandbox's cgroup
// (measured here: 128 MiB or 64 pids are too few for the agent to answer;
// 192 MiB and 128 pids are enough).
const (
	MinGVisorMemoryMB  = 256
	MinGVisorPidsLimit = 256
)

// Mount binds a host directory into a sandbox.
type Mount struct {
	// HostPath is an absolute directory on the host.
	HostPath string
	// Path is the absolute mount point inside the sandbox; it may not be
	// the agent's own paths.
	Path     string
	ReadOnly bool
}

// ValidSandboxID reports whether id can name a sandbox: a DNS label
// (naming.ValidLabel), so it is valid as a container name, a host name
// and a path element.
func ValidSandboxID(id string) bool { return naming.ValidLabel(id) }

// envKeyPattern is what a POSIX shell accepts as a variable name.
var envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the spec without touching the host; errors wrap
// ErrInvalidSpec. It does not check that the image or the agent binary exist.
func (s Spec) Validate() error {
	var errs []error
	if !ValidSandboxID(s.SandboxID) {
		errs = append(errs, fmt.Errorf("sandbox id %q is not a DNS label", s.SandboxID))
	}
	if s.Image == "" {
		errs = append(errs, errors.New("image is empty"))
	}
	if s.CPU < 0 || s.MemoryMB < 0 || s.PidsLimit < 0 || s.DiskMB < 0 {
		errs = append(errs, fmt.Errorf("negative limit (cpu %v, memory %d MiB, pids %d, disk %d MiB)", s.CPU, s.MemoryMB, s.PidsLimit, s.DiskMB))
	}
	if s.AgentBinary == "" || !path.IsAbs(s.AgentBinary) {
		errs = append(errs, fmt.Errorf("agent binary %q is not an absolute path", s.AgentBinary))
	}
	if s.AgentToken == "" {
		errs = append(errs, errors.New("agent token is empty"))
	}
	if s.RestoreImage != "" {
		if !path.IsAbs(s.RestoreImage) {
			errs = append(errs, fmt.Errorf("restore image %q is not an absolute path", s.RestoreImage))
		}
		if len(s.Mounts) > 0 {
			errs = append(errs, errors.New("a sandbox restored from another's checkpoint takes no mounts"))
		}
	}
	switch s.Isolation {
	case IsolationContainer:
	case IsolationGVisor:
		if s.Network {
			errs = append(errs, errors.New("a gVisor sandbox has no network on this host"))
		}
		if s.MemoryMB > 0 && s.MemoryMB < MinGVisorMemoryMB {
			errs = append(errs, fmt.Errorf("a gVisor sandbox needs at least %d MiB of memory", MinGVisorMemoryMB))
		}
		if s.PidsLimit > 0 && s.PidsLimit < MinGVisorPidsLimit {
			errs = append(errs, fmt.Errorf("a gVisor sandbox needs a pids limit of at least %d", MinGVisorPidsLimit))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown isolation %q", s.Isolation))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		switch {
		case !envKeyPattern.MatchString(k):
			errs = append(errs, fmt.Errorf("env key %q is not a valid name", k))
		case k == EnvAgentToken || k == EnvAgentHandoff || k == EnvAgentIsolation:
			errs = append(errs, fmt.Errorf("env key %s is reserved", k))
		}
	}
	for _, m := range s.Mounts {
		switch {
		case !path.IsAbs(m.HostPath) || !path.IsAbs(m.Path):
			errs = append(errs, fmt.Errorf("mount %q -> %q: paths must be absolute", m.HostPath, m.Path))
		case m.Path == "/" || m.Path == AgentPath || m.Path == AgentSocketDir || strings.HasPrefix(m.Path, AgentSocketDir+"/"):
			errs = append(errs, fmt.Errorf("mount point %q is reserved", m.Path))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if k == "" || strings.HasPrefix(k, LabelPrefix) {
			errs = append(errs, fmt.Errorf("label %q is reserved or empty", k))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, errors.Join(errs...))
	}
	return nil
}

// State is a sandbox's coarse lifecycle state, the same for every runtime.
type State string

const (
	// StateCreated: created but never started.
	StateCreated State = "created"
	// StateRunning: running (the engine's paused and restarting count too).
	StateRunning State = "running"
	// StateExited: stopped, exited or dead; Status.ExitCode is meaningful.
	StateExited State = "exited"
	// StateMissing: no such sandbox.
	StateMissing State = "missing"
)

// Status is what Inspect reports.
type Status struct {
	State State
	// ExitCode of the last run; meaningful in StateExited.
	ExitCode int
	// OOMKilled reports that the last run was killed for exceeding its memory.
	OOMKilled bool
	// StartedAt and FinishedAt are zero when the sandbox never started or
	// never finished.
	StartedAt, FinishedAt time.Time
	// Paused: running, with its processes frozen (Runtime.Pause).
	Paused bool
	// Detail is the engine's own state word (e.g. "paused"), for logs.
	Detail string
}

// Instance identifies a sandbox in its runtime.
type Instance struct {
	SandboxID string
	// ContainerID is the engine's id for it (a container id for Docker).
	ContainerID string
	State       State
	// Paused: running, with its processes frozen (Runtime.Pause).
	Paused bool
}

// Stats is one sample of a sandbox's resource usage.
type Stats struct {
	// At is when the engine took the sample.
	At time.Time
	// CPUPercent is the CPU used since the previous Stats call for this
	// sandbox on the same Runtime, in percent of one core (200 = two cores
	// busy). It is 0 on the first call; CPUTime is the cumulative figure.
	CPUPercent float64
	// CPUTime is the CPU time the sandbox consumed since it started.
	CPUTime time.Duration
	// MemoryUsed is the memory in use in bytes, page cache that the kernel
	// can reclaim excluded (what `docker stats` shows).
	MemoryUsed uint64
	// MemoryLimit is the memory limit in bytes (the host's memory when the
	// sandbox has no limit).
	MemoryLimit uint64
	// Pids is the number of processes and threads.
	Pids uint64
}

// Usage is what a sandbox uses of its disk and network, beyond Stats.
type Usage struct {
	// DiskUsed is what the sandbox wrote over its image (its writable
	// layer: what the disk limit counts), in bytes.
	DiskUsed uint64
	// NetRx and NetTx are the bytes received and sent on the sandbox's
	// network interfaces (loopback excepted) since it started.
	NetRx, NetTx uint64
}

// UsageReader is a Runtime that reports a sandbox's Usage. The docker
// runtime implements it.
type UsageReader interface {
	Usage(ctx context.Context, sandboxID string) (Usage, error)
}

// Images captures sandboxes' filesystems as images and removes them: the
// engine side of templates, snapshots and forks. The docker runtime
// implements it.
type Images interface {
	// Commit captures the sandbox's filesystem (its image and everything
	// written over it, bind mounts excepted: not the agent, its socket or
	// a volume) as the image ref. The image's configuration is cfg and
	// nothing of the container's: not its env (the agent token), its labels
	// or its entrypoint. A running sandbox is frozen for the capture; a
	// stopped or paused one is captured as it is. ErrNotFound when the
	// sandbox has no container.
	Commit(ctx context.Context, sandboxID, ref string, cfg ImageConfig) (Image, error)
	// InspectImage reports a local image. ErrImageNotFound when it is not there.
	InspectImage(ctx context.Context, ref string) (Image, error)
	// RemoveImage removes a local image by reference. An image that is not
	// there is not an error; one a container still uses is ErrImageInUse.
	RemoveImage(ctx context.Context, ref string) error
	// TagImage gives the local image src the reference dst too (the same
	// image, no copy). ErrImageNotFound when src is not there.
	TagImage(ctx context.Context, src, dst string) error
}

// ImageCollector is a Runtime that keeps copies of images of its own
// (the oci runtime's unpacked images) and removes the ones nothing uses:
// no sandbox (whatever its state), no create in progress, no reference
// in keep (the pool's classes, the default image). One pass removes a
// bounded number; More says that more were left for the next pass. Safe
// to call at any time, concurrently with creates.
type ImageCollector interface {
	CollectImages(ctx context.Context, keep []string) (CollectResult, error)
}

// CollectResult is what one CollectImages pass did.
type CollectResult struct {
	Removed int
	More    bool
}

// Puller pulls images from registries into the engine's store. The
// docker runtime implements it.
type Puller interface {
	// PullImage pulls ref (a normalized reference) with auth (nil:
	// anonymous), reporting the bytes downloaded so far to progress (may
	// be nil) as the engine tells them. It returns when the image is
	// present. Its errors: ErrNotInRegistry (the registry has no such
	// image, or hides it from these credentials), ErrRegistryAuth (the
	// registry refused the credentials, or asked for some and got none),
	// ErrRegistryUnavailable (the registry did not answer, or broke off
	// mid-pull), ErrUnavailable (the engine), or the context's error.
	// The engine keeps no partial image: a failed pull tags nothing.
	PullImage(ctx context.Context, ref string, auth *RegistryAuth, progress func(PullProgress)) error
	// CheckAccess asks ref's registry, with auth (nil: anonymous), for
	// ref's manifest: nil when the registry serves it to that
	// credential. It never answers from the engine's local store (a pull
	// of an image the engine holds may be satisfied there without the
	// registry seeing the credential), and it pulls nothing. Its errors
	// are PullImage's.
	CheckAccess(ctx context.Context, ref string, auth *RegistryAuth) error
}

// Pusher pushes local images to a registry (a cluster shares its
// templates through one). The docker runtime implements it.
type Pusher interface {
	// PushImage pushes the local image src as dst (a registry reference
	// with a tag) with auth (nil: anonymous) and returns the digest of the
	// manifest the registry now holds ("sha256:…"). The engine keeps src
	// and no tag dst. Its errors are PullImage's.
	PushImage(ctx context.Context, src, dst string, auth *RegistryAuth) (digest string, err error)
}

// RegistryAuth is a credential for one registry.
type RegistryAuth struct {
	// ServerAddress is the registry's host ("127.0.0.1:5000",
	// "docker.io").
	ServerAddress string
	Username      string
	// Password is the password or token.
	Password string
}

// PullProgress is how far a pull is: bytes downloaded of the layers the
// engine has announced so far (Total grows as layers are announced).
type PullProgress struct {
	Done, Total int64
}

// Errors of a pull (Puller).
var (
	// ErrNotInRegistry: the registry has no image by that reference.
	ErrNotInRegistry = errors.New("image not found in the registry")
	// ErrRegistryAuth: the registry refused the credentials.
	ErrRegistryAuth = errors.New("the registry refused the credentials")
	// ErrRegistryUnavailable: the registry could not be reached or broke
	// off the pull; retry later.
	ErrRegistryUnavailable = errors.New("registry unavailable")
)

// ErrImageInUse: a container still uses the image.
var ErrImageInUse = errors.New("image in use by a container")

// ImageConfig is the part of an image's configuration sandboxd sets.
type ImageConfig struct {
	Env        []string // KEY=value
	Cmd        []string
	Entrypoint []string
	WorkingDir string
	User       string
	Labels     map[string]string
}

// Image is a local image.
type Image struct {
	ID   string
	Size int64
	// Refs are the references the engine knows it by: its repository
	// tags and digests ("127.0.0.1:5000/t/x:v1", "…/t/x@sha256:…").
	Refs   []string
	Config ImageConfig
}
