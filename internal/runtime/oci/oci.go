package oci

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Defaults for Options fields left zero.
const (
	// DefaultStopTimeout is the agent's grace period between SIGTERM and
	// SIGKILL on Stop (the Docker runtime's).
	DefaultStopTimeout = 10 * time.Second
	// DefaultAgentReadyTimeout bounds WaitAgentReady (the Docker runtime's).
	DefaultAgentReadyTimeout = 20 * time.Second
	// DefaultCgroupParent is the cgroup every sandbox's cgroup is made
	// under (per controller on cgroup v1).
	DefaultCgroupParent = "/sandboxd"

	// cleanupTimeout bounds undo work done on a fresh context.
	cleanupTimeout = 30 * time.Second
	// maxUnixSocketPath is sun_path's size on Linux, terminator included.
	maxUnixSocketPath = 108
	// tmpAge is how old a temporary directory must be before New or
	// ListOurs removes it: a create or unpack in progress is younger.
	tmpAge = 15 * time.Minute
)

// Options configure a Runtime.
type Options struct {
	// Client talks to the engine, for images only (inspect and export).
	// When nil, New creates one from the environment and Close closes it.
	Client *client.Client
	// NodeID is recorded with every sandbox; ListOurs returns only this
	// node's. Required.
	NodeID string
	// Dir holds the unpacked images, one directory per sandbox and the OCI
	// runtime's state. Required, absolute; created 0700. On btrfs with
	// quotas on, disk limits are enforced (disk.go).
	Dir string
	// SocketRoot is the host directory holding one agent socket directory
	// per sandbox (<SocketRoot>/<sandbox id>). Required, absolute, short
	// (unix socket paths); created 0700.
	SocketRoot string
	// Binary is the OCI runtime (default: crun from PATH, else runc).
	Binary string
	// GVisorBinary is runsc, for sandboxes with runtime.IsolationGVisor
	// (default: runsc from PATH; none: such sandboxes are refused).
	GVisorBinary string
	// CgroupParent is the cgroup sandboxes' cgroups are made under
	// (default DefaultCgroupParent), then one per node.
	CgroupParent string
	// NameKey keys the sandboxes' host names (as the Docker runtime keys
	// its containers' names): a host name tells nothing of the sandbox id.
	NameKey []byte
	// StopTimeout is Stop's grace period (default DefaultStopTimeout).
	StopTimeout time.Duration
	// AgentReadyTimeout bounds each WaitAgentReady (default
	// DefaultAgentReadyTimeout).
	AgentReadyTimeout time.Duration
	// IOLimit is every sandbox's block I/O limit on the devices holding
	// Dir (io.go); zero: none.
	IOLimit IOLimit
	// Network attaches sandboxes with Spec.Network to a bridge; nil:
	// such sandboxes are refused (ErrInvalidSpec).
	Network *Network
	// ImageSealer seals the checkpoint images (seal.go); nil: they are
	// kept in clear (0700 only).
	ImageSealer ImageSealer
	// Logger receives debug and warning records (default: discard).
	Logger *slog.Logger
}

// Runtime runs sandboxes as OCI bundles with an OCI runtime binary,
// without the engine on the create path. See the package documentation.
type Runtime struct {
	cli        *client.Client
	ownsClient bool
	opts       Options
	log        *slog.Logger
	disk       diskMode
	images     imageCache
	cgroups    cgroupMode

	swapAccounting bool
	agentOOMScore  int
	// ioDevices are the block devices holding Dir, which IOLimit
	// applies to (io.go); ioHow says which, or why none.
	ioDevices []blockDevice
	ioHow     string

	mu       sync.Mutex
	cpuPrevs map[string]cpuSample
	// diskSizes caches Usage's walked disk size per sandbox (cgroup.go).
	diskSizes sync.Map
	// seccomp keeps the compiled seccomp programs (seccomp.go).
	seccomp seccompPrograms
	// inspects are the image inspects under way (inspect.go).
	inspects imageInspects

	boots keyedLocks

	// fault, when set (tests), is asked at each step of Create and fails
	// the step with its error.
	fault func(step string) error
}

