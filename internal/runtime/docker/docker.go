// Package docker implements runtime.Runtime on the Docker Engine API
// (github.com/moby/moby/client). The container contract it keeps is described
// in package runtime's documentation.
package docker

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Defaults for Options fields left zero.
const (
	// DefaultStopTimeout is the agent's grace period between SIGTERM and
	// SIGKILL on Stop: the agent gives its processes 5 s to exit, then
	// shuts its server down; Docker's own default leaves it that room.
	DefaultStopTimeout = 10 * time.Second
	// DefaultAgentReadyTimeout bounds WaitAgentReady. A healthy agent
	// answers within tens of milliseconds of the container starting; a slow
	// engine on a loaded host may need seconds.
	DefaultAgentReadyTimeout = 20 * time.Second
	// DefaultNetwork is the network a sandbox with Spec.Network joins.
	DefaultNetwork = "bridge"
	// DefaultGVisorRuntime is the name scripts/setup-gvisor.sh registers
	// runsc under in the engine's configuration.
	DefaultGVisorRuntime = "runsc"

	// cleanupTimeout bounds undo and diagnostics work done on a fresh
	// context after the caller's context may have ended.
	cleanupTimeout = 30 * time.Second
	// maxUnixSocketPath is sun_path's size on Linux, terminator included.
	maxUnixSocketPath = 108
)

// Options configure a Runtime.
type Options struct {
	// Client talks to the engine. When nil, New creates one from the
	// environment (DOCKER_HOST etc.) and Close closes it.
	Client *client.Client
	// NodeID is written to every container's sandboxd.node label; ListOurs
	// returns only this node's sandboxes. Required.
	NodeID string
	// SocketRoot is the host directory holding one agent socket directory
	// per sandbox (<SocketRoot>/<sandbox id>). Required, absolute; created
	// 0700 if missing.
	SocketRoot string
	// Network is the engine network for sandboxes with Spec.Network
	// (default DefaultNetwork).
	Network string
	// StopTimeout is Stop's grace period (default DefaultStopTimeout).
	StopTimeout time.Duration
	// AgentReadyTimeout bounds each WaitAgentReady, including the one in
	// Create and Start (default DefaultAgentReadyTimeout). The caller's
	// context may end it sooner.
	AgentReadyTimeout time.Duration
	// Logger receives debug and warning records (default: discard).
	Logger *slog.Logger
	// GVisorRuntime is the engine's name for runsc, used for sandboxes
	// with runtime.IsolationGVisor (default DefaultGVisorRuntime).
	GVisorRuntime string
	// EngineSeccomp runs runc sandboxes under the engine's default seccomp
	// profile instead of the sandboxes' own (seccomp.go): for benchmarks
	// that compare the two (bench/agentbench). The daemon never sets it.
	EngineSeccomp bool
	// NameKey keys the containers' names (see ContainerName): with it, a
	// container's name, which the engine's resolver answers to every
	// container on the same network, tells nothing of the sandbox id. The
	// daemon keeps one per node, in its data directory. Empty, the names
	// are an unkeyed hash of the id (tests and benchmarks): still one-way,
	// but anyone may compute a known id's name.
	NameKey []byte
	// QualifyNames names each container "<name>.<node id>" instead of
	// "<name>" (see ContainerName). Cluster mode sets it: a sandbox that failed over
	// keeps its id on its new node, and where two nodes share an engine
	// (tests, a node restarted on the host it left) the stale node's
	// container and the new owner's must not collide, nor may the stale
	// node's cleanup reach the new owner's.
	QualifyNames bool
	// DiskProbeImage is a local image DiskLimits may create (never start)
	// a container from, on an overlay2 engine, to learn whether it
	// enforces a size. Empty: such an engine is taken as not enforcing.
	DiskProbeImage string
}

