package oci

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Trace is one thing on the host that a sandbox of this runtime's node
// holds, or that a crashed create or removal of one left behind.
type Trace struct {
	// SandboxID is the sandbox the trace belongs to.
	SandboxID string
	// Kind says what it is: TraceDir, TraceTmpDir, TraceSubvolume,
	// TraceMount, TraceCgroup, TraceNetns, TraceVeth, TraceLease,
	// TraceSocketDir, TraceOCIState or TraceProcess.
	Kind string
	// Path names it: a file system path, or an interface's name.
	Path string
}

// The kinds of Trace.
const (
	TraceDir       = "sandbox dir"
	TraceTmpDir    = "tmp dir" // a create's directory not yet renamed into place
	TraceSubvolume = "subvolume"
	TraceMount     = "mount"
	TraceCgroup    = "cgroup"
	TraceNetns     = "netns"
	TraceVeth      = "veth"
	TraceLease     = "address lease"
	TraceSocketDir = "socket dir"
	TraceOCIState  = "oci state"
	TraceProcess   = "process"
)

// Traces lists what of this node's sandboxes exists on the host: their
// directories (and the subvolumes in them), mounts under Options.Dir,
// cgroups (every controller's), network namespaces, host-side veths,
// address leases, socket directories, the OCI runtime's state and live
// agents. It is the runtime's own inventory, for an auditor and for
// tests that prove a crash or a failed create leaked nothing: after a
// sandbox is destroyed, nothing of it is listed. Namespaces and veths
// are named by a hash of the sandbox's directory, so they are found for
// every sandbox another trace names, and for ids (say, every id a test
// saw). It changes nothing; it reads no engine.
func (r *Runtime) Traces(ids ...string) []Trace {
	var out []Trace
	seen := map[string]bool{}
	add := func(id string) {
		if id != "" {
			seen[id] = true
		}
	}
	for _, id := range ids {
		add(id)
	}
	sandboxes := filepath.Join(r.opts.Dir, "sandboxes")
	entries, _ := os.ReadDir(sandboxes)
	for _, e := range entries {
		name, kind := e.Name(), TraceDir
		id := name
		if strings.HasPrefix(name, tmpPrefix) {
			kind, id = TraceTmpDir, tmpBase(name)
		}
		var meta sandboxMeta
		if readJSON(filepath.Join(sandboxes, name, "meta.json"), &meta) == nil && meta.Node != r.opts.NodeID {
			continue // another node's, sharing the directory (tests)
		}
		out = append(out, Trace{SandboxID: id, Kind: kind, Path: filepath.Join(sandboxes, name)})
		if r.disk.subvolumes {
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(sandboxes, name, rwName), &st) == nil && st.Ino == 256 { // a subvolume's root
				out = append(out, Trace{SandboxID: id, Kind: TraceSubvolume, Path: filepath.Join(sandboxes, name, rwName)})
			}
		}
		if kind == TraceDir {
			add(id)
			if p, ok := livePid(r.readState(id)); ok {
				out = append(out, Trace{SandboxID: id, Kind: TraceProcess, Path: "/proc/" + strconv.Itoa(p.pid)})
				p.close()
			}
		}
	}
	for _, m := range mountsUnder(r.opts.Dir) {
		rel, _ := filepath.Rel(sandboxes, m)
		id, _, _ := strings.Cut(rel, string(filepath.Separator))
		if strings.HasPrefix(rel, "..") {
			id = ""
		}
		if r.otherNode(id) {
			continue
		}
		out = append(out, Trace{SandboxID: id, Kind: TraceMount, Path: m})
		add(id)
	}
	// Cgroups: <parent>/<node hash>-<id>, under every hierarchy (v2: the
	// root; v1: each controller's, the hybrid's unified one included).
	prefix := filepath.Base(r.cgroupPath("x"))
	prefix = prefix[:len(prefix)-1]
	parents, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", r.opts.CgroupParent))
	parents = append(parents, filepath.Join(cgroupRoot, r.opts.CgroupParent))
	for _, parent := range parents {
		cgs, _ := os.ReadDir(parent)
		for _, e := range cgs {
			if id, ok := strings.CutPrefix(e.Name(), prefix); ok && e.IsDir() {
				out = append(out, Trace{SandboxID: id, Kind: TraceCgroup, Path: filepath.Join(parent, e.Name())})
				add(id)
			}
		}
	}
	socks, _ := os.ReadDir(r.opts.SocketRoot)
	for _, e := range socks {
		if r.otherNode(e.Name()) {
			continue
		}
		out = append(out, Trace{SandboxID: e.Name(), Kind: TraceSocketDir, Path: filepath.Join(r.opts.SocketRoot, e.Name())})
		add(e.Name())
	}
	// The OCI runtimes' state: crun and runc name a container's
	// directory by its id, runsc its files <id>_sandbox:<id>.*.
	roots, _ := os.ReadDir(filepath.Join(r.opts.Dir, "state"))
	for _, root := range roots {
		dir := filepath.Join(r.opts.Dir, "state", root.Name())
		states, _ := os.ReadDir(dir)
		for _, e := range states {
			id, _, _ := strings.Cut(e.Name(), "_")
			if r.otherNode(id) {
				continue
			}
			out = append(out, Trace{SandboxID: id, Kind: TraceOCIState, Path: filepath.Join(dir, e.Name())})
			add(id)
		}
	}
	// Address leases name the directory of their sandbox.
	leaseDirs, _ := filepath.Glob(filepath.Join(defaultLeaseRoot, "*"))
	if r.opts.Network != nil {
		leaseDirs = append(leaseDirs, r.opts.Network.leaseDir())
	}
	slices.Sort(leaseDirs)
	for _, ld := range slices.Compact(leaseDirs) {
		leases, _ := os.ReadDir(ld)
		for _, e := range leases {
			holder, err := os.ReadFile(filepath.Join(ld, e.Name()))
			if err != nil || filepath.Dir(string(holder)) != sandboxes {
				continue
			}
			id := filepath.Base(string(holder))
			if r.otherNode(id) {
				continue
			}
			out = append(out, Trace{SandboxID: id, Kind: TraceLease, Path: filepath.Join(ld, e.Name())})
			add(id)
		}
	}
	for id := range seen {
		ns, veth := netNames(r.sandboxDir(id))
		if _, err := os.Lstat(filepath.Join("/run/netns", ns)); err == nil {
			out = append(out, Trace{SandboxID: id, Kind: TraceNetns, Path: filepath.Join("/run/netns", ns)})
		}
		if _, err := os.Lstat(filepath.Join("/sys/class/net", veth)); err == nil {
			out = append(out, Trace{SandboxID: id, Kind: TraceVeth, Path: veth})
		}
	}
	slices.SortFunc(out, func(a, b Trace) int {
		return strings.Compare(a.SandboxID+"\x00"+a.Kind+"\x00"+a.Path, b.SandboxID+"\x00"+b.Kind+"\x00"+b.Path)
	})
	return out
}

// defaultLeaseRoot holds the default lease directories (Network.LeaseDir).
const defaultLeaseRoot = "/run/sandboxd-oci"

// otherNode reports whether sandbox id's meta.json names another node.
func (r *Runtime) otherNode(id string) bool {
	if !runtime.ValidSandboxID(id) {
		return false
	}
	meta, err := r.readMeta(id)
	return err == nil && meta.Node != r.opts.NodeID
}

// mountsUnder lists the mount points under dir, from this process's
// mountinfo, deepest last.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}
