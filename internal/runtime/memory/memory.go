// Package memory implements runtime.Runtime without an engine: each sandbox
// is a directory on the host and a real agent (package agent's handler,
// the one toolboxd serves) running inside this process on the sandbox's
// unix socket. Commands and files therefore go through the real agent
// protocol, and the create chain, the facades and the reconciler can be
// tested without Docker or root, in milliseconds.
//
// What it is not: a sandbox. Processes run on the host as the daemon's
// user, absolute paths are the host's, limits and mounts are recorded but
// not applied, and Stats measures nothing. The conformance suite runs
// against it with those facts declared lacking (see runtimetest.Config).
//
// # Layout
//
// Every sandbox gets <Root>/<sandbox id>/, made by Create and removed by
// Destroy:
//
//	sock/agent.sock   the agent's socket (sock/ is the SocketDir, 0700)
//	etc/passwd        root and user, both mapped to the daemon's uid
//	root/, home/user/ their homes: relative paths resolve there
//
// # Stand-in agents
//
// Spec.AgentBinary must name a regular file, as for Docker; its content is
// not used, because the agent runs in-process. The exception is a script
// (a file starting with "#!", such as runtimetest.WriteScriptAgent's
// stand-ins for agents that hang or crash): it runs as a host process in
// place of the agent, its exit is the sandbox's exit and its output the
// logs tail quoted by runtime.AgentNotReadyError.
package memory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent/server"
	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/filesystem"
	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Defaults for Options fields left zero.
const (
	// DefaultAgentReadyTimeout bounds WaitAgentReady. The in-process agent
	// answers at once; the bound matters only for stand-ins.
	DefaultAgentReadyTimeout = 10 * time.Second
	// DefaultStopTimeout is Stop's grace period for the agent's processes
	// (and a stand-in) between SIGTERM and SIGKILL.
	DefaultStopTimeout = 5 * time.Second

	// probeBackoffMin and probeBackoffMax space readiness probes.
	probeBackoffMin = 2 * time.Millisecond
	probeBackoffMax = 50 * time.Millisecond
	// probeTimeout bounds one GET /health.
	probeTimeout = 2 * time.Second
	// logsTailBytes bounds a stand-in's output kept for errors.
	logsTailBytes = 2048
	// maxUnixSocketPath is sun_path's size on Linux, terminator included.
	maxUnixSocketPath = 108
)

// DefaultImages are the images `make setup` builds; a Runtime created
// without Options.Images knows these.
var DefaultImages = []string{"sandboxd/base:bookworm", "sandboxd/busybox:latest", "sandboxd/code-interpreter:v1"}

// Options configure a Runtime.
type Options struct {
	// NodeID owns the runtime's sandboxes. Required (as for Docker); one
	// Runtime only ever lists its own sandboxes anyway.
	NodeID string
	// Root holds one directory per sandbox. Required, absolute, short
	// enough for unix socket paths; created 0700 if missing.
	Root string
	// Images are the image references that exist "locally"; others fail
	// with runtime.ErrImageNotFound. Nil means DefaultImages.
	Images []string
	// AgentReadyTimeout bounds each WaitAgentReady, including the one in
	// Create and Start (default DefaultAgentReadyTimeout).
	AgentReadyTimeout time.Duration
	// StopTimeout is Stop's grace period (default DefaultStopTimeout).
	StopTimeout time.Duration
	// Logger receives the agents' server-side records (default: discard).
	Logger *slog.Logger
}

// Runtime is the in-memory runtime.Runtime. Create it with New and release
// it with Close.
type Runtime struct {
	opts   Options
	images map[string]bool
	log    *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	closed    bool
}

var _ runtime.Runtime = (*Runtime)(nil)