// Runtime is the Docker implementation of runtime.Runtime.
type Runtime struct {
	cli        *client.Client
	ownsClient bool
	opts       Options
	log        *slog.Logger

	mu       sync.Mutex
	cpuPrevs map[string]cpuSample // last Stats sample per sandbox id
	// diskSizes caches Usage's writable-layer size per sandbox id
	// (usage.go): the engine walks the layer's files to count it.
	diskSizes sync.Map       // string → diskSize
	pids      map[string]int // host pid of each sandbox's agent (boot.go)

	boots [bootLockStripes]sync.Mutex // see bootLock

	// commitLeftoverAge is commitLeftoverAge (tests shorten it).
	commitLeftoverAge time.Duration
	// The disk limits, latched by DiskLimits (disk.go): disk is written
	// under diskMu before diskLatched is set, and read only after.
	diskLatched atomic.Bool
	diskMu      sync.Mutex
	disk        diskState

	// agentOOMScore is the agent's oom_score_adj: -1000 (never the OOM
	// killer's victim: when the agent dies the sandbox does) where the
	// engine may lower scores, else 0; either way the agent starts its
	// children 1000 above itself (cmd/toolboxd/oom.go).
	agentOOMScore int
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a Runtime. It does not contact the engine; the first call does.
func New(opts Options) (*Runtime, error) {
	if opts.NodeID == "" {
		return nil, errors.New("docker runtime: NodeID is required")
	}
	if opts.QualifyNames && !naming.ValidLabel(opts.NodeID) {
		// It becomes part of every container's name.
		return nil, fmt.Errorf("docker runtime: node id %q is not a DNS label (lowercase letters, digits and '-')", opts.NodeID)
	}
	if !filepath.IsAbs(opts.SocketRoot) {
		return nil, fmt.Errorf("docker runtime: SocketRoot %q must be an absolute path", opts.SocketRoot)
	}
	opts.SocketRoot = filepath.Clean(opts.SocketRoot)
	// <root>/<id>/agent.sock must fit in a unix socket address for the
	// API's ids at least; Create checks each id (see socketPathFits).
	if n := socketPathLen(opts.SocketRoot, len(apiSandboxIDExample)); n >= maxUnixSocketPath {
		return nil, fmt.Errorf("docker runtime: SocketRoot %q too long for unix socket paths (%d bytes, max %d)", opts.SocketRoot, n, maxUnixSocketPath-1)
	}
	if err := os.MkdirAll(opts.SocketRoot, 0o700); err != nil {
		return nil, fmt.Errorf("docker runtime: create socket root: %w", err)
	}
	if opts.Network == "" {
		opts.Network = DefaultNetwork
	}
	if opts.GVisorRuntime == "" {
		opts.GVisorRuntime = DefaultGVisorRuntime
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.AgentReadyTimeout <= 0 {
		opts.AgentReadyTimeout = DefaultAgentReadyTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{cli: opts.Client, opts: opts, log: log, cpuPrevs: make(map[string]cpuSample), pids: make(map[string]int), commitLeftoverAge: commitLeftoverAge}
	if mayLowerOOMScores() {
		r.agentOOMScore = -1000
	}
	if r.cli == nil {
		cli, err := client.New(client.FromEnv)
		if err != nil {
			return nil, fmt.Errorf("docker runtime: client: %w", err)
		}
		r.cli, r.ownsClient = cli, true
	}
	return r, nil
}

// Isolations reports the isolations the engine offers: always
// runtime.IsolationContainer, and runtime.IsolationGVisor when the engine
// has runsc registered under Options.GVisorRuntime.
func (r *Runtime) Isolations(ctx context.Context) (_ []runtime.Isolation, err error) {
	defer func() { err = engineErr(err) }()
	info, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, fmt.Errorf("engine info: %w", err)
	}
	out := []runtime.Isolation{runtime.IsolationContainer}
	if _, ok := info.Info.Runtimes[r.opts.GVisorRuntime]; ok {
		out = append(out, runtime.IsolationGVisor)
	}
	return out, nil
}

// Close releases the engine client if New created it. Sandboxes keep running.
func (r *Runtime) Close() error {
	if r.ownsClient {
		return r.cli.Close()
	}
	return nil
}

// SocketDir is the host directory bind-mounted at runtime.AgentSocketDir in
// the sandbox. The caller must pass a valid sandbox id.
func (r *Runtime) SocketDir(sandboxID string) string {
	return filepath.Join(r.opts.SocketRoot, sandboxID)
}

// AgentSocketPath is the host path of the sandbox agent's unix socket, for
// callers that build their own transport (DialAgent is the simple way).
func (r *Runtime) AgentSocketPath(sandboxID string) string {
	return filepath.Join(r.SocketDir(sandboxID), runtime.AgentSocketName)
}

// apiSandboxIDExample has the length of the ids the API hands out.
const apiSandboxIDExample = "sb-0123456789abcdef"

func socketPathLen(root string, idLen int) int {
	return len(root) + 1 + idLen + 1 + len(runtime.AgentSocketName)
}

func checkID(id string) error {
	if !runtime.ValidSandboxID(id) {
		return fmt.Errorf("%w: sandbox id %q is not a DNS label", runtime.ErrInvalidSpec, id)
	}
	return nil
}

// Create implements runtime.Runtime. Its steps, each undone on a later
// failure: the socket directory (only when this call made it), the container
// (create), the agent's sockets, start, the socket handoff and agent
// readiness (boot.go).
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (_ runtime.Instance, err error) {
	defer func() { err = engineErr(err) }()
	id := spec.SandboxID
	if err := spec.Validate(); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if spec.RestoreImage != "" {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: the Docker runtime restores no checkpoint", id, runtime.ErrCheckpointUnsupported)
	}
	if n := socketPathLen(r.opts.SocketRoot, len(id)); n >= maxUnixSocketPath {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: agent socket path too long (%d bytes, max %d)", id, runtime.ErrInvalidSpec, n, maxUnixSocketPath-1)
	}
	if fi, err := os.Stat(spec.AgentBinary); err != nil || !fi.Mode().IsRegular() {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: agent binary %s is not a regular file", id, runtime.ErrInvalidSpec, spec.AgentBinary)
	}

	// The socket directory. A directory left by a crash (no container) is
	// reused; one that belongs to a live sandbox with the same id is left
	// alone because container creation below fails with a conflict.
	sockDir := r.SocketDir(id)
	madeDir := false
	switch err := os.Mkdir(sockDir, 0o700); {
	case err == nil:
		madeDir = true
	case errors.Is(err, os.ErrExist):
	default:
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: socket dir: %w", id, err)
	}
	var containerID string
	defer func() {
		if err == nil {
			return
		}
		// Undo with a fresh context: the caller's may be what failed.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if containerID != "" {
			if rmErr := r.remove(ctx, containerID); rmErr != nil {
				r.log.Warn("create: undo: remove container", "sandbox", id, "container", containerID, "err", rmErr)
				err = errors.Join(err, fmt.Errorf("undo: remove container %s: %w", containerID, rmErr))
				return // keep the socket dir while its container may still exist
			}
		}
		if madeDir || containerID != "" {
			if rmErr := os.RemoveAll(sockDir); rmErr != nil {
				err = errors.Join(err, fmt.Errorf("undo: remove socket dir: %w", rmErr))
			}
		}
	}()

	storage, err := r.storageOpt(ctx, spec)
	if err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: disk limit: %w", id, err)
	}
	attempt := newAttemptID()
	sealed, err := r.sealToken(id, spec.AgentToken)
	if err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	hc := r.hostConfig(spec, sockDir)
	hc.StorageOpt = storage
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       r.name(id),
		Config:     r.containerConfig(spec, attempt, sealed),
		HostConfig: hc,
	})
	if err != nil {
		err = r.classifyCreateErr(ctx, spec.Image, err)
		if errors.Is(err, runtime.ErrAlreadyExists) {
			// Even if this call made the directory, a concurrent Create of
			// the same id won the name and now uses it.
			madeDir = false
		} else {
			// The engine may have created the container even though we never
			// saw its answer (a cancelled context, a dropped connection): if
			// a container by this name carries this call's attempt label, it
			// is ours to undo.
			containerID = r.findAttempt(ctx, r.name(id), attempt)
		}
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	containerID = created.ID

	lock := r.bootLock(id)
	lock.Lock()
	defer lock.Unlock()
	if err := r.startAgent(ctx, id, spec.Isolation == runtime.IsolationGVisor, []byte(spec.AgentToken), func() error {
		_, err := r.cli.ContainerStart(ctx, containerID, client.ContainerStartOptions{})
		return classifyStartErr(err)
	}); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	return runtime.Instance{SandboxID: id, ContainerID: containerID, State: runtime.StateRunning}, nil
}

