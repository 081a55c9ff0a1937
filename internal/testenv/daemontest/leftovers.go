package daemontest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
)

// Engine is what runs the daemon's sandboxes: the last --engine of its
// own flags, else TestEngine.
func (d *Daemon) Engine() string {
	engine := TestEngine()
	for i, a := range d.args {
		switch {
		case a == "--engine" && i+1 < len(d.args):
			engine = d.args[i+1]
		case strings.HasPrefix(a, "--engine="):
			engine = strings.TrimPrefix(a, "--engine=")
		}
	}
	return engine
}

// TestEngine is the engine of a daemon the tests start without naming
// one: EnvEngine, else the daemon's own default (config.DefaultEngine).
// A test that looks at what only one engine has (the engine's
// containers, the oci runtime's files) asks this, or Daemon.Engine, which
// it is; one that needs an engine names it in the daemon's flags.
func TestEngine() string {
	if e := os.Getenv(EnvEngine); e != "" {
		return e
	}
	return config.DefaultEngine
}

// Leftovers lists what the host holds of the daemon's node beside the
// sandboxes keep, one line each; none means nothing leaked. Under Docker
// that is the containers labelled with its node id; under --engine oci
// every trace the oci runtime finds of the node (oci.Runtime.Traces: the
// sandboxes' directories and subvolumes, mounts, cgroups, network
// namespaces, veths, address leases, socket directories, the OCI
// runtime's state and live agents); with a sandbox network, the firewall
// rules of its bridge too (firewallLeftovers). ids are sandboxes the
// caller knows of (every id a test saw): their namespaces, veths and
// firewall chains are looked for even when no other trace names them. It reads and changes nothing of
// the daemon, which may be running or not.
func (d *Daemon) Leftovers(ctx context.Context, keep []string, ids ...string) ([]string, error) {
	fw, err := d.firewallLeftovers(ctx, keep, ids)
	if err != nil {
		return nil, err
	}
	left, err := d.runtimeLeftovers(ctx, keep, ids)
	return append(left, fw...), err
}

// runtimeLeftovers is Leftovers without the firewall.
func (d *Daemon) runtimeLeftovers(ctx context.Context, keep, ids []string) ([]string, error) {
	if d.Engine() != "oci" {
		out, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--no-trunc",
			"--filter", "label=sandboxd.node="+d.nodeID,
			"--format", `{{.Label "sandboxd.sandbox"}} container {{.ID}} {{.Status}}`).Output()
		if err != nil {
			return nil, fmt.Errorf("docker ps: %w", err)
		}
		var left []string
		for line := range strings.Lines(string(out)) {
			id, _, _ := strings.Cut(line, " ")
			if line = strings.TrimSpace(line); line != "" && !slices.Contains(keep, id) {
				left = append(left, line)
			}
		}
		return left, nil
	}
	rt, err := d.ociRuntime()
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	var left []string
	for _, tr := range rt.Traces(ids...) {
		if !slices.Contains(keep, tr.SandboxID) {
			left = append(left, fmt.Sprintf("%s %s %s", tr.SandboxID, tr.Kind, tr.Path))
		}
	}
	return left, nil
}

// firewallLeftovers lists the firewall rules of sandboxes not in keep,
// when the daemon has a sandbox network (--sandbox-network-name): the
// jumps of its bridge's chains, by the sandbox id in their comment, and
// the sandbox chains of ids (package netpolicy's names: "SBX-" and the
// first 20 hex digits of the id's SHA-256; comment "sandbox:<id>").
func (d *Daemon) firewallLeftovers(ctx context.Context, keep, ids []string) ([]string, error) {
	bridge := ""
	for i, a := range d.args {
		if a == "--sandbox-network-name" && i+1 < len(d.args) {
			bridge = d.args[i+1]
		}
	}
	if bridge == "" {
		return nil, nil
	}
	var left []string
	for _, t := range []struct{ table, chain string }{{"filter", "SBXD-F-" + bridge}, {"nat", "SBXD-N-" + bridge}} {
		out, err := exec.CommandContext(ctx, "iptables", "-w", "-t", t.table, "-S", t.chain).Output()
		if err != nil {
			continue // no chain: no rule
		}
		for line := range strings.Lines(string(out)) {
			_, after, ok := strings.Cut(line, "--comment ")
			if !ok {
				continue
			}
			c := strings.Trim(strings.Fields(after)[0], `"`)
			if id, ok := strings.CutPrefix(c, "sandbox:"); ok && !slices.Contains(keep, id) {
				left = append(left, id+" firewall rule "+strings.TrimSpace(line))
			}
		}
	}
	for _, id := range ids {
		if slices.Contains(keep, id) {
			continue
		}
		sum := sha256.Sum256([]byte(id))
		chain := "SBX-" + hex.EncodeToString(sum[:])[:20]
		if exec.CommandContext(ctx, "iptables", "-w", "-S", chain).Run() == nil {
			left = append(left, id+" firewall chain "+chain)
		}
	}
	return left, nil
}

