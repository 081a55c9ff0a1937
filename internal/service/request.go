package service

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Limits a single sandbox may ask for. They bound what one request can do to
// the host; the admission budget bounds what all of them do together.
const (
	minMilliCPU     = 100
	maxMilliCPU     = 16_000
	minMemoryMB     = 64
	maxMemoryMB     = 64 * 1024
	maxTimeout      = 7 * 24 * time.Hour
	maxTags         = 64
	maxEnv          = 256
	maxMounts       = 8
	maxValueLen     = 4096
	maxImageLen     = 255
	defaultMilliCPU = 1000
	defaultMemoryMB = 512
	// defaultPidsLimit keeps a fork bomb inside one sandbox.
	defaultPidsLimit = 1024
	// MinDiskMB is the smallest disk limit: the agent and a shell need a
	// little room to write. DefaultDiskMB and DefaultDiskMaxMB are the
	// default and the largest when Config leaves them zero.
	MinDiskMB        = 16
	DefaultDiskMB    = 10 * 1024
	DefaultDiskMaxMB = 100 * 1024
)

// CreateRequest is a request for a new sandbox, already decoded by an edge.
type CreateRequest struct {
	// Owner is the tenant the sandbox belongs to (the caller's principal).
	Owner string
	// Image is a locally present image reference; empty means the default
	// (or the template's).
	Image string
	// Template names a template of the owner's (by id or name) to create
	// from, instead of an image.
	Template string
	// Name is optional; when set it is a DNS label unique on the host.
	Name     string
	MilliCPU int64
	MemoryMB int64
	// DiskMB bounds what the sandbox may write to its own file system, in
	// MiB (uploads included; volumes are not in it); 0 means the daemon's
	// default. Enforced by the kernel where the runtime can
	// (Sandbox.DiskEnforced).
	DiskMB int64
	// Env is visible to every process in the sandbox and in API answers.
	Env map[string]string
	// SecretEnv is visible to processes but sealed at rest and never
	// returned by the API.
	SecretEnv map[string]string
	Tags      map[string]string
	// Timeout, when positive, sets the sandbox's expiry; the reaper destroys
	// it then (pauses it, with PauseOnTimeout).
	Timeout time.Duration
	// PauseOnTimeout is Lifecycle.PauseOnTimeout (either sets it), kept
	// for the callers that copy it from a sandbox's spec.
	PauseOnTimeout bool
	// Lifecycle is the sandbox's lifecycle rules (rules.go): auto-stop,
	// auto-delete, auto-archive, pause on timeout.
	Lifecycle Lifecycle
	// Network gives the sandbox outbound network; without it, it has none.
	// It is NetworkPolicy.Mode open when NetworkPolicy has no mode.
	Network bool
	// NetworkPolicy is where the sandbox may connect to (netpolicy): none,
	// open (but its deny list), or restricted to its allow list. Its mode
	// set to open or restricted sets Network.
	NetworkPolicy netpolicy.Policy
	Mounts        []Mount
	// Runtime names the runtime: RuntimeDocker (containers on the host
	// kernel) or RuntimeGVisor; empty means the daemon's default.
	Runtime string
	// Quota bounds what Owner may hold, this sandbox included (the
	// creating token's; zero is unlimited). CreateOnce sets it from its
	// Caller.
	Quota Quota
	// Annotations are opaque facade data kept with the sandbox (the E2B
	// template, Daytona's fields); never interpreted by the service.
	Annotations map[string]string
	// Failover is what a cluster does when the sandbox's node is lost:
	// FailoverNone or FailoverRecreate (cluster.go). A single node has
	// nothing to fail over to and only records it.
	Failover string

	// Once is the idempotency key the create runs under: CreateOnce sets
	// it (callers leave it nil). In a cluster the key's binding names the
	// sandbox, and a failover's recreate takes the key with it
	// (cluster.go).
	Once *OnceKey
}

// Mount binds a named volume (a directory the daemon keeps) into the
// sandbox at Path: the whole volume, or only the directory Subpath inside
// it (created when missing).
type Mount struct {
	Volume   string `json:"volume"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Subpath is a clean relative path inside the volume (CheckSubpath);
	// empty mounts the whole volume.
	Subpath string `json:"subpath,omitempty"`
}

// Bounds of a mount's subpath: the kernel's own limits for one name and
// well under PATH_MAX for the whole (the volume's own path comes first).
const (
	maxSubpathLen       = 1024
	maxSubpathComponent = 255
)

// CheckSubpath reports why sub is not a subpath a mount may name: it must
// be relative, clean (no "." or empty components, no trailing slash), free
// of ".." and NUL, at most 1024 bytes with names of at most 255. Whether it resolves to a directory inside the
// volume without following a symbolic link is only known when it is
// opened (internal/volume); this is the part that needs no file system.
func CheckSubpath(sub string) error {
	switch {
	case len(sub) > maxSubpathLen:
		return fmt.Errorf("subpath is longer than %d bytes", maxSubpathLen)
	case strings.ContainsRune(sub, 0):
		return errors.New("subpath contains NUL")
	case path.IsAbs(sub):
		return fmt.Errorf("subpath %q must be relative to the volume", sub)
	case sub == "." || path.Clean(sub) != sub:
		return fmt.Errorf("subpath %q must be a clean relative path (no '.', '//' or trailing '/')", sub)
	}
	for c := range strings.SplitSeq(sub, "/") {
		switch {
		case c == "..":
			return fmt.Errorf("subpath %q must not contain '..'", sub)
		case len(c) > maxSubpathComponent:
			return fmt.Errorf("subpath %q has a name longer than %d bytes", sub, maxSubpathComponent)
		}
	}
	return nil
}

var (
	envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	tagKey = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,62})$`)
)