// labelAttempt marks the Create call that made a container, so that an
// interrupted Create removes exactly its own container and never another
// call's container with the same name.
const labelAttempt = runtime.LabelPrefix + "attempt"

func newAttemptID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand contract)
	return hex.EncodeToString(b[:])
}

// namePrefix starts every container name this runtime gives.
const namePrefix = "sandbox-"

// ContainerName is the engine's name of a sandbox's container:
// "sandbox-" and 32 hex digits of HMAC-SHA256(Options.NameKey, sandbox
// id), followed by "." and the node id with Options.QualifyNames. The
// engine's resolver answers a container's name (and its hostname, the
// same label) to every container on its network, forwards and PTR
// records alike, so the name must not be the sandbox id: a sandbox with
// network would learn its neighbours' ids. Deterministic, so that every
// lookup by sandbox id stays one engine call.
func (r *Runtime) ContainerName(sandboxID string) string {
	n := r.label(sandboxID)
	if r.opts.QualifyNames {
		return n + "." + r.opts.NodeID
	}
	return n
}

// label is the first label of ContainerName, which is also the
// container's hostname.
func (r *Runtime) label(sandboxID string) string {
	m := hmac.New(sha256.New, r.opts.NameKey)
	m.Write([]byte(sandboxID))
	return namePrefix + hex.EncodeToString(m.Sum(nil)[:16])
}

