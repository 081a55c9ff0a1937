// Package volume keeps named volumes: directories under the daemon's data
// directory that sandboxes bind-mount and that outlive any one sandbox.
// Volumes belong to an owner: <root>/<hash of owner>/<name>, so a tenant
// can never mount another tenant's volume by naming it. Where the daemon
// can, each volume is a file system of its own, of a fixed size, so that
// no sandbox fills the host's disk through one (fs.go). A mount of a
// subpath of a volume is staged by the daemon (stage.go) so that no
// sandbox sharing the volume can turn it into a mount of the host.
package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Dir keeps volumes under one root directory.
type Dir struct {
	root string
	// sizeMB is the size of each new volume's file system (fs.go); 0:
	// volumes are plain directories, with no limit, and noLimit says why.
	// maxTotalMB bounds the sizes of all volumes together, and totalMB is
	// their sum now (under mu).
	sizeMB, maxTotalMB, totalMB int64
	noLimit                     string
	// Dropped, when set, is told of every volume Dir removes (RemoveVolume,
	// Abandon), under Dir's lock: the daemon releases the disk the volume
	// held in its owner's quota.
	Dropped func(owner, name string)
	// staging holds the staged mounts of subpaths (stage.go):
	// <staging>/<sandbox id>/<mount index>.
	staging string

	// mu serializes Prepare and Abandon, so that a directory Abandon
	// removes is never one another Prepare is about to hand out.
	mu sync.Mutex
	// made lists, per sandbox whose create is in flight or alive, the
	// directories its Prepare created (parents first).
	made map[string][]string
	// users counts, per directory, the sandboxes of this process that
	// prepared it and were not yet released or abandoned.
	users map[string]int
	// binds remembers each sandbox's directories, to drop its users.
	binds map[string][]string
	// subdirs lists, per sandbox whose create is in flight, the
	// directories its subpaths made inside volumes, for Abandon.
	subdirs map[string][]madeSubdir
	// staged lists, per sandbox of this process, the directories its
	// subpath mounts staged (<volume dir>/<subpath>), so that a failed
	// create never removes a directory it made that another sandbox has
	// staged since.
	staged map[string][]string
}

// madeSubdir is a directory a subpath mount made inside a volume.
type madeSubdir struct {
	vol string   // the volume's directory
	rel []string // made, relative to vol, parents first
}

// Options are a Dir's volume limits.
type Options struct {
	// SizeMB is the size of each new volume's file system (fs.go); 0:
	// volumes are plain directories, with no limit.
	SizeMB int64
	// MaxTotalMB bounds the sizes of all the volumes together (their
	// files are sparse, so this is what they may come to take of the
	// data directory's file system); 0: half of that file system.
	MaxTotalMB int64
}

// Reserve holds the size of an owner's new volume in the owner's disk
// quota. Dir calls it under its lock just before it makes the volume
// (never for one that exists), and Dropped releases it when Dir removes
// the volume or fails to make it; an error refuses the volume.
type Reserve = service.VolumeReserve

// New returns a Dir rooted at root (created 0700 when missing). Subpath
// mounts are staged in "mounts" beside root (<data-dir>/mounts for the
// daemon's <data-dir>/volumes), also 0700.
//
// With opts.SizeMB > 0 every new volume is a file system of that size
// where this process can make one (a probe, ~30 ms); where it cannot,
// volumes are plain directories and Limits says why. It settles what a
// crash or a reboot left (recover): the warnings are for the daemon's log.
func New(root string, opts Options) (d *Dir, warnings []string, err error) {
	staging := filepath.Join(filepath.Dir(filepath.Clean(root)), "mounts")
	for _, dir := range []string{root, staging} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("volume root: %w", err)
		}
	}
	d = &Dir{
		root: root, staging: staging,
		made: map[string][]string{}, users: map[string]int{}, binds: map[string][]string{},
		subdirs: map[string][]madeSubdir{}, staged: map[string][]string{},
	}
	switch {
	case opts.SizeMB <= 0:
		d.noLimit = "no volume size configured"
	default:
		if err := probeFS(root); err != nil {
			d.noLimit = "cannot make a file system per volume: " + err.Error()
			break
		}
		d.sizeMB, d.maxTotalMB = opts.SizeMB, opts.MaxTotalMB
		if d.maxTotalMB <= 0 {
			var st unix.Statfs_t
			if err := unix.Statfs(root, &st); err != nil {
				return nil, nil, fmt.Errorf("volume root: %w", err)
			}
			d.maxTotalMB = int64(st.Blocks) * st.Bsize >> 20 / 2
		}
	}
	return d, d.recover(), nil
}

