package oci

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// cgroupRoot is where the host's cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupMode is the host's cgroup layout: unified (v2), or v1 (hybrid
// included: the OCI runtime then uses the v1 controllers).
type cgroupMode struct{ v2 bool }

func probeCgroups() cgroupMode {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return cgroupMode{v2: err == nil}
}

// file is the path of a controller's file in the cgroup path.
func (m cgroupMode) file(controller, path, name string) string {
	if m.v2 {
		return filepath.Join(cgroupRoot, path, name)
	}
	return filepath.Join(cgroupRoot, controller, path, name)
}

func (m cgroupMode) swapAccounting() bool {
	if m.v2 {
		return true // the OCI runtime converts memory+swap to memory.swap.max
	}
	_, err := os.Stat(filepath.Join(cgroupRoot, "memory", "memory.memsw.limit_in_bytes"))
	return err == nil
}

// paused reports whether the sandbox is paused: its cgroup frozen, or
// under gVisor runsc's pause, which state.json records.
func (r *Runtime) paused(id string) bool {
	if meta, err := r.readMeta(id); err == nil && meta.Isolation == runtime.IsolationGVisor {
		return r.readState(id).Paused
	}
	p := r.cgroupPath(id)
	if r.cgroups.v2 {
		b, _ := os.ReadFile(r.cgroups.file("", p, "cgroup.freeze"))
		return strings.TrimSpace(string(b)) == "1"
	}
	b, _ := os.ReadFile(r.cgroups.file("freezer", p, "freezer.state"))
	s := strings.TrimSpace(string(b))
	return s == "FROZEN" || s == "FREEZING"
}

// oomKilled reports whether the kernel's OOM killer killed a process of
// the sandbox's cgroup.
func (r *Runtime) oomKilled(id string) bool {
	name := "memory.oom_control"
	if r.cgroups.v2 {
		name = "memory.events"
	}
	b, _ := os.ReadFile(r.cgroups.file("memory", r.cgroupPath(id), name))
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
			return true
		}
	}
	return false
}

// removeCgroup removes the sandbox's cgroups the OCI runtime left (a
// crash between its steps); the OCI runtime's delete removes them
// otherwise. Best effort: an empty cgroup is removed, a busy one is not.
func (r *Runtime) removeCgroup(id string) {
	p := r.cgroupPath(id)
	if r.cgroups.v2 {
		_ = os.Remove(filepath.Join(cgroupRoot, p))
		return
	}
	entries, _ := os.ReadDir(cgroupRoot)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(cgroupRoot, e.Name(), p))
	}
}

// cpuSample is what CPUPercent is computed against on the next Stats call.
type cpuSample struct {
	cpu time.Duration
	at  time.Time
}

// Stats implements runtime.Runtime from the sandbox's cgroup files.
func (r *Runtime) Stats(ctx context.Context, sandboxID string) (runtime.Stats, error) {
	if err := checkID(sandboxID); err != nil {
		return runtime.Stats{}, err
	}
	meta, err := r.readMeta(sandboxID)
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("stats of sandbox %s: %w", sandboxID, err)
	}
	p := r.cgroupPath(meta.ID)
	m := r.cgroups
	out := runtime.Stats{At: time.Now()}
	if r.status(sandboxID).State != runtime.StateRunning {
		return out, nil // as the engine answers for a stopped container: zeros
	}
	var inactive uint64
	if m.v2 {
		for line := range strings.Lines(readString(m.file("cpu", p, "cpu.stat"))) {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "usage_usec" {
				us, _ := strconv.ParseUint(f[1], 10, 64)
				out.CPUTime = time.Duration(us) * time.Microsecond
			}
		}
		out.MemoryUsed = readUint(m.file("memory", p, "memory.current"))
		out.MemoryLimit = readUint(m.file("memory", p, "memory.max"))
		inactive = statField(m.file("memory", p, "memory.stat"), "inactive_file")
	} else {
		out.CPUTime = time.Duration(readUint(m.file("cpuacct", p, "cpuacct.usage")))
		out.MemoryUsed = readUint(m.file("memory", p, "memory.usage_in_bytes"))
		out.MemoryLimit = readUint(m.file("memory", p, "memory.limit_in_bytes"))
		inactive = statField(m.file("memory", p, "memory.stat"), "total_inactive_file")
	}
	if inactive < out.MemoryUsed {
		out.MemoryUsed -= inactive
	}
	if host := hostMemory(); out.MemoryLimit == 0 || out.MemoryLimit > host {
		out.MemoryLimit = host
	}
	out.Pids = readUint(m.file("pids", p, "pids.current"))
	cur := cpuSample{cpu: out.CPUTime, at: out.At}
	r.mu.Lock()
	prev, ok := r.cpuPrevs[sandboxID]
	r.cpuPrevs[sandboxID] = cur
	r.mu.Unlock()
	if ok && cur.cpu >= prev.cpu && cur.at.After(prev.at) {
		out.CPUPercent = float64(cur.cpu-prev.cpu) / float64(cur.at.Sub(prev.at)) * 100
	}
	return out, nil
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// readUint reads a file holding one number ("max" and unreadable are 0).
func readUint(path string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimSpace(readString(path)), 10, 64)
	return n
}

