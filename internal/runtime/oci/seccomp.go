package oci

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Compiled seccomp filters. crun compiles a container's seccomp profile
// into a BPF program with libseccomp at every `run`: measured here, 16 of
// the 22 ms of CPU a sandbox's `crun run` takes, and in a burst of cold
// creates that CPU is what they queue for. The program is the same for
// every sandbox (one profile, ociSeccomp), and crun leaves it in the
// container's state directory (seccomp.bpf, which `crun exec` loads). So
// the first sandbox a process starts with crun compiles it, the program
// is read back from there and kept in memory, and every later create
// hands it to crun in the annotation run.oci.seccomp_bpf_data, with which
// crun loads it as it is instead of compiling the profile (crun(1)). The
// profile stays in config.json (its flags still apply; runc and runsc
// ignore the annotation).
//
// Nothing of it is on disk beyond what crun itself keeps: a daemon
// restarted compiles once again. A program is kept per binary, its size
// and modification time, and the profile's hash: crun replaced under a
// running daemon, or another profile, compiles again. The state directory
// is the daemon's (0700, outside every sandbox's mounts), and the kernel
// checks the program when it loads it.

// seccompBPFAnnotation names the base64 program crun loads as the
// container's seccomp filter in place of the profile.
const seccompBPFAnnotation = "run.oci.seccomp_bpf_data"

// maxSeccompBPF bounds a program read back: the kernel takes at most
// BPF_MAXINSNS (4096) instructions of 8 bytes.
const maxSeccompBPF = 4096 * 8

// seccompKey is what a compiled program depends on.
type seccompKey struct {
	binary  string
	size    int64
	mtime   int64
	profile [sha256.Size]byte
}

// seccompPrograms are the compiled programs of this process, base64.
type seccompPrograms struct {
	mu sync.Mutex
	m  map[seccompKey]string
}

// compiledSeccomp puts the compiled program of cfg's seccomp profile in
// cfg's annotations when this process has it for the sandbox's binary.
// Otherwise learn reports whether the boot's compile is worth reading
// back (learnSeccomp) under key: crun runs the sandbox, with a profile.
func (r *Runtime) compiledSeccomp(meta *sandboxMeta, cfg *ociSpec) (key seccompKey, learn bool) {
	bin := r.binaryOf(meta)
	if len(cfg.Linux.Seccomp) == 0 || filepath.Base(bin) != "crun" {
		return seccompKey{}, false
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return seccompKey{}, false
	}
	key = seccompKey{binary: bin, size: fi.Size(), mtime: fi.ModTime().UnixNano(), profile: sha256.Sum256(cfg.Linux.Seccomp)}
	r.seccomp.mu.Lock()
	prog, ok := r.seccomp.m[key]
	r.seccomp.mu.Unlock()
	if !ok {
		return key, true
	}
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	cfg.Annotations[seccompBPFAnnotation] = prog
	return key, false
}

// learnSeccomp keeps the program crun compiled for the sandbox, which it
// just started without one given (compiledSeccomp), under key. A program
// that cannot be read is not kept: the next create compiles again.
func (r *Runtime) learnSeccomp(key seccompKey, meta *sandboxMeta) {
	prog, err := readSeccompBPF(filepath.Join(r.stateRoot(meta), meta.ID, "seccomp.bpf"))
	if err != nil {
		r.log.Debug("seccomp: the compiled program is not kept", "sandbox", meta.ID, "err", err)
		return
	}
	r.seccomp.mu.Lock()
	defer r.seccomp.mu.Unlock()
	if r.seccomp.m == nil {
		r.seccomp.m = map[seccompKey]string{}
	}
	r.seccomp.m[key] = base64.StdEncoding.EncodeToString(prog)
}

// readSeccompBPF reads a BPF program: a regular file (no link followed)
// of whole instructions, at most maxSeccompBPF bytes.
func readSeccompBPF(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 || fi.Size() > maxSeccompBPF || fi.Size()%8 != 0 {
		return nil, fmt.Errorf("%s: not a BPF program (%s, %d bytes)", path, fi.Mode().Type(), fi.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSeccompBPF+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != fi.Size() {
		return nil, errors.New(path + ": changed while read")
	}
	return b, nil
}