// Limits returns the size of a new volume and the most all volumes may
// hold together, in MiB, or 0 and why volumes are not limited.
func (d *Dir) Limits() (sizeMB, maxTotalMB int64, why string) {
	return d.sizeMB, d.maxTotalMB, d.noLimit
}

// recover settles, at start, what a crash or a reboot left under the
// root, and sums the volumes' sizes:
//   - a volume's half-made file system (<owner dir>/.<name>.ext4.tmp) is
//     removed;
//   - a volume file system whose mount is gone (a reboot, or a crash
//     between its making and its mount) is mounted again, its mount point
//     made when missing; one that cannot be mounted is a warning, and
//     Prepare refuses it (never a bare directory in its place);
//   - where volumes are limited, an empty directory with no file system
//     (a crash inside a removal or a making) is removed, and one with
//     files (a volume made before volumes were limited) is a warning:
//     it has no limit;
//   - an owner directory without its .owner file gets one back when a
//     volume is next made there; until then its volumes are a warning (they
//     hold nothing in their owner's quota).
func (d *Dir) recover() []string {
	var warnings []string
	owners, _ := os.ReadDir(d.root)
	legacy := 0
	for _, o := range owners {
		if !o.IsDir() || strings.HasPrefix(o.Name(), ".") {
			continue
		}
		dir := filepath.Join(d.root, o.Name())
		if tmps, _ := filepath.Glob(filepath.Join(dir, ".*"+fsSuffix+".tmp")); len(tmps) > 0 {
			for _, t := range tmps {
				_ = os.Remove(t)
			}
		}
		entries, _ := os.ReadDir(dir)
		if _, err := os.Lstat(filepath.Join(dir, ownerFile)); err != nil && len(entries) > 0 {
			warnings = append(warnings, fmt.Sprintf("owner directory %s has no %s: its volumes count in no quota until one is made there", dir, ownerFile))
		}
		for _, e := range entries {
			name, isImg := strings.CutSuffix(e.Name(), fsSuffix)
			if !naming.ValidLabel(name) {
				continue
			}
			host := filepath.Join(dir, name)
			switch {
			case isImg && e.Type().IsRegular():
				d.totalMB += fsSizeMB(host + fsSuffix)
				if isMountRoot(host) {
					continue
				}
				if _, err := mkdir(host); err != nil {
					warnings = append(warnings, fmt.Sprintf("volume %s: %v", host, err))
					continue
				}
				if err := mountFS(host+fsSuffix, host); err != nil {
					warnings = append(warnings, fmt.Sprintf("volume %s cannot be mounted again, sandboxes that mount it are refused: %v", host, err))
				}
			case e.IsDir() && d.sizeMB > 0:
				if _, err := os.Lstat(host + fsSuffix); err == nil {
					continue // its file system, above
				}
				if names, err := readNames(host); err == nil && len(names) == 0 {
					_ = os.Remove(host)
				} else {
					legacy++
				}
			}
		}
	}
	if legacy > 0 {
		warnings = append(warnings, fmt.Sprintf("%d volumes made before volumes were limited are plain directories of the data directory's file system, with no size limit", legacy))
	}
	return warnings
}

// ownerFile, in an owner's directory, holds the owner's name (the
// directory is named by its hash): AllVolumes reads it.
const ownerFile = ".owner"

// makeOwnerDir makes owner's directory, and its .owner file when it is
// missing (written whole or not at all); it reports whether it made the
// directory.
func makeOwnerDir(dir, owner string) (bool, error) {
	created, err := mkdir(dir)
	if err != nil {
		return false, err
	}
	file := filepath.Join(dir, ownerFile)
	if _, err := os.Lstat(file); err == nil {
		return created, nil
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(owner), 0o600); err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		_ = os.Remove(tmp)
		if created {
			_ = os.Remove(dir)
		}
		return false, err
	}
	return created, nil
}