func (r *Runtime) name(sandboxID string) string { return r.ContainerName(sandboxID) }

// findAttempt returns the id of the container named name if this Create
// attempt made it, or "". Best effort, with a fresh context.
func (r *Runtime) findAttempt(ctx context.Context, name, attempt string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	res, err := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil || res.Container.Config == nil || res.Container.Config.Labels[labelAttempt] != attempt {
		return ""
	}
	return res.Container.ID
}

func (r *Runtime) containerConfig(spec runtime.Spec, attempt, sealedToken string) *container.Config {
	env := make([]string, 0, len(spec.Env)+2)
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	// Not the agent token: see token.go.
	if spec.Isolation != runtime.IsolationGVisor { // see startAgent
		env = append(env, runtime.EnvAgentHandoff+"="+runtime.AgentSocketDir+"/"+runtime.AgentHandoffName)
	} else {
		env = append(env, runtime.EnvAgentIsolation+"="+string(runtime.IsolationGVisor))
	}

	labels := make(map[string]string, len(spec.Labels)+3)
	maps.Copy(labels, spec.Labels)
	labels[runtime.LabelManaged] = "1"
	labels[runtime.LabelNode] = r.opts.NodeID
	labels[runtime.LabelSandbox] = spec.SandboxID
	labels[labelAttempt] = attempt
	labels[labelAgentToken] = sealedToken

	return &container.Config{
		Image:    spec.Image,
		Hostname: r.label(spec.SandboxID), // not the id: see ContainerName
		Env:      env,
		Labels:   labels,
		// With an explicit entrypoint and no Cmd the engine ignores the
		// image's CMD: the agent runs without arguments. WorkingDir and User
		// stay the image's (the agent runs as the image's user, root for ours).
		Entrypoint: []string{runtime.AgentPath},
	}
}