// sandbox is one sandbox. Its fields are guarded by Runtime.mu; op
// serializes the lifecycle calls (Create's boot, Start, Stop, Destroy) of
// this sandbox only.
type sandbox struct {
	op sync.Mutex

	id, containerID string
	spec            runtime.Spec
	dir             string
	gone            bool // destroyed (or an undone Create): the entry is stale

	state                 runtime.State
	paused                bool // Pause: recorded only (see Pause)
	exitCode              int
	startedAt, finishedAt time.Time
	run                   *run  // the current boot; nil when not running
	lastLogs              *tail // the output of the last boot
}

// run is one boot of a sandbox: the in-process agent or a stand-in.
type run struct {
	// stop ends the run within grace and returns once it has ended.
	stop func(grace time.Duration)
	// done is closed when the run ended, on its own or by stop.
	done chan struct{}
	// exitCode is valid once done is closed.
	exitCode int
	logs     *tail
}

// New returns a Runtime.
func New(opts Options) (*Runtime, error) {
	if opts.NodeID == "" {
		return nil, errors.New("memory runtime: NodeID is required")
	}
	if !filepath.IsAbs(opts.Root) {
		return nil, fmt.Errorf("memory runtime: Root %q must be an absolute path", opts.Root)
	}
	opts.Root = filepath.Clean(opts.Root)
	if n := socketPathLen(opts.Root, len("sb-0123456789abcdef")); n >= maxUnixSocketPath {
		return nil, fmt.Errorf("memory runtime: Root %q too long for unix socket paths (%d bytes, max %d)", opts.Root, n, maxUnixSocketPath-1)
	}
	if err := os.MkdirAll(opts.Root, 0o700); err != nil {
		return nil, fmt.Errorf("memory runtime: create root: %w", err)
	}
	if opts.Images == nil {
		opts.Images = DefaultImages
	}
	if opts.AgentReadyTimeout <= 0 {
		opts.AgentReadyTimeout = DefaultAgentReadyTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	images := make(map[string]bool, len(opts.Images))
	for _, im := range opts.Images {
		images[im] = true
	}
	return &Runtime{opts: opts, images: images, log: log, sandboxes: make(map[string]*sandbox)}, nil
}

// Close stops every sandbox's agent (its processes are killed) and leaves
// the directories in place, as a daemon restart leaves containers. Calls
// after Close fail.
func (r *Runtime) Close() error {
	r.mu.Lock()
	r.closed = true
	all := slices.Collect(maps.Values(r.sandboxes))
	r.mu.Unlock()
	for _, sb := range all {
		sb.op.Lock()
		r.halt(sb, 0)
		sb.op.Unlock()
	}
	return nil
}

// SocketDir is the host directory holding the sandbox's agent socket.
func (r *Runtime) SocketDir(sandboxID string) string {
	return filepath.Join(r.opts.Root, sandboxID, "sock")
}

// AgentSocketPath is the host path of the sandbox agent's unix socket.
func (r *Runtime) AgentSocketPath(sandboxID string) string {
	return filepath.Join(r.SocketDir(sandboxID), runtime.AgentSocketName)
}

// Dir is the sandbox's directory (see the package documentation).
func (r *Runtime) Dir(sandboxID string) string { return filepath.Join(r.opts.Root, sandboxID) }

func socketPathLen(root string, idLen int) int {
	return len(root) + 1 + idLen + len("/sock/") + len(runtime.AgentSocketName)
}

func checkID(id string) error {
	if !runtime.ValidSandboxID(id) {
		return fmt.Errorf("%w: sandbox id %q is not a DNS label", runtime.ErrInvalidSpec, id)
	}
	return nil
}

var errClosed = errors.New("memory runtime closed")

// lookup returns the live sandbox id, or nil.
func (r *Runtime) lookup(id string) *sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sandboxes[id]
}