// volumeExists reports whether the volume host exists: its directory, or
// its file system (whose mount point a crash may have left unmade).
func volumeExists(host string) bool {
	for _, p := range []string{host, host + fsSuffix} {
		if _, err := os.Lstat(p); err == nil {
			return true
		}
	}
	return false
}

// makeVolume makes the volume name of owner (its owner directory exists):
// a file system of its own when volumes are limited, its size first
// checked against the host's total and reserved (reserve, when not nil);
// else a directory with mode. It reports whether it made it; one that
// exists is left as it is, and reserves nothing. The caller holds mu.
func (d *Dir) makeVolume(owner, name string, mode os.FileMode, reserve Reserve) (bool, error) {
	host := filepath.Join(d.ownerDir(owner), name)
	if volumeExists(host) {
		if fi, err := os.Lstat(host); err != nil || !fi.IsDir() {
			return false, fmt.Errorf("%s is not a directory", host)
		}
		return false, nil
	}
	if d.sizeMB <= 0 {
		if err := os.Mkdir(host, mode); err != nil {
			return false, err
		}
		if err := os.Chmod(host, mode); err != nil {
			_ = os.Remove(host)
			return false, err
		}
		return true, nil
	}
	if d.totalMB+d.sizeMB > d.maxTotalMB {
		return false, fmt.Errorf("%w: the host's volumes may hold %d MiB together and hold %d; a new one needs %d", service.ErrCapacityExhausted, d.maxTotalMB, d.totalMB, d.sizeMB)
	}
	if reserve != nil {
		if err := reserve(name, d.sizeMB); err != nil {
			return false, err
		}
	}
	if err := makeFS(host, d.sizeMB); err != nil {
		d.dropped(owner, name)
		return false, err
	}
	d.totalMB += d.sizeMB
	return true, nil
}

// removeVolume removes the volume host of owner (its file system
// unmounted first) and tells Dropped. The caller holds mu.
func (d *Dir) removeVolume(owner, host string) error {
	size := fsSizeMB(host + fsSuffix)
	if err := removeFS(host); err != nil {
		return err
	}
	d.totalMB -= size
	d.dropped(owner, filepath.Base(host))
	return nil
}

func (d *Dir) dropped(owner, name string) {
	if d.Dropped != nil {
		d.Dropped(owner, name)
	}
}

// Prepare creates every named volume of owner that does not exist yet and
// returns the binds for the runtime, in the order of mounts. A mount with
// a subpath is staged (stage.go): its directory inside the volume is
// opened without following any link, made when missing, and bind-mounted
// at a staging path the runtime gets instead; a subpath that goes through
// a symbolic link, is not a directory or leaves the volume is
// service.ErrInvalidArgument. It is idempotent. What it creates is undone
// by Abandon if the create fails, and Prepare undoes its own work when it
// fails.
func (d *Dir) Prepare(_ context.Context, owner, sandboxID string, mounts []service.Mount, reserve Reserve) (_ []runtime.Mount, err error) {
	ownerDir := d.ownerDir(owner)
	d.mu.Lock()
	defer d.mu.Unlock()
	var made, used, staged []string
	var subdirs []madeSubdir
	defer func() {
		if err != nil {
			if uerr := d.unstage(sandboxID); uerr != nil {
				err = errors.Join(err, uerr)
			}
			d.removeSubdirs(sandboxID, subdirs)
			d.removeEmpty(made)
			return
		}
		d.subdirs[sandboxID] = append(d.subdirs[sandboxID], subdirs...)
		d.staged[sandboxID] = append(d.staged[sandboxID], staged...)
		d.made[sandboxID] = append(d.made[sandboxID], made...)
		for _, p := range used {
			d.users[p]++
		}
		d.binds[sandboxID] = append(d.binds[sandboxID], used...)
	}()
	binds := make([]runtime.Mount, 0, len(mounts))
	for i, m := range mounts {
		if !naming.ValidLabel(m.Volume) {
			return nil, fmt.Errorf("volume %q: not a DNS label", m.Volume)
		}
		host := filepath.Join(ownerDir, m.Volume)
		created, err := makeOwnerDir(ownerDir, owner)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", m.Volume, err)
		}
		if created {
			made = append(made, ownerDir)
		}
		if created, err = d.makeVolume(owner, m.Volume, 0o755, reserve); err != nil {
			return nil, fmt.Errorf("volume %q: %w", m.Volume, err)
		}
		if created {
			made = append(made, host)
		}
		if _, err := os.Lstat(host + fsSuffix); err == nil && !isMountRoot(host) {
			return nil, fmt.Errorf("volume %q: its file system is not mounted (the daemon's log at start says why)", m.Volume)
		}
		used = append(used, ownerDir, host)
		source := host
		if m.Subpath != "" {
			target, rel, err := d.stage(m.Volume, host, m.Subpath, sandboxID, i)
			if err != nil {
				return nil, err
			}
			subdirs = append(subdirs, madeSubdir{vol: host, rel: rel})
			staged = append(staged, filepath.Join(host, m.Subpath))
			source = target
		}
		binds = append(binds, runtime.Mount{HostPath: source, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return binds, nil
}

// mkdir makes dir (0755) and reports whether this call created it; an
// existing directory is fine.
func mkdir(dir string) (bool, error) {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
			return false, fmt.Errorf("%s exists and is not a directory", dir)
		}
		return false, nil
	}
	return err == nil, err
}