func (r *Runtime) hostConfig(spec runtime.Spec, sockDir string) *container.HostConfig {
	networkMode := container.NetworkMode("none")
	if spec.Network {
		networkMode = container.NetworkMode(r.opts.Network)
	}
	var pids *int64
	if spec.PidsLimit > 0 {
		pids = &spec.PidsLimit
	}
	memory := spec.MemoryMB << 20
	noInit := false

	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: spec.AgentBinary, Target: runtime.AgentPath, ReadOnly: true},
		// Read-only: nothing in the sandbox may replace the agent's socket
		// or write to the host's disk through it; the agent gets its
		// socket from the daemon (boot.go) and connecting needs no write.
		// Under gVisor the agent makes its own (see startAgent).
		{Type: mount.TypeBind, Source: sockDir, Target: runtime.AgentSocketDir, ReadOnly: spec.Isolation != runtime.IsolationGVisor},
	}
	for _, m := range spec.Mounts {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.HostPath, Target: m.Path, ReadOnly: m.ReadOnly})
	}
	var ociRuntime string // the engine's default (runc)
	securityOpt := []string{"seccomp=" + seccompJSON()}
	if r.opts.EngineSeccomp {
		securityOpt = nil
	}
	if spec.Isolation == runtime.IsolationGVisor {
		ociRuntime = r.opts.GVisorRuntime
		securityOpt = nil // see seccomp.go
	}
	return &container.HostConfig{
		Runtime:     ociRuntime,
		NetworkMode: networkMode,
		Privileged:  false,
		Init:        &noInit, // the agent is PID 1 and reaps zombies
		CapDrop:     []string{"ALL"},
		CapAdd:      runtime.SandboxCapabilities, // see there for why each
		// Its own cgroup namespace: /proc/self/cgroup and the cgroup mounts
		// show "/", not the host's hierarchy and container ids.
		CgroupnsMode: container.CgroupnsModePrivate,
		SecurityOpt:  securityOpt,
		// The sandboxes' own seccomp profile (seccomp.go: the engine's
		// default rules, less io_uring); the engine's default AppArmor
		// profile, where present, still applies. no-new-privileges is
		// not set on purpose: it would disable setuid programs, and sudo
		// from the unprivileged user to root is a feature (E2B's "user"
		// has passwordless sudo). It would protect nothing the caller
		// does not already have: commands run as root unless asked
		// otherwise. The boundary is the container: dropped capabilities,
		// seccomp, no devices, limits.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		// The agent's own output only; bounded so a chatty agent cannot fill the disk.
		LogConfig:   container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "2"}},
		Mounts:      mounts,
		OomScoreAdj: r.agentOOMScore,
		Resources: container.Resources{
			NanoCPUs:   int64(math.Round(spec.CPU * 1e9)),
			Memory:     memory,
			MemorySwap: memory, // memory+swap = memory: no swap beyond the limit
			PidsLimit:  pids,
		},
	}
}

// classifyCreateErr maps a ContainerCreate error onto the runtime sentinels.
// The engine answers 404 for a missing image but also for a missing network,
// so a not-found is attributed to the image only after checking it.
func (r *Runtime) classifyCreateErr(ctx context.Context, image string, err error) error {
	switch {
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("%w: %w", runtime.ErrAlreadyExists, err)
	case cerrdefs.IsNotFound(err):
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, ierr := r.cli.ImageInspect(ctx, image); cerrdefs.IsNotFound(ierr) {
			return fmt.Errorf("%w: %s (create does not pull: the service pulls before it)", runtime.ErrImageNotFound, image)
		}
	case cerrdefs.IsInvalidArgument(err):
		return fmt.Errorf("%w: %w", runtime.ErrInvalidSpec, err)
	}
	return err
}