// Create implements runtime.Runtime. Its steps, each undone on a later
// failure: the id (reserved in memory, so a concurrent Create of the same
// id fails at once), the directory, the boot, agent readiness.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (_ runtime.Instance, err error) {
	id := spec.SandboxID
	if err := spec.Validate(); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if spec.RestoreImage != "" {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: the in-memory runtime restores no checkpoint", id, runtime.ErrCheckpointUnsupported)
	}
	if n := socketPathLen(r.opts.Root, len(id)); n >= maxUnixSocketPath {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: agent socket path too long (%d bytes, max %d)", id, runtime.ErrInvalidSpec, n, maxUnixSocketPath-1)
	}
	if fi, err := os.Stat(spec.AgentBinary); err != nil || !fi.Mode().IsRegular() {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: agent binary %s is not a regular file", id, runtime.ErrInvalidSpec, spec.AgentBinary)
	}
	if err := ctx.Err(); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if !r.images[spec.Image] {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: %s", id, runtime.ErrImageNotFound, spec.Image)
	}

	sb := &sandbox{id: id, containerID: newContainerID(), spec: cloneSpec(spec), dir: r.Dir(id), state: runtime.StateCreated}
	sb.op.Lock()
	defer sb.op.Unlock()
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, errClosed)
	case r.sandboxes[id] != nil:
		r.mu.Unlock()
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, runtime.ErrAlreadyExists)
	}
	r.sandboxes[id] = sb
	r.mu.Unlock()

	defer func() {
		if err != nil {
			r.halt(sb, 0)
			r.forget(sb)
		}
	}()
	if err := r.makeDir(sb); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if err := r.boot(sb); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if err := r.waitAgentReady(ctx, id); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	return runtime.Instance{SandboxID: id, ContainerID: sb.containerID, State: runtime.StateRunning}, nil
}

func newContainerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand contract)
	return "mem-" + hex.EncodeToString(b[:])
}

func cloneSpec(s runtime.Spec) runtime.Spec {
	s.Env = maps.Clone(s.Env)
	s.Labels = maps.Clone(s.Labels)
	s.Mounts = slices.Clone(s.Mounts)
	return s
}

// makeDir makes the sandbox's directory: socket directory, passwd, homes.
// A directory left by an earlier runtime (a "crash") is reused.
func (r *Runtime) makeDir(sb *sandbox) error {
	for _, d := range []string{sb.dir, filepath.Join(sb.dir, "sock"), filepath.Join(sb.dir, "etc"), filepath.Join(sb.dir, "root"), filepath.Join(sb.dir, "home", "user")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("sandbox dir: %w", err)
		}
	}
	// Every account is the daemon's own user: the agent never switches
	// users (it could not, unprivileged) and owns everything it creates.
	uid, gid := os.Getuid(), os.Getgid()
	passwd := fmt.Sprintf("root:x:%d:%d:root:%s:/bin/sh\nuser:x:%d:%d:user:%s:/bin/sh\n",
		uid, gid, filepath.Join(sb.dir, "root"), uid, gid, filepath.Join(sb.dir, "home", "user"))
	if err := os.WriteFile(filepath.Join(sb.dir, "etc", "passwd"), []byte(passwd), 0o600); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	return nil
}