// Abandon undoes Prepare for a sandbox whose create failed: it detaches
// its staged subpath mounts, and removes the directories that sandbox's
// Prepare created, unless another sandbox of this process has prepared
// them since or they are no longer empty (a volume holding data is never
// removed). It is idempotent.
func (d *Dir) Abandon(_ context.Context, sandboxID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.unstage(sandboxID); err != nil {
		return err // kept: a retry of the undo (or the startup sweep) finishes it
	}
	delete(d.staged, sandboxID)
	d.removeSubdirs(sandboxID, d.subdirs[sandboxID])
	delete(d.subdirs, sandboxID)
	d.dropUsers(sandboxID)
	made := d.made[sandboxID]
	delete(d.made, sandboxID)
	var free []string
	for _, p := range made {
		if d.users[p] == 0 {
			free = append(free, p)
		}
	}
	d.removeEmpty(free)
	return nil
}

// Release forgets a sandbox that is gone (its container destroyed) and
// detaches its staged subpath mounts. Volumes persist beyond their
// sandboxes, and the container's own bind mounts went with it. It reads
// the staging directory, so it also settles a sandbox of a process that
// died; it is idempotent.
func (d *Dir) Release(_ context.Context, sandboxID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.unstage(sandboxID); err != nil {
		return err
	}
	delete(d.subdirs, sandboxID)
	delete(d.staged, sandboxID)
	d.dropUsers(sandboxID)
	delete(d.made, sandboxID)
	return nil
}

// removeSubdirs removes the directories a failed create of sandboxID made
// inside volumes (subdirs, in the order made), except those another
// sandbox of this process staged since: at or above one of its subpaths.
func (d *Dir) removeSubdirs(sandboxID string, subdirs []madeSubdir) {
	for _, m := range slices.Backward(subdirs) {
		var free []string
		for _, rel := range m.rel {
			dir := filepath.Join(m.vol, rel)
			inUse := false
			for id, paths := range d.staged {
				if id != sandboxID && slices.ContainsFunc(paths, func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }) {
					inUse = true
				}
			}
			if !inUse {
				free = append(free, rel)
			}
		}
		removeMade(m.vol, free)
	}
}

func (d *Dir) dropUsers(sandboxID string) {
	for _, p := range d.binds[sandboxID] {
		if d.users[p]--; d.users[p] <= 0 {
			delete(d.users, p)
		}
	}
	delete(d.binds, sandboxID)
}

// removeEmpty removes the owner directories and volumes in dirs (made by
// one Prepare) that are empty, children before parents (dirs lists
// parents first). One that is not empty stays: it is in use.
func (d *Dir) removeEmpty(dirs []string) {
	for _, p := range slices.Backward(dirs) {
		if filepath.Dir(p) == filepath.Clean(d.root) { // an owner directory
			if names, err := readNames(p); err == nil && len(names) == 1 && names[0] == ownerFile {
				_ = os.Remove(filepath.Join(p, ownerFile))
			}
			_ = os.Remove(p) // ENOTEMPTY: keep it
			continue
		}
		if names, err := readNames(p); err != nil || len(names) > 0 {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(p), ownerFile)) // Prepare wrote it
		_ = d.removeVolume(string(b), p)                               // a failure keeps it: still a volume
	}
}

// readNames lists the names in dir.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
