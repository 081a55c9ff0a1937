package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
)

// The OCI runtime specification's config.json, as much of it as a
// sandbox uses (github.com/opencontainers/runtime-spec, config.md and
// config-linux.md); field names are the specification's.
type ociSpec struct {
	OCIVersion  string            `json:"ociVersion"`
	Process     ociProcess        `json:"process"`
	Root        ociRoot           `json:"root"`
	Hostname    string            `json:"hostname"`
	Mounts      []ociMount        `json:"mounts"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Linux       ociLinux          `json:"linux"`
}

type ociProcess struct {
	Terminal        bool            `json:"terminal"`
	User            ociUser         `json:"user"`
	Args            []string        `json:"args"`
	Env             []string        `json:"env"`
	Cwd             string          `json:"cwd"`
	Capabilities    ociCapabilities `json:"capabilities"`
	Rlimits         []ociRlimit     `json:"rlimits,omitempty"`
	NoNewPrivileges bool            `json:"noNewPrivileges"`
	OOMScoreAdj     *int            `json:"oomScoreAdj,omitempty"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociCapabilities struct {
	Bounding  []string `json:"bounding"`
	Effective []string `json:"effective"`
	Permitted []string `json:"permitted"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces    []ociNamespace  `json:"namespaces"`
	Resources     ociResources    `json:"resources"`
	CgroupsPath   string          `json:"cgroupsPath"`
	Seccomp       json.RawMessage `json:"seccomp,omitempty"`
	MaskedPaths   []string        `json:"maskedPaths"`
	ReadonlyPaths []string        `json:"readonlyPaths"`
}

type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

type ociResources struct {
	Devices []ociDevice `json:"devices"`
	Memory  *ociMemory  `json:"memory,omitempty"`
	CPU     *ociCPU     `json:"cpu,omitempty"`
	Pids    *ociPids    `json:"pids,omitempty"`
	BlockIO *ociBlockIO `json:"blockIO,omitempty"`
}

type ociDevice struct {
	Allow  bool   `json:"allow"`
	Access string `json:"access"`
}

type ociMemory struct {
	Limit *int64 `json:"limit,omitempty"`
	Swap  *int64 `json:"swap,omitempty"`
}

type ociCPU struct {
	Quota  *int64  `json:"quota,omitempty"`
	Period *uint64 `json:"period,omitempty"`
}

type ociPids struct {
	Limit int64 `json:"limit"`
}

// cpuPeriod is the CFS period a CPU limit is a quota of (the engine's).
const cpuPeriod = 100000

// The paths the engine masks and makes read-only in every container
// (moby's oci/defaults.go): kernel state a sandbox has no business
// reading (kcore, keys, timer and scheduler debug files) or writing
// (sysrq, /proc/sys).
var (
	maskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// bundleSpec builds a sandbox's config.json: what the Docker runtime
// asks of the engine (internal/runtime/docker, hostConfig and
// containerConfig), said to the OCI runtime directly. The same
// capabilities (runtime.SandboxCapabilities, everything else dropped), the
// same seccomp profile (docker.SeccompProfileJSON, converted), the agent
// as PID 1 from a read-only bind mount, its socket directory read-only,
// no-new-privileges left unset as under the engine (setuid programs and
// sudo work; the Docker runtime's hostConfig says why), the engine's masked and read-only paths, private
// namespaces (cgroup included), cgroup limits for CPU, memory (no swap
// beyond it) and pids, and /etc/hosts, /etc/hostname and /etc/resolv.conf
// as the engine writes them (files of the root file system: writeEtc).
// uid and gid are the image user's (imageUser); tmpBind binds the root
// file system's /tmp onto /tmp (gVisor sandboxes: tmp.go).
func (r *Runtime) bundleSpec(spec runtime.Spec, sb *sandboxMeta, img image, uid, gid uint32, netnsPath string, tmpBind bool) (*ociSpec, error) {
	env := slices.Clone(img.cfg.Env)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = setEnv(env, k, spec.Env[k])
	}
	env = setEnv(env, "HOSTNAME", sb.Hostname)
	// Not the agent token: the boot hands it over (boot.go's agentToken).
	if spec.Isolation == runtime.IsolationGVisor {
		env = setEnv(env, runtime.EnvAgentIsolation, string(runtime.IsolationGVisor))
	} else {
		env = setEnv(env, runtime.EnvAgentHandoff, runtime.AgentSocketDir+"/"+runtime.AgentHandoffName)
	}
	cwd := img.cfg.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	caps := slices.Clone(runtime.SandboxCapabilities)
	mounts := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		{Destination: runtime.AgentPath, Type: "bind", Source: spec.AgentBinary, Options: []string{"rbind", "rprivate", "ro", "nosuid", "nodev"}},
	}
	if _, err := os.Lstat(filepath.Join(r.rwDir(spec.SandboxID), "etc", "hosts")); err == nil {
		// The image's /etc is no directory: writeEtc left the files
		// beside the upper directory.
		for _, name := range []string{"hosts", "hostname", "resolv.conf"} {
			mounts = append(mounts, ociMount{Destination: "/etc/" + name, Type: "bind", Source: filepath.Join(r.rwDir(spec.SandboxID), "etc", name), Options: []string{"rbind", "rprivate"}})
		}
	}
	sockOpts := []string{"rbind", "rprivate", "nosuid", "nodev", "noexec"}
	if spec.Isolation != runtime.IsolationGVisor { // see the Docker runtime's startAgent
		sockOpts = append(sockOpts, "ro")
	}
	mounts = append(mounts, ociMount{Destination: runtime.AgentSocketDir, Type: "bind", Source: r.SocketDir(spec.SandboxID), Options: sockOpts})
	// Before the caller's mounts, which may be under /tmp; one on /tmp
	// itself replaces it.
	if tmpBind && !slices.ContainsFunc(spec.Mounts, func(m runtime.Mount) bool { return filepath.Clean(m.Path) == tmpDestination }) {
		mounts = append(mounts, ociMount{Destination: tmpDestination, Type: "bind", Source: r.tmpSource(spec.SandboxID), Options: []string{"rbind", "rprivate"}})
	}
	for _, m := range spec.Mounts {
		opts := []string{"rbind", "rprivate"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, ociMount{Destination: m.Path, Type: "bind", Source: m.HostPath, Options: opts})
	}
	network := ociNamespace{Type: "network"}
	if netnsPath != "" {
		network.Path = netnsPath
	}
	res := ociResources{Devices: []ociDevice{{Allow: false, Access: "rwm"}}}
	if spec.MemoryMB > 0 {
		limit := spec.MemoryMB << 20
		res.Memory = &ociMemory{Limit: &limit}
		if r.swapAccounting {
			res.Memory.Swap = &limit // memory+swap = memory: no swap beyond it
		}
	}
	if spec.CPU > 0 {
		quota, period := int64(math.Round(spec.CPU*cpuPeriod)), uint64(cpuPeriod)
		res.CPU = &ociCPU{Quota: &quota, Period: &period}
	}
	if spec.PidsLimit > 0 {
		res.Pids = &ociPids{Limit: spec.PidsLimit}
	}
	res.BlockIO = blockIO(r.opts.IOLimit, r.ioDevices) // io.go
	s := &ociSpec{
		OCIVersion: "1.0.2",
		Process: ociProcess{
			User: ociUser{UID: uid, GID: gid},
			Args: []string{runtime.AgentPath},
			Env:  env,
			Cwd:  cwd,
			Capabilities: ociCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			// The engine's containers inherit dockerd's open-file
			// limit; these, the daemon's.
			Rlimits:     nofile(),
			OOMScoreAdj: &r.agentOOMScore,
		},
		Root:     ociRoot{Path: "rootfs"},
		Hostname: sb.Hostname,
		Mounts:   mounts,
		Linux: ociLinux{
			Namespaces: []ociNamespace{
				{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "cgroup"}, network,
			},
			Resources:     res,
			CgroupsPath:   r.cgroupPath(spec.SandboxID),
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	if spec.Isolation != runtime.IsolationGVisor {
		seccomp, err := ociSeccomp()
		if err != nil {
			return nil, err
		}
		s.Linux.Seccomp = seccomp
	}
	return s, nil
}

// setEnv sets k=v in env, replacing an earlier k.
func setEnv(env []string, k, v string) []string {
	env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
	return append(env, k+"="+v)
}

// imageUser resolves the image's user ("", "root", a name, "uid",
// "uid:gid", "name:group") against its /etc/passwd and /etc/group. The
// image is hostile (a committed sandbox's, a registry's): its files are
// read by imageFile, confined to the image's root.
func imageUser(img image) (uid, gid uint32, err error) {
	u, g, _ := strings.Cut(img.cfg.User, ":")
	if u == "" || u == "root" {
		u = "0"
	}
	uid, ugid, err := lookupID(img.dir, "etc/passwd", u)
	if err != nil {
		return 0, 0, fmt.Errorf("image user %q: %w", img.cfg.User, err)
	}
	gid = ugid
	if g != "" {
		if gid, _, err = lookupID(img.dir, "etc/group", g); err != nil {
			return 0, 0, fmt.Errorf("image group %q: %w", g, err)
		}
	}
	return uid, gid, nil
}

// maxImageFile caps what the daemon reads of an image's /etc/passwd or
// /etc/group.
const maxImageFile = 1 << 20

// imageFile reads name (relative, e.g. "etc/passwd") of the image rooted
// at root as the sandbox would see it: symlinks resolve inside root
// (openat2 RESOLVE_IN_ROOT; no /proc magic links), never to the host's
// files; it opens without blocking and wants a regular file of at most
// maxImageFile bytes (a FIFO or a device must not hang Create). A file
// the image does not have is os.ErrNotExist.
func imageFile(root, name string) ([]byte, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = openNoSymlinks(dir, name)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: "/" + name, Err: err}
	}
	f := os.NewFile(uintptr(fd), "/"+name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the image's /%s is not a regular file (%v)", name, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxImageFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxImageFile {
		return nil, fmt.Errorf("the image's /%s is larger than %d bytes", name, maxImageFile)
	}
	return b, nil
}

// checkMountPaths refuses, with runtime.ErrInvalidSpec, a mount whose
// path is a file of the image rooted at root (or has one on its way): a
// volume, a directory, cannot go over it. The engine refuses it at the
// start; here it is refused before anything is made, and the message
// names no host path. Symlinks resolve inside root, as in imageFile.
func checkMountPaths(root string, mounts []runtime.Mount) error {
	if len(mounts) == 0 {
		return nil
	}
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	for _, m := range mounts {
		name := strings.TrimPrefix(filepath.Clean(m.Path), "/")
		if name == "" {
			continue
		}
		fd, err := unix.Openat2(dir, name, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		notDir := errors.Is(err, unix.ENOTDIR)
		if err == nil {
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
				notDir = true
			}
			unix.Close(fd)
		}
		if notDir {
			return fmt.Errorf("%w: mount path %s is a file in the image; a volume needs a directory or a path that does not exist", runtime.ErrInvalidSpec, m.Path)
		}
	}
	return nil
}

// openNoSymlinks opens name under dir following no symlink at all (for a
// kernel without openat2).
func openNoSymlinks(dir int, name string) (int, error) {
	parts := strings.Split(name, "/")
	cur := dir
	for i, p := range parts {
		flags := unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(parts)-1 {
			flags |= unix.O_PATH | unix.O_DIRECTORY
		} else {
			flags |= unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
		}
		fd, err := unix.Openat(cur, p, flags, 0)
		if cur != dir {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// lookupID finds name (or a number) in a passwd- or group-format file of
// the image at root: its id and, for passwd, its primary group. A number
// not in the file (or with no such file) is itself (with group 0).
func lookupID(root, file, name string) (id, gid uint32, err error) {
	b, ferr := imageFile(root, file)
	if ferr != nil && !errors.Is(ferr, os.ErrNotExist) {
		return 0, 0, ferr
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		fields := strings.Split(line, ":")
		if len(fields) < 3 || (fields[0] != name && fields[2] != name) {
			continue
		}
		n, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		var g uint64
		if len(fields) > 3 {
			g, _ = strconv.ParseUint(fields[3], 10, 32)
		}
		return uint32(n), uint32(g), nil
	}
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), 0, nil
	}
	return 0, 0, fmt.Errorf("no %q in the image's %s", name, filepath.Base(file))
}

// ociSeccomp is the sandboxes' seccomp profile (the Docker runtime's,
// docker.SeccompProfileJSON) in the OCI runtime's form: the engine's
// format differs only in naming architectures through a map of
// architectures to their sub-architectures, where the OCI one lists them
// all, and in carrying comments.
var ociSeccomp = sync.OnceValues(func() (json.RawMessage, error) {
	var engine struct {
		DefaultAction   string `json:"defaultAction"`
		DefaultErrnoRet *uint  `json:"defaultErrnoRet,omitempty"`
		ArchMap         []struct {
			Architecture     string   `json:"architecture"`
			SubArchitectures []string `json:"subArchitectures"`
		} `json:"archMap"`
		Syscalls []struct {
			Names    []string          `json:"names"`
			Action   string            `json:"action"`
			ErrnoRet *uint             `json:"errnoRet,omitempty"`
			Args     []json.RawMessage `json:"args,omitempty"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal([]byte(docker.SeccompProfileJSON()), &engine); err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	type syscall struct {
		Names    []string          `json:"names"`
		Action   string            `json:"action"`
		ErrnoRet *uint             `json:"errnoRet,omitempty"`
		Args     []json.RawMessage `json:"args,omitempty"`
	}
	out := struct {
		DefaultAction   string    `json:"defaultAction"`
		DefaultErrnoRet *uint     `json:"defaultErrnoRet,omitempty"`
		Architectures   []string  `json:"architectures"`
		Syscalls        []syscall `json:"syscalls"`
	}{DefaultAction: engine.DefaultAction, DefaultErrnoRet: engine.DefaultErrnoRet}
	// As the engine does: the host's architecture and its own
	// sub-architectures only.
	native := map[string]string{"amd64": "SCMP_ARCH_X86_64", "arm64": "SCMP_ARCH_AARCH64"}[goruntime.GOARCH]
	for _, a := range engine.ArchMap {
		if a.Architecture == native {
			out.Architectures = append(out.Architectures, a.Architecture)
			out.Architectures = append(out.Architectures, a.SubArchitectures...)
		}
	}
	for _, s := range engine.Syscalls {
		out.Syscalls = append(out.Syscalls, syscall(s))
	}
	return json.Marshal(out)
})

// nofile is this process's open-file limit (its hard limit as the soft
// one too), which the sandbox gets: raising a hard limit takes privilege
// the OCI runtime may lack.
func nofile() []ociRlimit {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return nil
	}
	return []ociRlimit{{Type: "RLIMIT_NOFILE", Hard: l.Max, Soft: l.Max}}
}