// forget removes sb's directory and its entry (if still its own).
func (r *Runtime) forget(sb *sandbox) {
	if err := os.RemoveAll(sb.dir); err != nil {
		r.log.Warn("remove sandbox dir", "sandbox", sb.id, "err", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb.gone = true
	if r.sandboxes[sb.id] == sb {
		delete(r.sandboxes, sb.id)
	}
}

// boot starts sb (not running; sb.op held): the in-process agent, or the
// stand-in script that AgentBinary is.
func (r *Runtime) boot(sb *sandbox) error {
	var rn *run
	var err error
	if isScript(sb.spec.AgentBinary) {
		rn, err = r.bootStandIn(sb)
	} else {
		rn, err = r.bootAgent(sb)
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	sb.run, sb.lastLogs, sb.state, sb.startedAt, sb.exitCode = rn, rn.logs, runtime.StateRunning, time.Now(), 0
	r.mu.Unlock()
	go func() {
		<-rn.done
		r.mu.Lock()
		defer r.mu.Unlock()
		if sb.run == rn { // it ended on its own, not by halt
			sb.run, sb.state, sb.exitCode, sb.finishedAt = nil, runtime.StateExited, rn.exitCode, time.Now()
		}
	}()
	return nil
}

// isScript reports whether the file at path starts with "#!".
func isScript(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [2]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == "#!"
}

// bootAgent serves the real agent handler on the sandbox's socket.
func (r *Runtime) bootAgent(sb *sandbox) (*run, error) {
	sock := r.AgentSocketPath(sb.id)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	log := r.log.With("sandbox", sb.id)
	users := account.NewDirectory(filepath.Join(sb.dir, "etc", "passwd"))
	procs := process.New(process.Options{Users: users, Env: processEnv(sb.spec.Env), Log: log})
	fsys := filesystem.New(filesystem.Options{Users: users, Log: log})
	srv := &http.Server{
		Handler: server.NewHandler(server.Config{
			Token: sb.spec.AgentToken, Process: procs, Filesystem: fsys, Users: users, Log: log,
		}),
		// Streams live as long as processes do: no read or write timeout.
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	rn := &run{done: make(chan struct{}), logs: &tail{}}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(rn.logs, "serve: %v\n", err)
			rn.exitCode = 1
		}
	}()
	var once sync.Once
	shutdown := func(grace time.Duration) {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			if err := procs.Shutdown(ctx); err != nil {
				log.Warn("stopping processes", "err", err)
			}
			fsys.Close()
			_ = srv.Close()
			<-served
			_ = os.Remove(sock)
			close(rn.done)
		})
	}
	rn.stop = shutdown
	go func() {
		<-served // the server failed on its own: the agent "exited"
		shutdown(0)
	}()
	return rn, nil
}

// processEnv is what toolboxd passes on to its processes of the
// environment the runtime gives it (cmd/toolboxd's sandboxEnv): all but the
// agent's control variables (SANDBOXD_*) and what the agent sets per user.
func processEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		switch {
		case strings.HasPrefix(k, "SANDBOXD_"):
		case k == "HOME", k == "USER", k == "LOGNAME", k == "PATH", k == "HOSTNAME":
		default:
			out[k] = v
		}
	}
	return out
}

// bootStandIn runs the script AgentBinary as the sandbox's first process,
// with the sandbox's environment and the agent token, in root's home.
func (r *Runtime) bootStandIn(sb *sandbox) (*run, error) {
	rn := &run{done: make(chan struct{}), logs: &tail{}}
	cmd := exec.Command(sb.spec.AgentBinary)
	cmd.Dir = filepath.Join(sb.dir, "root")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), runtime.EnvAgentToken + "=" + sb.spec.AgentToken,
		runtime.EnvAgentSocket + "=" + r.AgentSocketPath(sb.id)}
	for _, k := range slices.Sorted(maps.Keys(sb.spec.Env)) {
		cmd.Env = append(cmd.Env, k+"="+sb.spec.Env[k])
	}
	cmd.Stdout, cmd.Stderr = rn.logs, rn.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agent stand-in: %w", err)
	}
	pgid := cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		rn.exitCode = exitCode(cmd.ProcessState)
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // whatever it left behind
		close(rn.done)
	}()
	rn.stop = func(grace time.Duration) {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-rn.done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-rn.done
		}
	}
	return rn, nil
}

// exitCode is a process's exit code, 128+signal for a killed one (as a
// container engine reports it).
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// halt stops sb's current run, if any, within grace (sb.op held) and
// records its exit.
func (r *Runtime) halt(sb *sandbox, grace time.Duration) {
	r.mu.Lock()
	rn := sb.run
	sb.run = nil
	r.mu.Unlock()
	if rn == nil {
		return
	}
	rn.stop(grace)
	r.mu.Lock()
	defer r.mu.Unlock()
	sb.state, sb.exitCode, sb.finishedAt = runtime.StateExited, rn.exitCode, time.Now()
	sb.paused = false
}