// ociRuntime opens the oci runtime on the daemon's directories, as
// internal/daemon's openOCI does: its --oci-dir and its socket root.
// Only for a daemon of --engine oci (it makes the directories).
func (d *Daemon) ociRuntime() (*oci.Runtime, error) {
	return oci.New(oci.Options{NodeID: d.nodeID, Dir: d.ociDir, SocketRoot: socketRoot(d.dataDir)})
}

// OCIDir is the daemon's --oci-dir when it runs --engine oci: a directory
// of its own on the btrfs file system scripts/setup-oci.sh mounts, when
// there is one (disk limits are enforced there, as in production), else
// the daemon's default, <data-dir>/oci. Close removes it.
func (d *Daemon) OCIDir() string { return d.ociDir }

// OCIDirs are the --oci-dir of every daemon of e (those that ran
// --engine oci exist).
func (e *Env) OCIDirs() []string {
	dirs, _ := filepath.Glob(filepath.Join(e.Root, "*", "oci"))
	more, _ := filepath.Glob(filepath.Join(ociRoot(), filepath.Base(e.Root)+"-*"))
	return append(dirs, more...)
}

// ociRoot is where scripts/setup-oci.sh mounts its btrfs file system.
func ociRoot() string {
	dir := os.Getenv("SANDBOXD_OCI_DIR")
	if dir == "" {
		dir = "/var/lib/sandboxd-oci"
	}
	return filepath.Join(dir, "root")
}

// ociDir is the --oci-dir of a daemon of the Env rooted at root with
// data directory dataDir (OCIDir).
func ociDir(root, dataDir string) string {
	var fs unix.Statfs_t
	if unix.Statfs(ociRoot(), &fs) == nil && fs.Type == unix.BTRFS_SUPER_MAGIC {
		return filepath.Join(ociRoot(), filepath.Base(root)+"-"+filepath.Base(dataDir))
	}
	return filepath.Join(dataDir, "oci")
}

// socketRoot is a daemon's socket root (internal/daemon's socketRoot).
func socketRoot(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	if unix.Access("/run", unix.W_OK) == nil {
		return filepath.Join("/run", "sandboxd", hex.EncodeToString(sum[:6]))
	}
	return filepath.Join(os.TempDir(), "sandboxd-"+hex.EncodeToString(sum[:6]))
}

// OCISandbox is a sandbox the oci runtime runs for a daemon of an Env, as
// the engine lists a container: its node, its host name (the oci
// runtime's keyed name; no engine name exists) and its state (running,
// exited or created, as runtime.State says them; paused counts as
// running, as the engine's).
type OCISandbox struct {
	ID, Node, Hostname, State string
}

// OCISandboxes lists the sandboxes of every --oci-dir of e's daemons, of
// any node (OCIDirs), from the oci runtime's files and /proc.
func (e *Env) OCISandboxes(ctx context.Context) ([]OCISandbox, error) {
	var out []OCISandbox
	for _, dir := range e.OCIDirs() {
		entries, _ := os.ReadDir(filepath.Join(dir, "sandboxes"))
		runtimes := map[string]*oci.Runtime{}
		for _, en := range entries {
			var meta struct {
				Node     string `json:"node"`
				Hostname string `json:"hostname"`
			}
			b, err := os.ReadFile(filepath.Join(dir, "sandboxes", en.Name(), "meta.json"))
			if err != nil || json.Unmarshal(b, &meta) != nil || meta.Node == "" {
				continue // a create's temporary directory, or one being removed
			}
			rt := runtimes[meta.Node]
			if rt == nil {
				if rt, err = oci.New(oci.Options{NodeID: meta.Node, Dir: dir, SocketRoot: filepath.Join(os.TempDir(), "sbx-daemontest-unused")}); err != nil {
					return nil, err
				}
				defer rt.Close()
				runtimes[meta.Node] = rt
			}
			st, err := rt.Inspect(ctx, en.Name())
			if err != nil {
				return nil, err
			}
			if st.State == "missing" {
				continue
			}
			out = append(out, OCISandbox{ID: en.Name(), Node: meta.Node, Hostname: meta.Hostname, State: string(st.State)})
		}
	}
	return out, nil
}

// cgroupMounts is a shell script that mounts the host's cgroup
// hierarchies under /sys/fs/cgroup as this process sees them (the tmpfs,
// each v1 controller's hierarchy, the unified one), for a mount namespace
// whose /sys is a fresh sysfs (ip netns exec's). Mounting a v1 hierarchy
// with the same options attaches to the same hierarchy.
func cgroupMounts() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	var script strings.Builder
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		i := slices.Index(f, "-")
		if i < 0 || i+3 >= len(f) || len(f) < 5 || (f[4] != "/sys/fs/cgroup" && !strings.HasPrefix(f[4], "/sys/fs/cgroup/")) {
			continue
		}
		fstype, opts := f[i+1], f[i+3]
		var keep []string
		for _, o := range strings.Split(opts, ",") {
			if o != "rw" && o != "ro" {
				keep = append(keep, o)
			}
		}
		o := strings.Join(keep, ",")
		if o == "" {
			o = "defaults"
		}
		fmt.Fprintf(&script, "mkdir -p '%s' && mount -t %s -o '%s' %s '%s' || exit 1; ", f[4], fstype, o, fstype, f[4])
	}
	return script.String()
}