// step asks the fault hook whether step fails.
func (r *Runtime) step(name string) error {
	if r.fault == nil {
		return nil
	}
	if err := r.fault(name); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

var (
	_ runtime.Runtime     = (*Runtime)(nil)
	_ runtime.DiskLimiter = (*Runtime)(nil)
)

// New returns a Runtime. It does not contact the engine; the first
// create of an image does. It makes this process a child subreaper
// (reaper.go), so that it learns its sandboxes' exit codes.
func New(opts Options) (*Runtime, error) {
	if opts.NodeID == "" {
		return nil, errors.New("oci runtime: NodeID is required")
	}
	if !filepath.IsAbs(opts.Dir) || !filepath.IsAbs(opts.SocketRoot) {
		return nil, fmt.Errorf("oci runtime: Dir %q and SocketRoot %q must be absolute paths", opts.Dir, opts.SocketRoot)
	}
	opts.Dir, opts.SocketRoot = filepath.Clean(opts.Dir), filepath.Clean(opts.SocketRoot)
	if n := len(opts.SocketRoot) + 1 + len("sb-0123456789abcdef") + 1 + len(runtime.AgentSocketName); n >= maxUnixSocketPath {
		return nil, fmt.Errorf("oci runtime: SocketRoot %q too long for unix socket paths (%d bytes, max %d)", opts.SocketRoot, n, maxUnixSocketPath-1)
	}
	if opts.Binary == "" {
		for _, b := range []string{"crun", "runc"} {
			if p, err := exec.LookPath(b); err == nil {
				opts.Binary = p
				break
			}
		}
		if opts.Binary == "" {
			return nil, errors.New("oci runtime: neither crun nor runc is installed (scripts/setup-oci.sh installs crun)")
		}
	}
	if opts.GVisorBinary == "" {
		opts.GVisorBinary, _ = exec.LookPath("runsc")
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = DefaultCgroupParent
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
	for _, d := range []string{opts.Dir, opts.SocketRoot} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("oci runtime: %w", err)
		}
	}
	for _, d := range []string{"images", "sandboxes", "state"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("oci runtime: %w", err)
		}
	}
	r := &Runtime{cli: opts.Client, opts: opts, log: log, cpuPrevs: map[string]cpuSample{}}
	r.disk = probeDisk(filepath.Join(opts.Dir, "sandboxes"))
	r.cgroups = probeCgroups()
	if !opts.IOLimit.zero() {
		r.ioDevices, r.ioHow = blockDevices(filepath.Join(opts.Dir, "sandboxes"))
	}
	r.swapAccounting = r.cgroups.swapAccounting()
	if mayLowerOOMScores() {
		r.agentOOMScore = -1000
	}
	if err := startReaper(); err != nil {
		return nil, fmt.Errorf("oci runtime: %w", err)
	}
	sweepTmp(r.imagesDir(), tmpAge, os.RemoveAll)
	sweepTmp(filepath.Join(opts.Dir, "sandboxes"), tmpAge, r.removeSandboxDir)
	if r.cli == nil {
		cli, err := client.New(client.FromEnv)
		if err != nil {
			return nil, fmt.Errorf("oci runtime: docker client: %w", err)
		}
		r.cli, r.ownsClient = cli, true
	}
	return r, nil
}

// Close releases the engine client if New created it. Sandboxes keep
// running: nothing of theirs lives in this process.
func (r *Runtime) Close() error {
	if r.ownsClient {
		return r.cli.Close()
	}
	return nil
}

// Binary is the OCI runtime binary sandboxes run with.
func (r *Runtime) Binary() string { return r.opts.Binary }

// Isolations reports runtime.IsolationContainer, and
// runtime.IsolationGVisor when runsc is installed.
func (r *Runtime) Isolations(context.Context) ([]runtime.Isolation, error) {
	out := []runtime.Isolation{runtime.IsolationContainer}
	if r.opts.GVisorBinary != "" {
		out = append(out, runtime.IsolationGVisor)
	}
	return out, nil
}

// SocketDir is the host directory bind-mounted at runtime.AgentSocketDir.
func (r *Runtime) SocketDir(sandboxID string) string {
	return filepath.Join(r.opts.SocketRoot, sandboxID)
}

// AgentSocketPath is the host path of the sandbox agent's unix socket.
func (r *Runtime) AgentSocketPath(sandboxID string) string {
	return filepath.Join(r.SocketDir(sandboxID), runtime.AgentSocketName)
}

// BundleDir is the sandbox's OCI bundle (config.json, the root file
// system's mount point) and everything else of it on disk.
func (r *Runtime) BundleDir(sandboxID string) string { return r.sandboxDir(sandboxID) }

func (r *Runtime) sandboxDir(id string) string {
	return filepath.Join(r.opts.Dir, "sandboxes", id)
}

// rwDir is what the sandbox's disk limit counts: its overlay's upper and
// work directories, its /etc files and its output.
func (r *Runtime) rwDir(id string) string { return filepath.Join(r.sandboxDir(id), rwName) }

// stateRoot is the OCI runtime's --root for the sandbox: one per binary.
func (r *Runtime) stateRoot(meta *sandboxMeta) string {
	return filepath.Join(r.opts.Dir, "state", filepath.Base(r.binaryOf(meta)))
}

// binaryOf is the OCI runtime binary that runs the sandbox: the one it
// was created with (a daemon restarted with another, crun installed
// after runc ran its sandboxes, still reaches their state), else this
// runtime's for its isolation.
func (r *Runtime) binaryOf(meta *sandboxMeta) string {
	if meta.Binary != "" {
		if fi, err := os.Stat(meta.Binary); err == nil && fi.Mode().IsRegular() {
			return meta.Binary
		}
	}
	return r.binary(meta.Isolation)
}