// classifyStartErr maps a ContainerStart error onto the runtime sentinels.
// The engine answers 400 for a spec only the OCI runtime could check; the
// one a request can cause is a mount over a file of the image, whose
// message names host paths (the volume's directory): it is replaced.
func classifyStartErr(err error) error {
	switch {
	case err == nil || !cerrdefs.IsInvalidArgument(err):
		return err
	case strings.Contains(err.Error(), "not a directory"):
		return fmt.Errorf("%w: a mount's path is a file in the image; a volume needs a directory or a path that does not exist", runtime.ErrInvalidSpec)
	default:
		return fmt.Errorf("%w: the engine could not start the container: %w", runtime.ErrInvalidSpec, err)
	}
}

// remove force-removes a container; already gone is success.
func (r *Runtime) remove(ctx context.Context, containerID string) error {
	for {
		_, err := r.cli.ContainerRemove(ctx, containerID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil:
			// The engine's removal may have stopped the kernel's counting
			// of every sandbox's disk (qgroup.go).
			if err := r.repairQgroups(); err != nil {
				r.log.Warn("disk limits: rescan the qgroups after a removal", "err", err)
			}
			return nil
		case cerrdefs.IsNotFound(err):
			return nil
		case cerrdefs.IsConflict(err):
			// "removal already in progress" (a concurrent Destroy): wait
			// for the other remover rather than report a failure.
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (while waiting for a concurrent removal)", err)
			case <-time.After(50 * time.Millisecond):
			}
		default:
			return err
		}
	}
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, sandboxID string) (err error) {
	defer func() { err = engineErr(err) }()
	if err := checkID(sandboxID); err != nil {
		return err
	}
	lock := r.bootLock(sandboxID)
	lock.Lock()
	defer lock.Unlock()
	// A running sandbox keeps its agent, and the agent its socket: a new
	// boot would replace the socket under it.
	st, err := r.Inspect(ctx, sandboxID)
	switch {
	case err != nil:
		return fmt.Errorf("start sandbox %s: %w", sandboxID, err)
	case st.State == runtime.StateMissing:
		return fmt.Errorf("start sandbox %s: %w", sandboxID, runtime.ErrNotFound)
	case st.State == runtime.StateRunning:
		err = r.waitAgentReady(ctx, sandboxID)
	default:
		var gvisor bool
		var token []byte
		if gvisor, token, err = r.bootInfo(ctx, sandboxID); err != nil {
			return fmt.Errorf("start sandbox %s: %w", sandboxID, err)
		}
		err = r.startAgent(ctx, sandboxID, gvisor, token, func() error {
			_, err := r.cli.ContainerStart(ctx, r.name(sandboxID), client.ContainerStartOptions{})
			return notFound(err)
		})
	}
	if err != nil {
		return fmt.Errorf("start sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// Stop implements runtime.Runtime.
func (r *Runtime) Stop(ctx context.Context, sandboxID string) (err error) {
	defer func() { err = engineErr(err) }()
	if err := checkID(sandboxID); err != nil {
		return err
	}
	timeout := int(math.Ceil(r.opts.StopTimeout.Seconds()))
	_, err = r.cli.ContainerStop(ctx, r.name(sandboxID), client.ContainerStopOptions{Timeout: &timeout})
	r.forgetPID(sandboxID) // whatever happened, the next pid comes from the engine
	if err != nil {
		return fmt.Errorf("stop sandbox %s: %w", sandboxID, notFound(err))
	}
	return nil
}

// Pause implements runtime.Runtime: docker pause, the cgroup freezer
// (runsc pauses its sandbox the same way).
func (r *Runtime) Pause(ctx context.Context, sandboxID string) (err error) {
	defer func() { err = engineErr(err) }()
	return r.freeze(ctx, sandboxID, true)
}

// Resume implements runtime.Runtime: docker unpause.
func (r *Runtime) Resume(ctx context.Context, sandboxID string) (err error) {
	defer func() { err = engineErr(err) }()
	return r.freeze(ctx, sandboxID, false)
}

// freezeAttempts bounds the pauses a freeze tries when the freezer gives
// up (about 1.2 s of waiting in all).
const freezeAttempts = 4

// freeze pauses (or unpauses) a sandbox. The engine refuses to pause a
// paused container and to unpause one that is not paused, so a refusal is
// checked against the container's state: the state asked for is success.
func (r *Runtime) freeze(ctx context.Context, sandboxID string, pause bool) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	verb := "resume"
	var err error
	if pause {
		verb = "pause"
		// The cgroup freezer gives up ("unable to freeze") while a task
		// of the sandbox will not stop in time, as one blocked in the
		// kernel on a slow file system commit does; a moment later it
		// freezes. The engine's message is the only sign of it.
		for attempt := 1; ; attempt++ {
			_, err = r.cli.ContainerPause(ctx, r.name(sandboxID), client.ContainerPauseOptions{})
			if err == nil || attempt == freezeAttempts || !strings.Contains(err.Error(), "unable to freeze") {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s sandbox %s: %w (after: %w)", verb, sandboxID, ctx.Err(), err)
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
	} else {
		_, err = r.cli.ContainerUnpause(ctx, r.name(sandboxID), client.ContainerUnpauseOptions{})
	}
	if err == nil {
		return nil
	}
	st, ierr := r.Inspect(ctx, sandboxID)
	switch {
	case ierr != nil:
		return fmt.Errorf("%s sandbox %s: %w", verb, sandboxID, err)
	case st.State == runtime.StateMissing:
		return fmt.Errorf("%s sandbox %s: %w", verb, sandboxID, runtime.ErrNotFound)
	case st.State != runtime.StateRunning:
		return fmt.Errorf("%s sandbox %s (%s): %w", verb, sandboxID, st.Detail, runtime.ErrNotRunning)
	case st.Paused == pause:
		return nil
	}
	return fmt.Errorf("%s sandbox %s: %w", verb, sandboxID, err)
}

// Destroy implements runtime.Runtime.
func (r *Runtime) Destroy(ctx context.Context, sandboxID string) (err error) {
	defer func() { err = engineErr(err) }()
	if err := checkID(sandboxID); err != nil {
		return err
	}
	if err := r.remove(ctx, r.name(sandboxID)); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", sandboxID, err)
	}
	r.mu.Lock()
	delete(r.cpuPrevs, sandboxID)
	r.diskSizes.Delete(sandboxID)
	delete(r.pids, sandboxID)
	r.mu.Unlock()
	if err := os.RemoveAll(r.SocketDir(sandboxID)); err != nil {
		return fmt.Errorf("destroy sandbox %s: remove socket dir: %w", sandboxID, err)
	}
	return nil
}

// Inspect implements runtime.Runtime.
func (r *Runtime) Inspect(ctx context.Context, sandboxID string) (_ runtime.Status, err error) {
	defer func() { err = engineErr(err) }()
	if err := checkID(sandboxID); err != nil {
		return runtime.Status{}, err
	}
	res, err := r.cli.ContainerInspect(ctx, r.name(sandboxID), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return runtime.Status{State: runtime.StateMissing}, nil
	}
	if err != nil {
		return runtime.Status{}, fmt.Errorf("inspect sandbox %s: %w", sandboxID, err)
	}
	s := res.Container.State
	if s == nil {
		return runtime.Status{}, fmt.Errorf("inspect sandbox %s: engine returned no state", sandboxID)
	}
	return runtime.Status{
		State:      mapState(s.Status),
		ExitCode:   s.ExitCode,
		OOMKilled:  s.OOMKilled,
		StartedAt:  parseEngineTime(s.StartedAt),
		FinishedAt: parseEngineTime(s.FinishedAt),
		Paused:     s.Status == container.StatePaused,
		Detail:     string(s.Status),
	}, nil
}

// ListOurs implements runtime.Runtime. One engine list by the node's label
// serves it and two repairs: a container named as an older daemon named
// it is renamed (adoptName), and an intermediate container a crashed
// Commit left is removed (sweepCommitLeftover).
func (r *Runtime) ListOurs(ctx context.Context) (_ []runtime.Instance, err error) {
	defer func() { err = engineErr(err) }()
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", runtime.LabelNode+"="+r.opts.NodeID),
	})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]runtime.Instance, 0, len(res.Items))
	for _, c := range res.Items {
		if c.Labels[labelCommit] == "1" {
			r.sweepCommitLeftover(ctx, c.ID, c.Created)
			continue
		}
		if c.Labels[runtime.LabelManaged] != "1" {
			continue
		}
		r.adoptName(ctx, c.ID, c.Labels[runtime.LabelSandbox], c.Names)
		out = append(out, runtime.Instance{
			SandboxID:   c.Labels[runtime.LabelSandbox],
			ContainerID: c.ID,
			State:       mapState(c.State),
			Paused:      c.State == container.StatePaused,
		})
	}
	slices.SortFunc(out, func(a, b runtime.Instance) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	return out, nil
}