// normalize fills defaults and validates every field, returning the
// request the create chain runs on. It has no side effects: a request it
// rejects changes nothing.
func (s *Service) normalize(req CreateRequest) (CreateRequest, error) {
	if req.Image == "" {
		req.Image = s.cfg.DefaultImage
	}
	if err := validateImage(req.Image); err != nil {
		return req, err
	}
	if req.Name != "" && !naming.ValidLabel(req.Name) {
		return req, invalid("name", "%q is not a DNS label (lowercase letters, digits and '-', at most 63)", req.Name)
	}
	if strings.HasPrefix(req.Name, "sb-") {
		return req, invalid("name", "names starting with \"sb-\" are reserved for sandbox ids")
	}
	if req.MilliCPU == 0 {
		req.MilliCPU = defaultMilliCPU
	}
	if req.MilliCPU < minMilliCPU || req.MilliCPU > maxMilliCPU {
		return req, invalid("cpu", "must be between %.1f and %d cores", float64(minMilliCPU)/1000, maxMilliCPU/1000)
	}
	if host := s.cfg.HostMilliCPU; host > 0 && req.MilliCPU > host {
		// The engine refuses a limit above the host's CPU count.
		return req, invalid("cpu", "at most %g cores on this host", float64(host)/1000)
	}
	if req.MemoryMB == 0 {
		req.MemoryMB = defaultMemoryMB
	}
	if req.MemoryMB < minMemoryMB || req.MemoryMB > maxMemoryMB {
		return req, invalid("memory_mb", "must be between %d and %d", minMemoryMB, maxMemoryMB)
	}
	if req.DiskMB == 0 {
		req.DiskMB = cmp.Or(s.cfg.DiskDefaultMB, DefaultDiskMB)
	}
	if maxDisk := cmp.Or(s.cfg.DiskMaxMB, DefaultDiskMaxMB); req.DiskMB < MinDiskMB || req.DiskMB > maxDisk {
		return req, invalid("disk_mb", "must be between %d and %d", MinDiskMB, maxDisk)
	}
	if req.Timeout < 0 || req.Timeout > maxTimeout {
		return req, invalid("timeout_s", "must be between 0 and %d seconds", int(maxTimeout.Seconds()))
	}
	req.Lifecycle.PauseOnTimeout = req.Lifecycle.PauseOnTimeout || req.PauseOnTimeout
	req.PauseOnTimeout = req.Lifecycle.PauseOnTimeout
	if err := req.Lifecycle.Validate(); err != nil {
		return req, err
	}
	if err := validateEnv("env", req.Env); err != nil {
		return req, err
	}
	if err := validateEnv("secret_env", req.SecretEnv); err != nil {
		return req, err
	}
	for k := range req.SecretEnv {
		if _, dup := req.Env[k]; dup {
			return req, invalid("secret_env", "%q is also in env", k)
		}
	}
	if len(req.Tags) > maxTags {
		return req, invalid("tags", "at most %d tags", maxTags)
	}
	for k, v := range req.Tags {
		if !tagKey.MatchString(k) {
			return req, invalid("tags", "key %q must be 1-63 letters, digits, '.', '_', '/' or '-'", k)
		}
		if len(v) > maxValueLen || strings.ContainsRune(v, 0) {
			return req, invalid("tags", "value of %q is too long or contains NUL", k)
		}
	}
	if err := s.normalizePolicy(&req); err != nil {
		return req, err
	}
	if err := s.checkRuntime(&req); err != nil {
		return req, err
	}
	if err := validateMounts(req.Mounts); err != nil {
		return req, err
	}
	switch req.Failover {
	case FailoverNone:
	case FailoverRecreate:
		if len(req.Mounts) > 0 {
			return req, invalid("failover", "a sandbox with mounts cannot be recreated elsewhere (volumes are directories of one host)")
		}
	default:
		return req, invalid("failover", "must be %q or empty, not %q", FailoverRecreate, req.Failover)
	}
	return req, nil
}