func (r *Runtime) binary(iso runtime.Isolation) string {
	if iso == runtime.IsolationGVisor {
		return r.opts.GVisorBinary
	}
	return r.opts.Binary
}

// hostname is the sandbox's host name: keyed, so it does not give the
// id away (the Docker runtime's rule, ContainerName there).
func (r *Runtime) hostname(id string) string {
	m := hmac.New(sha256.New, r.opts.NameKey)
	m.Write([]byte(id))
	return "sandbox-" + hex.EncodeToString(m.Sum(nil)[:16])
}

// cgroupPath is the sandbox's cgroup, directly under the parent: the
// node (its id hashed: it need not be a path element) and the sandbox id.
// No cgroup per node: an empty one would outlive its sandboxes, and its
// removal would race the next create.
func (r *Runtime) cgroupPath(id string) string {
	sum := sha256.Sum256([]byte(r.opts.NodeID))
	return r.opts.CgroupParent + "/" + hex.EncodeToString(sum[:6]) + "-" + id
}

func checkID(id string) error {
	if !runtime.ValidSandboxID(id) {
		return fmt.Errorf("%w: sandbox id %q is not a DNS label", runtime.ErrInvalidSpec, id)
	}
	return nil
}

// sandboxMeta is a sandbox's meta.json: what it was created as. Written
// once, before the sandbox's directory is renamed into place.
type sandboxMeta struct {
	ID          string            `json:"id"`
	Node        string            `json:"node"`
	ContainerID string            `json:"container_id"`
	Labels      map[string]string `json:"labels"`
	Image       string            `json:"image"`
	ImageDir    string            `json:"image_dir"`
	Hostname    string            `json:"hostname"`
	Isolation   runtime.Isolation `json:"isolation,omitempty"`
	// Binary is the OCI runtime binary the sandbox was created with.
	Binary  string    `json:"binary,omitempty"`
	Network bool      `json:"network,omitempty"`
	IP      string    `json:"ip,omitempty"`
	Created time.Time `json:"created"`
	// DiskMB is Spec.DiskMB (0: none; a sandbox made before it was kept
	// reads 0): a commit's layer is bounded by it.
	DiskMB int64 `json:"disk_mb,omitempty"`
}