// commitLeftoverAge is how old Commit's intermediate container must be
// before ListOurs removes it: Commit removes its own within a second or
// two, so an older one was left by a daemon that died mid-commit.
const commitLeftoverAge = 10 * time.Minute

// sweepCommitLeftover removes Commit's intermediate container (it never
// runs) once it is older than commitLeftoverAge. Best effort, logged.
func (r *Runtime) sweepCommitLeftover(ctx context.Context, containerID string, created int64) {
	if time.Since(time.Unix(created, 0)) < r.commitLeftoverAge {
		return
	}
	if err := r.remove(ctx, containerID); err != nil {
		r.log.Warn("remove a commit's leftover intermediate container", "container", containerID, "err", err)
	}
}

// adoptName renames a container of ours whose name is not ContainerName:
// one made by a daemon from before the names were keyed (named by the
// sandbox id) or under another key. ListOurs calls it, so the daemon's
// startup reconcile renames every such container before the daemon looks
// one up by name; the engine renames a running container in place (its
// resolver records follow). A failure is logged: the container is still
// listed, and the next ListOurs tries again.
func (r *Runtime) adoptName(ctx context.Context, containerID, sandboxID string, names []string) {
	if !runtime.ValidSandboxID(sandboxID) {
		return
	}
	want := r.ContainerName(sandboxID)
	if slices.Contains(names, "/"+want) {
		return
	}
	if _, err := r.cli.ContainerRename(ctx, containerID, client.ContainerRenameOptions{NewName: want}); err != nil {
		r.log.Warn("rename a sandbox's container to its keyed name", "sandbox", sandboxID, "container", containerID, "names", names, "err", err)
		return
	}
	r.log.Info("renamed a sandbox's container to its keyed name", "sandbox", sandboxID, "container", containerID, "was", names)
}

// notFound turns the engine's not-found into runtime.ErrNotFound.
func notFound(err error) error {
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%w: %w", runtime.ErrNotFound, err)
	}
	return err
}

func mapState(s container.ContainerState) runtime.State {
	switch s {
	case container.StateCreated:
		return runtime.StateCreated
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		return runtime.StateRunning
	default: // exited, dead, removing
		return runtime.StateExited
	}
}

// parseEngineTime parses the engine's RFC 3339 times; the engine's "never"
// (0001-01-01T00:00:00Z) and anything unparsable become the zero time.
func parseEngineTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}