// Pause implements runtime.Runtime. The agent runs in this process and
// cannot be frozen: the state is recorded (Inspect and ListOurs report
// it) and the agent keeps answering, which is all the service's state
// machine needs of the fast loop; freezing is proven on Docker.
func (r *Runtime) Pause(ctx context.Context, sandboxID string) error {
	return r.setPaused(ctx, sandboxID, true)
}

// Resume implements runtime.Runtime (see Pause).
func (r *Runtime) Resume(ctx context.Context, sandboxID string) error {
	return r.setPaused(ctx, sandboxID, false)
}

func (r *Runtime) setPaused(ctx context.Context, sandboxID string, paused bool) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sb := r.lookup(sandboxID)
	if sb == nil {
		return fmt.Errorf("pause sandbox %s: %w", sandboxID, runtime.ErrNotFound)
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case sb.gone:
		return fmt.Errorf("pause sandbox %s: %w", sandboxID, runtime.ErrNotFound)
	case sb.state != runtime.StateRunning:
		return fmt.Errorf("pause sandbox %s (%s): %w", sandboxID, sb.state, runtime.ErrNotRunning)
	}
	sb.paused = paused
	return nil
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, sandboxID string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	sb := r.lookup(sandboxID)
	if sb == nil {
		return fmt.Errorf("start sandbox %s: %w", sandboxID, runtime.ErrNotFound)
	}
	sb.op.Lock()
	r.mu.Lock()
	gone, running := sb.gone, sb.state == runtime.StateRunning
	r.mu.Unlock()
	var err error
	switch {
	case gone:
		err = runtime.ErrNotFound
	case !running:
		err = r.boot(sb)
	}
	sb.op.Unlock()
	if err != nil {
		return fmt.Errorf("start sandbox %s: %w", sandboxID, err)
	}
	if err := r.waitAgentReady(ctx, sandboxID); err != nil {
		return fmt.Errorf("start sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// Stop implements runtime.Runtime: the agent's processes get StopTimeout
// to exit after SIGTERM, then the agent stops serving (exit code 0, as
// toolboxd's on SIGTERM).
func (r *Runtime) Stop(ctx context.Context, sandboxID string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", sandboxID, err)
	}
	sb := r.lookup(sandboxID)
	if sb == nil {
		return fmt.Errorf("stop sandbox %s: %w", sandboxID, runtime.ErrNotFound)
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	r.halt(sb, r.opts.StopTimeout)
	return nil
}

// Destroy implements runtime.Runtime.
func (r *Runtime) Destroy(ctx context.Context, sandboxID string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	if sb := r.lookup(sandboxID); sb != nil {
		sb.op.Lock()
		r.halt(sb, 0)
		r.forget(sb)
		sb.op.Unlock()
		return nil
	}
	// Not ours in memory: a directory left by an earlier runtime goes.
	if err := os.RemoveAll(r.Dir(sandboxID)); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// Inspect implements runtime.Runtime.
func (r *Runtime) Inspect(ctx context.Context, sandboxID string) (runtime.Status, error) {
	if err := checkID(sandboxID); err != nil {
		return runtime.Status{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.sandboxes[sandboxID]
	if sb == nil {
		return runtime.Status{State: runtime.StateMissing}, nil
	}
	st := runtime.Status{State: sb.state, Paused: sb.paused, StartedAt: sb.startedAt, FinishedAt: sb.finishedAt, Detail: string(sb.state)}
	if sb.state == runtime.StateExited {
		st.ExitCode = sb.exitCode
	}
	return st, nil
}

// ListOurs implements runtime.Runtime: every sandbox of this Runtime, by id.
func (r *Runtime) ListOurs(ctx context.Context) ([]runtime.Instance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []runtime.Instance
	for _, id := range slices.Sorted(maps.Keys(r.sandboxes)) {
		sb := r.sandboxes[id]
		out = append(out, runtime.Instance{SandboxID: id, ContainerID: sb.containerID, State: sb.state, Paused: sb.paused})
	}
	return out, nil
}

// DialAgent implements runtime.Runtime.
func (r *Runtime) DialAgent(ctx context.Context, sandboxID string) (net.Conn, error) {
	if err := checkID(sandboxID); err != nil {
		return nil, err
	}
	if r.lookup(sandboxID) == nil {
		return nil, fmt.Errorf("dial agent of sandbox %s: %w", sandboxID, runtime.ErrNotFound)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", r.AgentSocketPath(sandboxID))
	if err != nil {
		return nil, fmt.Errorf("dial agent of sandbox %s: %w", sandboxID, err)
	}
	return conn, nil
}

// WaitAgentReady implements runtime.Runtime. It is bounded by
// Options.AgentReadyTimeout and by ctx, whichever ends first.
func (r *Runtime) WaitAgentReady(ctx context.Context, sandboxID string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	if err := r.waitAgentReady(ctx, sandboxID); err != nil {
		return fmt.Errorf("sandbox %s: %w", sandboxID, err)
	}
	return nil
}

func (r *Runtime) waitAgentReady(ctx context.Context, sandboxID string) error {
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, r.opts.AgentReadyTimeout)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return r.DialAgent(ctx, sandboxID) },
		DisableKeepAlives: true,
	}}
	defer hc.CloseIdleConnections()
	backoff := probeBackoffMin
	for {
		lastErr := probeHealth(waitCtx, hc)
		if lastErr == nil {
			return nil
		}
		if st, _ := r.Inspect(waitCtx, sandboxID); st.State != runtime.StateRunning {
			return r.notReady(sandboxID, start, fmt.Errorf("sandbox is %s: %w", st.State, lastErr))
		}
		select {
		case <-waitCtx.Done():
			if cause := ctx.Err(); cause != nil {
				return r.notReady(sandboxID, start, fmt.Errorf("%w; last probe: %w", cause, lastErr))
			}
			// Our own deadline: the last probe, cut short by it, must not
			// read as the caller's context ending (it is text, not wrapped).
			return r.notReady(sandboxID, start, fmt.Errorf("readiness deadline %s passed; last probe: %v", r.opts.AgentReadyTimeout, lastErr))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, probeBackoffMax)
	}
}

// probeHealth sends one GET /health; nil means 204 No Content.
func probeHealth(ctx context.Context, hc *http.Client) error {
	return runtime.ProbeHealth(ctx, hc, probeTimeout)
}

// notReady builds the *AgentNotReadyError with the sandbox's state and
// the tail of its last run's output.
func (r *Runtime) notReady(sandboxID string, start time.Time, last error) error {
	e := &runtime.AgentNotReadyError{SandboxID: sandboxID, Waited: time.Since(start), Err: last}
	e.Status, _ = r.Inspect(context.Background(), sandboxID)
	r.mu.Lock()
	if sb := r.sandboxes[sandboxID]; sb != nil && sb.lastLogs != nil {
		e.LogsTail = sb.lastLogs.String()
	}
	r.mu.Unlock()
	return e
}

// Stats implements runtime.Runtime. It measures nothing: the sample has
// its time, the memory limit (0 when unlimited) and, while the sandbox
// runs, one process.
func (r *Runtime) Stats(ctx context.Context, sandboxID string) (runtime.Stats, error) {
	if err := checkID(sandboxID); err != nil {
		return runtime.Stats{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.sandboxes[sandboxID]
	if sb == nil {
		return runtime.Stats{}, fmt.Errorf("stats of sandbox %s: %w", sandboxID, runtime.ErrNotFound)
	}
	s := runtime.Stats{At: time.Now(), MemoryLimit: uint64(sb.spec.MemoryMB) << 20}
	if sb.state == runtime.StateRunning {
		s.Pids = 1
	}
	return s, nil
}

// tail keeps the last logsTailBytes written to it; safe for concurrent use.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - logsTailBytes; over > 0 {
		t.buf = slices.Clone(t.buf[over:])
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