// runState is a sandbox's state.json: its current or last run. The
// agent's host pid and its start time (clock ticks since boot, from
// /proc) tell a live agent from a reused pid.
type runState struct {
	Pid        int       `json:"pid,omitempty"`
	PidStart   uint64    `json:"pid_start,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Exited: ExitCode and OOMKilled are known (this process reaped it).
	Exited    bool `json:"exited,omitempty"`
	ExitCode  int  `json:"exit_code"`
	OOMKilled bool `json:"oom_killed,omitempty"`
	// Paused: runsc paused the sandbox (gVisor pauses inside its own
	// kernel, not with the cgroup freezer, which says it for the others).
	Paused bool `json:"paused,omitempty"`
	// Checkpointed: the run ended in a checkpoint (checkpoint.go).
	Checkpointed bool `json:"checkpointed,omitempty"`
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// writeJSON writes v to path atomically (a temporary file renamed).
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// A name of its own: two writers never share a temporary file.
	tmp := path + ".tmp-" + randHex(4)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

func (r *Runtime) readMeta(id string) (*sandboxMeta, error) {
	var m sandboxMeta
	if err := readJSON(filepath.Join(r.sandboxDir(id), "meta.json"), &m); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, runtime.ErrNotFound
		}
		return nil, err
	}
	return &m, nil
}

func (r *Runtime) readState(id string) runState {
	var s runState
	_ = readJSON(filepath.Join(r.sandboxDir(id), "state.json"), &s)
	return s
}

func (r *Runtime) writeState(id string, s runState) error {
	return writeJSON(filepath.Join(r.sandboxDir(id), "state.json"), s)
}

// lock serializes the boots, stops and removals of one sandbox, and of
// no other (lock.go).
func (r *Runtime) lock(id string) *idLock { return r.boots.of(id) }

// Create implements runtime.Runtime. Its steps: the image (unpacked on
// its first use), the sandbox's directory (a subvolume with the disk
// limit, made under a temporary name with its meta.json and renamed into
// place: the rename is what decides between concurrent creates of one
// id), the socket directory, the overlay root file system, the network,
// config.json, and the boot (boot.go). On a failure after the rename,
// Destroy's removal undoes every step, whichever ran.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (_ runtime.Instance, err error) {
	id := spec.SandboxID
	if err := spec.Validate(); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if n := len(r.AgentSocketPath(id)); n >= maxUnixSocketPath {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: agent socket path too long (%d bytes, max %d)", id, runtime.ErrInvalidSpec, n, maxUnixSocketPath-1)
	}
	if fi, err := os.Stat(spec.AgentBinary); err != nil || !fi.Mode().IsRegular() {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: agent binary %s is not a regular file", id, runtime.ErrInvalidSpec, spec.AgentBinary)
	}
	if spec.Isolation == runtime.IsolationGVisor && r.opts.GVisorBinary == "" {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: runsc is not installed", id, runtime.ErrInvalidSpec)
	}
	if spec.RestoreImage != "" {
		if sup := r.CanCheckpoint(spec.Isolation); !sup.OK {
			return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: %s", id, runtime.ErrCheckpointUnsupported, sup.How)
		}
		if !hasCheckpoint(spec.RestoreImage) {
			return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w in %s", id, runtime.ErrNoCheckpoint, spec.RestoreImage)
		}
	}
	if spec.Network && r.opts.Network == nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: this runtime has no network for sandboxes", id, runtime.ErrInvalidSpec)
	}
	if err := ctx.Err(); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	img, release, err := r.image(ctx, spec.Image)
	if err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	// Until the sandbox's meta.json names the image, or the create failed.
	defer release()
	// The image's user, read from its files before the sandbox's lock
	// is taken: a hostile image must not hold the lock.
	uid, gid, err := imageUser(img)
	if err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w: %w", id, runtime.ErrInvalidSpec, err)
	}
	if err := checkMountPaths(img.dir, spec.Mounts); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	meta := &sandboxMeta{
		ID: id, Node: r.opts.NodeID, ContainerID: randHex(12), Labels: labels(spec, r.opts.NodeID),
		Image: spec.Image, ImageDir: img.dir, Hostname: r.hostname(id), Isolation: spec.Isolation, Binary: r.binary(spec.Isolation),
		Network: spec.Network, Created: time.Now().UTC(), DiskMB: spec.DiskMB,
	}
	if err := r.step("image"); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if err := r.claim(id, meta, spec.DiskMB); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	lock := r.lock(id)
	lock.Lock()
	defer lock.Unlock()
	defer func() {
		if err == nil {
			return
		}
		// Undo with a fresh context: the caller's may be what failed.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rmErr := r.remove(ctx, id, meta); rmErr != nil {
			r.log.Warn("create: undo", "sandbox", id, "err", rmErr)
			err = errors.Join(err, fmt.Errorf("undo: %w", rmErr))
		}
	}()
	if err := r.step("claim"); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if err := os.Mkdir(r.SocketDir(id), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: socket dir: %w", id, err)
	}
	if err := r.step("socket dir"); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	netns := ""
	if spec.Network {
		ip, path, err := r.opts.Network.attach(ctx, id, r.sandboxDir(id))
		if err != nil {
			return runtime.Instance{}, fmt.Errorf("create sandbox %s: network: %w", id, err)
		}
		meta.IP, netns = ip.String(), path
		if err := writeJSON(filepath.Join(r.sandboxDir(id), "meta.json"), meta); err != nil {
			return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
		}
	}
	if err := r.step("network"); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if err := r.writeEtc(meta); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	// After writeEtc: the upper directory is complete before the overlay
	// is mounted over it.
	if err := r.mountRootfs(id, img.dir); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if err := r.step("rootfs"); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	tmpBind := false
	if spec.Isolation == runtime.IsolationGVisor {
		if tmpBind, err = r.safeTmp(id); err != nil {
			return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
		}
	}
	cfg, err := r.bundleSpec(spec, meta, img, uid, gid, netns, tmpBind)
	if err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	seccompKey, learnSeccomp := r.compiledSeccomp(meta, cfg) // seccomp.go
	if err := r.writeAgentToken(id, spec.AgentToken); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, noSpace(err))
	}
	if err := writeJSON(filepath.Join(r.sandboxDir(id), "config.json"), cfg); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, noSpace(err))
	}
	if err := r.step("config"); err != nil {
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if err := r.launch(ctx, id, meta, spec.RestoreImage); err != nil {
		if gone := removedMount(spec.Mounts); gone != "" {
			// The OCI runtime could not bind it because the directory
			// behind it went (a sandbox sharing the volume removed it
			// meanwhile): the request's, not the daemon's, as the
			// engine's refusal of the same is.
			err = fmt.Errorf("%w: the directory mounted at %s was removed while the sandbox was being created: %w", runtime.ErrInvalidSpec, gone, err)
		}
		return runtime.Instance{}, fmt.Errorf("create sandbox %s: %w", id, err)
	}
	if learnSeccomp {
		r.learnSeccomp(seccompKey, meta)
	}
	return runtime.Instance{SandboxID: id, ContainerID: meta.ContainerID, State: runtime.StateRunning}, nil
}

// removedMount is the sandbox path of the first of mounts whose host
// directory is gone or removed (a directory rmdir'd under its staged
// mount has no links left), "" when none is.
func removedMount(mounts []runtime.Mount) string {
	for _, m := range mounts {
		var st unix.Stat_t
		if err := unix.Stat(m.HostPath, &st); err != nil || st.Nlink == 0 {
			return m.Path
		}
	}
	return ""
}

// labels are a sandbox's labels: the caller's and the runtime's.
func labels(spec runtime.Spec, node string) map[string]string {
	l := make(map[string]string, len(spec.Labels)+3)
	maps.Copy(l, spec.Labels)
	l[runtime.LabelManaged] = "1"
	l[runtime.LabelNode] = node
	l[runtime.LabelSandbox] = spec.SandboxID
	return l
}

// claim makes the sandbox's directory under a temporary name, with its
// meta.json, and renames it into place without replacing anything: of
// concurrent creates of one id, exactly one rename succeeds, and the
// others get runtime.ErrAlreadyExists and remove their own directory.
func (r *Runtime) claim(id string, meta *sandboxMeta, diskMB int64) (err error) {
	final := r.sandboxDir(id)
	if _, err := os.Lstat(final); err == nil {
		return fmt.Errorf("%w: %s", runtime.ErrAlreadyExists, id)
	}
	tmp := filepath.Join(r.opts.Dir, "sandboxes", tmpName(id))
	if err := r.makeSandboxDir(tmp, diskMB); err != nil {
		_ = r.removeSandboxDir(tmp)
		return noSpace(err)
	}
	defer func() {
		if err != nil {
			_ = r.removeSandboxDir(tmp)
		}
	}()
	for _, d := range []string{"rootfs", filepath.Join(rwName, "upper"), filepath.Join(rwName, "work"), filepath.Join(rwName, "etc")} {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
			return noSpace(err)
		}
	}
	if err := writeJSON(filepath.Join(tmp, "meta.json"), meta); err != nil {
		return noSpace(err)
	}
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		return fmt.Errorf("%w: %s", runtime.ErrAlreadyExists, id)
	}
	return err
}

// mountRootfs mounts the sandbox's root file system: an overlay of the
// image (read-only) under its upper directory. Already mounted is
// success (Start after a daemon restart).
func (r *Runtime) mountRootfs(id, lower string) error {
	dir := r.sandboxDir(id)
	target := filepath.Join(dir, "rootfs")
	if mounted(target) {
		return nil
	}
	// The directories are named by descriptors of this process: the
	// options are what the sandbox reads in its /proc/self/mountinfo,
	// and host paths there would tell it where the daemon keeps its data
	// (and the image's id).
	var fds [3]int
	for i, p := range []string{lower, filepath.Join(dir, rwName, "upper"), filepath.Join(dir, rwName, "work")} {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, fd := range fds[:i] {
				unix.Close(fd)
			}
			return fmt.Errorf("mount the root file system: %w", err)
		}
		fds[i] = fd
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	opts := fmt.Sprintf("lowerdir=/proc/self/fd/%d,upperdir=/proc/self/fd/%d,workdir=/proc/self/fd/%d", fds[0], fds[1], fds[2])
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the root file system: %w", err)
	}
	return nil
}

// mounted reports whether path is a mount point (its device differs from
// its parent's, or it is the same inode as a bind mount would not be:
// overlay mounts always get a device of their own).
func mounted(path string) bool {
	var st, pst unix.Stat_t
	if unix.Lstat(path, &st) != nil || unix.Lstat(filepath.Dir(path), &pst) != nil {
		return false
	}
	return st.Dev != pst.Dev
}

// unmountRootfs unmounts the sandbox's root file system; not mounted is
// success.
func (r *Runtime) unmountRootfs(id string) error {
	target := filepath.Join(r.sandboxDir(id), "rootfs")
	for mounted(target) {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount the root file system: %w", err)
		}
	}
	return nil
}

// writeEtc writes the sandbox's /etc/hostname, /etc/hosts and
// /etc/resolv.conf into its directory (on its subvolume: what the sandbox
// writes to them counts against its disk limit): into the overlay's upper
// directory, before the overlay is mounted, so that they are files of its
// root file system and no bind mount shows their host path in the
// sandbox's mountinfo (which would tell it where the daemon keeps its
// data). An image whose /etc is not a directory (a symlink) keeps it: the
// files go beside the upper directory and are bind-mounted (bundleSpec).
func (r *Runtime) writeEtc(meta *sandboxMeta) error {
	dir := filepath.Join(r.rwDir(meta.ID), "etc")
	var lower unix.Stat_t
	switch err := unix.Lstat(filepath.Join(meta.ImageDir, "etc"), &lower); {
	case errors.Is(err, unix.ENOENT):
		dir = filepath.Join(r.rwDir(meta.ID), "upper", "etc")
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return noSpace(err)
		}
	case err == nil && lower.Mode&unix.S_IFMT == unix.S_IFDIR:
		// The upper directory's mode and owner are the merged one's.
		dir = filepath.Join(r.rwDir(meta.ID), "upper", "etc")
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return noSpace(err)
		}
		if err := unix.Lchown(dir, int(lower.Uid), int(lower.Gid)); err != nil {
			return err
		}
		if err := unix.Chmod(dir, lower.Mode&0o7777); err != nil {
			return err
		}
	}
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"
	if meta.IP != "" {
		hosts += meta.IP + "\t" + meta.Hostname + "\n"
	}
	resolv := "" // no network: nothing to resolve with
	if meta.Network && r.opts.Network != nil {
		resolv = r.opts.Network.resolvConf()
	}
	for name, content := range map[string]string{"hostname": meta.Hostname + "\n", "hosts": hosts, "resolv.conf": resolv} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return noSpace(err)
		}
	}
	return nil
}

// lockedMeta takes sandbox id's lock and reads its meta.json: on success
// the caller calls unlock; an error (unlocked) is "<verb> sandbox <id>:
// ...".
func (r *Runtime) lockedMeta(id, verb string) (_ *sandboxMeta, unlock func(), _ error) {
	lock := r.lock(id)
	lock.Lock()
	meta, err := r.readMeta(id)
	if err != nil {
		lock.Unlock()
		return nil, nil, fmt.Errorf("%s sandbox %s: %w", verb, id, err)
	}
	return meta, lock.Unlock, nil
}

// Start implements runtime.Runtime.
func (r *Runtime) Start(ctx context.Context, sandboxID string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	meta, unlock, err := r.lockedMeta(sandboxID, "start")
	if err != nil {
		return err
	}
	defer unlock()
	st := r.status(sandboxID)
	if st.State == runtime.StateRunning {
		r.wakeIfParked(ctx, meta) // a checkpoint cut short (checkpoint.go)
		if err := r.waitAgentReady(ctx, sandboxID); err != nil {
			return fmt.Errorf("start sandbox %s: %w", sandboxID, err)
		}
		return nil
	}
	// A run whose end no Stop saw (a daemon killed in a checkpoint, an
	// agent that exited) may have left the OCI runtime's record of the
	// container, which the new run's id would collide with.
	if r.ociKnows(ctx, meta) || r.runscKnows(meta) {
		if err := r.ociDelete(ctx, meta); err != nil {
			return fmt.Errorf("start sandbox %s: %w", sandboxID, err)
		}
	}
	if err := r.mountRootfs(sandboxID, meta.ImageDir); err != nil {
		return fmt.Errorf("start sandbox %s: %w", sandboxID, err)
	}
	if err := r.refreshBlockIO(sandboxID); err != nil {
		return fmt.Errorf("start sandbox %s: I/O limit: %w", sandboxID, noSpace(err))
	}
	if meta.Network {
		if r.opts.Network == nil {
			return fmt.Errorf("start sandbox %s: %w: the sandbox has network and this runtime none", sandboxID, runtime.ErrInvalidSpec)
		}
		ip := meta.IP
		if err := r.opts.Network.ensure(ctx, sandboxID, r.sandboxDir(sandboxID), meta); err != nil {
			return fmt.Errorf("start sandbox %s: network: %w", sandboxID, err)
		}
		if meta.IP != ip {
			if err := writeJSON(filepath.Join(r.sandboxDir(sandboxID), "meta.json"), meta); err != nil {
				return fmt.Errorf("start sandbox %s: %w", sandboxID, noSpace(err))
			}
		}
	}
	if err := r.boot(ctx, sandboxID, meta); err != nil {
		return fmt.Errorf("start sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// Stop implements runtime.Runtime: SIGTERM to the agent, SIGKILL after
// the grace period, then the OCI runtime forgets the container (its
// cgroup goes with it); the sandbox's files stay for a later Start.
func (r *Runtime) Stop(ctx context.Context, sandboxID string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	meta, unlock, err := r.lockedMeta(sandboxID, "stop")
	if err != nil {
		return err
	}
	defer unlock()
	if err := r.stop(ctx, meta); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// stop kills the sandbox's processes (TERM, then KILL after the grace
// period) and deletes the container from the OCI runtime's state.
func (r *Runtime) stop(ctx context.Context, meta *sandboxMeta) error {
	id := meta.ID
	st := r.readState(id)
	if p, ok := livePid(st); ok {
		if r.paused(id) {
			// A frozen process dies only once thawed.
			_ = r.ociRun(ctx, meta, "resume", id)
		}
		_ = p.signal(unix.SIGTERM)
		if !p.waitExit(ctx, r.opts.StopTimeout) {
			_ = p.signal(unix.SIGKILL)
			if !p.waitExit(ctx, cleanupTimeout) {
				p.close()
				return fmt.Errorf("the agent (pid %d) did not die", st.Pid)
			}
		}
		p.close()
		r.finished(id, st)
	}
	if err := r.ociDelete(ctx, meta); err != nil {
		return err
	}
	return nil
}

// finished records that the run in st ended, unless the reaper did.
func (r *Runtime) finished(id string, st runState) {
	mu := r.stateMu(id)
	mu.Lock()
	defer mu.Unlock()
	cur := r.readState(id)
	if cur.Pid != st.Pid || !cur.FinishedAt.IsZero() {
		return
	}
	cur.FinishedAt = time.Now().UTC()
	if err := r.writeState(id, cur); err != nil {
		r.log.Warn("record a sandbox's stop", "sandbox", id, "err", err)
	}
}

// ociDelete removes the container from the OCI runtime (killing what is
// left of it); one the runtime does not know is success.
func (r *Runtime) ociDelete(ctx context.Context, meta *sandboxMeta) error {
	err := r.ociRun(ctx, meta, "delete", "--force", meta.ID)
	if err != nil && !r.ociKnows(ctx, meta) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("delete the container: %w", err)
	}
	return nil
}

// Pause implements runtime.Runtime: the cgroup freezer, through the OCI
// runtime.
func (r *Runtime) Pause(ctx context.Context, sandboxID string) error {
	return r.freeze(ctx, sandboxID, true)
}

// Resume implements runtime.Runtime.
func (r *Runtime) Resume(ctx context.Context, sandboxID string) error {
	return r.freeze(ctx, sandboxID, false)
}

func (r *Runtime) freeze(ctx context.Context, sandboxID string, pause bool) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	verb := map[bool]string{true: "pause", false: "resume"}[pause]
	meta, unlock, err := r.lockedMeta(sandboxID, verb)
	if err != nil {
		return err
	}
	defer unlock()
	st := r.status(sandboxID)
	switch {
	case st.State != runtime.StateRunning:
		return fmt.Errorf("%s sandbox %s (%s): %w", verb, sandboxID, st.Detail, runtime.ErrNotRunning)
	case st.Paused == pause:
		if !pause {
			r.wakeIfParked(ctx, meta) // a checkpoint cut short (checkpoint.go)
		}
		return nil
	}
	if err := r.ociRun(ctx, meta, verb, sandboxID); err != nil {
		return fmt.Errorf("%s sandbox %s: %w", verb, sandboxID, err)
	}
	if meta.Isolation == runtime.IsolationGVisor {
		mu := r.stateMu(sandboxID)
		mu.Lock()
		st := r.readState(sandboxID)
		st.Paused = pause
		err := r.writeState(sandboxID, st)
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("%s sandbox %s: record it: %w", verb, sandboxID, err)
		}
		if !pause {
			r.wakeIfParked(ctx, meta) // a checkpoint cut short (checkpoint.go)
		}
	}
	return nil
}

// Destroy implements runtime.Runtime: whatever exists of the sandbox
// goes, whichever step of its create or removal ran before.
func (r *Runtime) Destroy(ctx context.Context, sandboxID string) error {
	if err := checkID(sandboxID); err != nil {
		return err
	}
	lock := r.lock(sandboxID)
	lock.Lock()
	defer lock.Unlock()
	meta, err := r.readMeta(sandboxID)
	switch {
	case errors.Is(err, runtime.ErrNotFound):
		meta = nil
	case err != nil:
		// Unreadable: remove what can be found without it.
		r.log.Warn("destroy: meta.json unreadable", "sandbox", sandboxID, "err", err)
		meta = nil
	}
	if meta != nil && meta.Node != r.opts.NodeID {
		// Another node's sandbox sharing the directory (tests): not ours.
		return nil
	}
	if err := r.remove(ctx, sandboxID, meta); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// remove removes everything of sandbox id, in the reverse order of
// Create: the container (its processes, its cgroup), the root file
// system mount, the network, the sandbox's directory, the socket
// directory. Each step treats "not there" as done. The caller holds the
// sandbox's lock. meta may be nil (never written, or unreadable).
func (r *Runtime) remove(ctx context.Context, id string, meta *sandboxMeta) error {
	iso := runtime.IsolationContainer
	if meta != nil {
		iso = meta.Isolation
	}
	m := &sandboxMeta{ID: id, Isolation: iso}
	if meta != nil {
		m = meta
	}
	if err := r.stopForRemoval(ctx, m); err != nil {
		return err
	}
	r.removeCgroup(id)
	if err := r.removeOCIState(id); err != nil {
		return err
	}
	if err := r.unmountRootfs(id); err != nil {
		return err
	}
	if meta == nil || meta.Network {
		// Without a network of its own now (a daemon restarted without
		// --sandbox-network, a tool opening the directory), a networked
		// sandbox's namespace, veth and lease go all the same: they are
		// named by its directory.
		n := r.opts.Network
		if n == nil {
			n = &Network{}
		}
		if err := n.detach(ctx, id, r.sandboxDir(id), m.IP); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	if err := r.unstage(id); err != nil {
		return err
	}
	// Under the state lock: the reaper recording a late exit writes
	// beside the files being removed.
	mu := r.stateMu(id)
	mu.Lock()
	err := r.removeSandboxDir(r.sandboxDir(id))
	mu.Unlock()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(r.SocketDir(id)); err != nil {
		return fmt.Errorf("remove socket dir: %w", err)
	}
	r.mu.Lock()
	delete(r.cpuPrevs, id)
	r.mu.Unlock()
	r.diskSizes.Delete(id)
	return nil
}

// stopForRemoval kills the sandbox's agent at once, deletes the
// container, and kills whatever is left in the sandbox's cgroups: what
// an OCI runtime command killed midway started and never recorded (a
// `runsc restore` killed with the daemon leaves the gVisor sandbox it
// started, in the sandbox's cgroups, and no state file: runsc's delete
// knows nothing of it). A container the OCI runtime cannot delete has
// its processes killed by cgroup, and its delete is tried once more.
func (r *Runtime) stopForRemoval(ctx context.Context, meta *sandboxMeta) error {
	st := r.readState(meta.ID)
	if p, ok := livePid(st); ok {
		if r.paused(meta.ID) {
			_ = r.ociRun(ctx, meta, "resume", meta.ID)
		}
		_ = p.signal(unix.SIGKILL)
		p.waitExit(ctx, cleanupTimeout)
		p.close()
	}
	if err := r.ociDelete(ctx, meta); err != nil {
		if kerr := r.killCgroup(ctx, meta.ID); kerr != nil {
			return errors.Join(err, fmt.Errorf("kill by cgroup: %w", kerr))
		}
		if err := r.ociDelete(ctx, meta); err != nil {
			return err
		}
	}
	if err := r.killCgroup(ctx, meta.ID); err != nil {
		return fmt.Errorf("kill by cgroup: %w", err)
	}
	return nil
}

// removeOCIState removes what runsc's state of the sandbox its delete
// left: the files <id>_sandbox:<id>.* (its lock, and the state of a
// restore killed before its sandbox ran), under every OCI runtime's
// root (meta may be gone). The caller killed the sandbox's processes
// and deleted the container: no runsc command of it runs.
func (r *Runtime) removeOCIState(id string) error {
	files, _ := filepath.Glob(filepath.Join(r.opts.Dir, "state", "*", id+"_sandbox:"+id+".*"))
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove runsc's state: %w", err)
		}
	}
	return nil
}

// Inspect implements runtime.Runtime from the sandbox's files and /proc:
// no process is started.
func (r *Runtime) Inspect(ctx context.Context, sandboxID string) (runtime.Status, error) {
	if err := checkID(sandboxID); err != nil {
		return runtime.Status{}, err
	}
	if _, err := os.Lstat(filepath.Join(r.sandboxDir(sandboxID), "meta.json")); err != nil {
		return runtime.Status{State: runtime.StateMissing}, nil
	}
	return r.status(sandboxID), nil
}

// status is the state of an existing sandbox.
func (r *Runtime) status(id string) runtime.Status {
	st := r.readState(id)
	out := runtime.Status{StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, ExitCode: st.ExitCode, OOMKilled: st.OOMKilled}
	switch p, ok := livePid(st); {
	case ok:
		p.close()
		out.State, out.Detail = runtime.StateRunning, "running"
		out.FinishedAt = time.Time{}
		if r.paused(id) {
			out.Paused, out.Detail = true, "paused"
		}
	case st.Pid == 0:
		out.State, out.Detail = runtime.StateCreated, "created"
	case st.Checkpointed:
		out.State, out.Detail = runtime.StateExited, "checkpointed"
	default:
		out.State, out.Detail = runtime.StateExited, "exited"
		if !st.Exited {
			// Reaped by another process (this daemon restarted since).
			out.ExitCode, out.Detail = -1, "exited (exit code unknown: the process that started it is gone)"
		}
	}
	return out
}

// ListOurs implements runtime.Runtime: every sandbox directory of this
// node. It also removes what crashed creates left (temporary directories
// older than tmpAge).
func (r *Runtime) ListOurs(ctx context.Context) ([]runtime.Instance, error) {
	dir := filepath.Join(r.opts.Dir, "sandboxes")
	sweepTmp(dir, tmpAge, r.removeSandboxDir)
	r.sweepExports(ctx)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := []runtime.Instance{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) || !runtime.ValidSandboxID(e.Name()) {
			continue
		}
		meta, err := r.readMeta(e.Name())
		if err != nil || meta.Node != r.opts.NodeID || meta.ID != e.Name() {
			continue
		}
		st := r.status(meta.ID)
		out = append(out, runtime.Instance{SandboxID: meta.ID, ContainerID: meta.ContainerID, State: st.State, Paused: st.Paused})
	}
	slices.SortFunc(out, func(a, b runtime.Instance) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	return out, nil
}

// engineErr maps the engine client's failures onto the runtime sentinels.
func engineErr(err error) error {
	switch {
	case err == nil, errors.Is(err, runtime.ErrUnavailable):
		return err
	case client.IsErrConnectionFailed(err) || cerrdefs.IsUnavailable(err):
		return fmt.Errorf("%w: %w", runtime.ErrUnavailable, err)
	}
	return noSpace(err)
}

// noSpace marks ENOSPC and EDQUOT as runtime.ErrNoSpace.
func noSpace(err error) error {
	if err != nil && (errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)) && !errors.Is(err, runtime.ErrNoSpace) {
		return fmt.Errorf("%w: %w", runtime.ErrNoSpace, err)
	}
	return err
}