// validateImage accepts what the engine accepts as an image to run: a
// normalizable name (with tag and digest), a digest, or a full image id.
// Anything else the engine answers with an error of its own, after the
// create has already made its row and volumes.
func validateImage(ref string) error {
	if len(ref) > maxImageLen || strings.ContainsAny(ref, " \t\r\n\x00") {
		return invalid("image", "must be an image reference without spaces, at most %d bytes", maxImageLen)
	}
	if _, err := reference.ParseAnyReference(ref); err != nil {
		return invalid("image", "%q is not a valid image reference (lowercase name[:tag][@digest])", ref)
	}
	return nil
}

// reservedTargets are the paths in a sandbox a volume may not be mounted
// at, under or above: the agent's binary and socket directory (the
// sandbox would lose its agent), the kernel's file systems, and the files
// the engine itself bind-mounts. The engine refuses some of these only
// when the container starts, and accepts others (a volume over
// /sys/fs/cgroup), hiding what the sandbox needs.
var reservedTargets = []string{
	runtime.AgentPath, runtime.AgentSocketDir,
	"/proc", "/sys", "/dev",
	"/etc/hosts", "/etc/hostname", "/etc/resolv.conf",
}

func validateMounts(mounts []Mount) error {
	if len(mounts) > maxMounts {
		return invalid("mounts", "at most %d mounts", maxMounts)
	}
	seen := map[string]bool{}
	for i, m := range mounts {
		if !naming.ValidLabel(m.Volume) {
			return invalid("mounts", "mount %d: volume %q is not a DNS label", i, m.Volume)
		}
		if !path.IsAbs(m.Path) || path.Clean(m.Path) != m.Path || m.Path == "/" || strings.ContainsRune(m.Path, 0) {
			return invalid("mounts", "mount %d: path %q must be a clean absolute path other than /", i, m.Path)
		}
		for _, r := range reservedTargets {
			if nested(m.Path, r) || nested(r, m.Path) {
				return invalid("mounts", "mount %d: path %q overlaps %s, which the sandbox needs", i, m.Path, r)
			}
		}
		if m.Subpath != "" {
			if err := CheckSubpath(m.Subpath); err != nil {
				return invalid("mounts", "mount %d: %v", i, err)
			}
		}
		if seen[m.Path] {
			return invalid("mounts", "mount %d: path %q is mounted twice", i, m.Path)
		}
		seen[m.Path] = true
	}
	return nil
}

// nested reports whether clean absolute path p is dir or below it.
func nested(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func validateEnv(field string, env map[string]string) error {
	if len(env) > maxEnv {
		return invalid(field, "at most %d variables", maxEnv)
	}
	for k, v := range env {
		if !envKey.MatchString(k) {
			return invalid(field, "%q is not a valid variable name", k)
		}
		if strings.HasPrefix(k, "SANDBOXD_") {
			return invalid(field, "%q: the SANDBOXD_ prefix is reserved", k)
		}
		if len(v) > maxValueLen || strings.ContainsRune(v, 0) {
			return invalid(field, "value of %q is too long or contains NUL", k)
		}
	}
	return nil
}

// The runtimes a create may name.
const (
	// RuntimeDocker runs the sandbox as a container on the host's kernel.
	RuntimeDocker = "docker"
	// RuntimeGVisor runs it under gVisor's application kernel: no network,
	// and at least runtime.MinGVisorMemoryMB of memory.
	RuntimeGVisor = "gvisor"
)

// checkRuntime fills in the default runtime and checks that the daemon
// offers the one asked for and that the request fits it.
func (s *Service) checkRuntime(req *CreateRequest) error {
	req.Runtime = cmp.Or(req.Runtime, s.cfg.DefaultRuntime, RuntimeDocker)
	switch req.Runtime {
	case RuntimeDocker:
		return nil
	case RuntimeGVisor:
	default:
		return invalid("runtime", "unknown runtime %q (available: %s)", req.Runtime, strings.Join(s.runtimes(), ", "))
	}
	switch {
	case !s.cfg.GVisor:
		return invalid("runtime", "gvisor is not available on this daemon (the engine has no runsc; scripts/setup-gvisor.sh registers it)")
	case req.Network:
		return invalid("network", "a gvisor sandbox has no network on this daemon")
	case req.MemoryMB < runtime.MinGVisorMemoryMB:
		return invalid("memory_mb", "a gvisor sandbox needs at least %d (gVisor's own kernel is charged to it)", runtime.MinGVisorMemoryMB)
	}
	return nil
}

// runtimes lists the runtimes this daemon offers.
func (s *Service) runtimes() []string {
	if s.cfg.GVisor {
		return []string{RuntimeDocker, RuntimeGVisor}
	}
	return []string{RuntimeDocker}
}

// isolation is the runtime isolation a runtime name stands for.
func isolation(name string) runtime.Isolation {
	if name == RuntimeGVisor {
		return runtime.IsolationGVisor
	}
	return runtime.IsolationContainer
}