// statField reads one "key value" line of a memory.stat file.
func statField(path, key string) uint64 {
	for line := range strings.Lines(readString(path)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// hostMemory is the host's memory in bytes.
func hostMemory() uint64 {
	for line := range strings.Lines(readString("/proc/meminfo")) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

var _ runtime.UsageReader = (*Runtime)(nil)

// Usage implements runtime.UsageReader: the disk its qgroup counts (where
// no quota counts it, the blocks of the files in rw/, walked at most
// every diskWalkEvery), and the bytes through the network
// interfaces of its namespace but loopback, from the agent's
// /proc/<pid>/net/dev (zero when it is not running).
func (r *Runtime) Usage(_ context.Context, sandboxID string) (runtime.Usage, error) {
	if err := checkID(sandboxID); err != nil {
		return runtime.Usage{}, err
	}
	if _, err := r.readMeta(sandboxID); err != nil {
		return runtime.Usage{}, fmt.Errorf("usage of sandbox %s: %w", sandboxID, err)
	}
	var u runtime.Usage
	var ok bool
	if u.DiskUsed, ok = r.subvolumeUsed(r.rwDir(sandboxID)); !ok {
		u.DiskUsed = r.walkedSize(sandboxID)
	}
	if p, ok := livePid(r.readState(sandboxID)); ok {
		dev := readString("/proc/" + strconv.Itoa(p.pid) + "/net/dev")
		p.close()
		for line := range strings.Lines(dev) {
			name, rest, ok := strings.Cut(line, ":")
			f := strings.Fields(rest)
			if !ok || strings.TrimSpace(name) == "lo" || len(f) < 9 {
				continue
			}
			rx, _ := strconv.ParseUint(f[0], 10, 64)
			tx, _ := strconv.ParseUint(f[8], 10, 64)
			u.NetRx += rx
			u.NetTx += tx
		}
	}
	return u, nil
}

// diskWalkEvery is how old a walked disk size may be (the Docker
// runtime's engine caches its own count as long).
const diskWalkEvery = 10 * time.Second

type walked struct {
	size uint64
	at   time.Time
}

// walkedSize is the allocated size of the files in the sandbox's rw/,
// cached for diskWalkEvery.
func (r *Runtime) walkedSize(id string) uint64 {
	if v, ok := r.diskSizes.Load(id); ok && time.Since(v.(walked).at) < diskWalkEvery {
		return v.(walked).size
	}
	var size uint64
	_ = filepath.WalkDir(r.rwDir(id), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				size += uint64(st.Blocks) * 512
			}
		}
		return nil
	})
	r.diskSizes.Store(id, walked{size: size, at: time.Now()})
	return size
}

// cgroupDirs are the sandbox's cgroup directories that exist: under v2
// the one, under v1 each controller's (a co-mounted controller's link,
// cpu to cpu,cpuacct, names the same directory twice: harmless).
func (r *Runtime) cgroupDirs(id string) []string {
	p := r.cgroupPath(id)
	if r.cgroups.v2 {
		if _, err := os.Stat(filepath.Join(cgroupRoot, p)); err == nil {
			return []string{filepath.Join(cgroupRoot, p)}
		}
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", p))
	return dirs
}

// killCgroup kills every process left in the sandbox's cgroups and
// waits until none is. They are what an OCI runtime command killed
// midway left running with no record of them (a `runsc restore` killed
// with the daemon leaves the gVisor sandbox it started, restoring): the
// OCI runtime's delete does not know them, and they keep the cgroups
// busy. A frozen cgroup is thawed first (a frozen process dies only
// once thawed). A pid is signalled through a pidfd after its
// /proc/<pid>/cgroup is seen to name the sandbox's cgroup, so a pid
// reused by another process is never signalled. It gives up after
// cleanupTimeout, or when ctx ends, with an error: the removal is
// retried by the next destroy or reconcile.
func (r *Runtime) killCgroup(ctx context.Context, id string) error {
	dirs := r.cgroupDirs(id)
	if len(dirs) == 0 {
		return nil
	}
	suffix := "/" + strings.TrimLeft(r.cgroupPath(id), "/")
	deadline := time.Now().Add(cleanupTimeout)
	for {
		pids := cgroupPids(dirs)
		if len(pids) == 0 {
			return nil
		}
		for _, d := range dirs {
			// Best effort: v1's freezer, v2's cgroup.freeze.
			_ = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0)
			_ = os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte("0"), 0)
		}
		for _, pid := range pids {
			killIfIn(pid, suffix)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sandbox's cgroup still holds processes %v after %s", pids, cleanupTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the sandbox's cgroup still holds processes %v: %w", pids, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cgroupPids are the live (not zombie) processes in the cgroup dirs.
func cgroupPids(dirs []string) []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range dirs {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 0 || seen[pid] {
				continue
			}
			seen[pid] = true
			if _, state, err := procStat(pid); err != nil || state == 'Z' || state == 'X' {
				continue // gone, or dead and waiting for its parent
			}
			out = append(out, pid)
		}
	}
	return out
}

// killIfIn SIGKILLs pid if, once pinned by a pidfd, a line of its
// /proc/<pid>/cgroup ends with suffix (the sandbox's cgroup path).
func killIfIn(pid int, suffix string) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return
	}
	for line := range strings.Lines(string(b)) {
		if strings.HasSuffix(strings.TrimRight(line, "\n"), suffix) {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			return
		}
	}
}
