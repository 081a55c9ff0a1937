package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
)

// watchSpec is what WatchDir and CreateWatcher ask for.
type watchSpec struct {
	root          string // absolute, clean
	recursive     bool
	includeEntry  bool
	networkMounts bool
}

// dirWatch turns inotify events under one directory into envd events.
// Its methods are called from one goroutine at a time.
type dirWatch struct {
	spec  watchSpec
	fsn   *fsnotify.Watcher
	names *account.Names // owners of entries, for includeEntry
	// dirs are the directories watched below root by a recursive watch.
	// fsnotify keeps the path a watch was added with; when a directory is
	// renamed its watches (and its subdirectories') must be dropped and
	// added again under the new name, or events would carry the old one.
	dirs map[string]bool
}

// openWatch checks spec.root and starts watching it (and, if recursive,
// every directory below it). A missing root is fs.ErrNotExist, a file or a
// network mount (unless allowed) ErrInvalid. The caller must Close the
// result.
func openWatch(spec watchSpec, names *account.Names) (*dirWatch, error) {
	fi, err := os.Stat(spec.root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrInvalid, spec.root)
	}
	if !spec.networkMounts {
		if network, err := onNetworkMount(spec.root); err != nil {
			return nil, err
		} else if network {
			return nil, fmt.Errorf("%w: %s is on a network filesystem; set allow_network_mounts", ErrInvalid, spec.root)
		}
	}
	fsn, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", spec.root, err)
	}
	d := &dirWatch{spec: spec, fsn: fsn, names: names, dirs: make(map[string]bool)}
	if err := d.add(spec.root, nil); err != nil {
		fsn.Close()
		return nil, err
	}
	return d, nil
}

// Close stops watching.
func (d *dirWatch) Close() error { return d.fsn.Close() }

// add watches dir and, for a recursive watch, the directories below it,
// each before reading its entries. If found is not nil, entries below dir
// are passed to it: they may predate the watch. An entry created while add
// runs can be both found and reported by inotify.
func (d *dirWatch) add(dir string, found func(path string) error) error {
	if !d.spec.recursive {
		return d.fsn.Add(dir)
	}
	return filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if path != dir && errors.Is(err, fs.ErrNotExist) {
				return nil // gone already; its REMOVE follows
			}
			return err
		}
		if e.IsDir() {
			if err := d.fsn.Add(path); err != nil {
				if path != dir && errors.Is(err, fs.ErrNotExist) {
					return filepath.SkipDir
				}
				return fmt.Errorf("watch %s: %w", path, err)
			}
			d.dirs[path] = true
		}
		if path != dir && found != nil {
			return found(path)
		}
		return nil
	})
}

// forget drops the watches of dir and everything below it, after dir was
// renamed or removed. Errors are ignored: inotify may have dropped a watch
// already.
func (d *dirWatch) forget(dir string) {
	if !d.dirs[dir] {
		return
	}
	prefix := dir + string(filepath.Separator)
	for p := range d.dirs {
		if p == dir || strings.HasPrefix(p, prefix) {
			_ = d.fsn.Remove(p)
			delete(d.dirs, p)
		}
	}
}

// sink receives what a watch produces; a non-nil error ends the watch.
type sink struct {
	event     func(*rpc.FilesystemEvent) error
	keepalive func() error // nil: no keepalives
}

// run delivers events until ctx ends (nil) or the watch fails. keepalive
// is called after every quiet interval if out.keepalive is set.
func (d *dirWatch) run(ctx context.Context, interval time.Duration, out sink) error {
	var tick <-chan time.Time
	if out.keepalive != nil {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
		orig := out.event
		out.event = func(e *rpc.FilesystemEvent) error { t.Reset(interval); return orig(e) }
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			if err := out.keepalive(); err != nil {
				return err
			}
		case err, ok := <-d.fsn.Errors:
			if !ok {
				return ErrClosed
			}
			return fmt.Errorf("watch %s: %w", d.spec.root, err)
		case ev, ok := <-d.fsn.Events:
			if !ok {
				return ErrClosed
			}
			if err := d.translate(ev, out.event); err != nil {
				return err
			}
		}
	}
}

// opOrder is the order envd reports the operations of one inotify event in.
var opOrder = [...]struct {
	op fsnotify.Op
	t  rpc.EventType
}{
	{fsnotify.Create, rpc.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Rename, rpc.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, rpc.EventType_EVENT_TYPE_CHMOD},
	{fsnotify.Write, rpc.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, rpc.EventType_EVENT_TYPE_REMOVE},
}

// translate emits the envd events of one fsnotify event and keeps a
// recursive watch's set of watched directories current.
func (d *dirWatch) translate(ev fsnotify.Event, emit func(*rpc.FilesystemEvent) error) error {
	if d.spec.recursive && ev.Name != d.spec.root && ev.Has(fsnotify.Rename|fsnotify.Remove) {
		d.forget(ev.Name)
	}
	for _, o := range opOrder {
		if ev.Has(o.op) {
			if err := d.emit(ev.Name, o.t, emit); err != nil {
				return err
			}
		}
	}
	if !d.spec.recursive || !ev.Has(fsnotify.Create) {
		return nil
	}
	if fi, err := os.Lstat(ev.Name); err != nil || !fi.IsDir() {
		return nil
	}
	err := d.add(ev.Name, func(path string) error {
		return d.emit(path, rpc.EventType_EVENT_TYPE_CREATE, emit)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed again before we got to it
	}
	return err
}

// emit sends one event for path.
func (d *dirWatch) emit(path string, t rpc.EventType, emit func(*rpc.FilesystemEvent) error) error {
	name, err := filepath.Rel(d.spec.root, path)
	if err != nil {
		return err
	}
	e := &rpc.FilesystemEvent{Name: name, Type: t}
	if d.spec.includeEntry {
		if entry, err := statEntry(path, d.names); err == nil {
			e.Entry = entry
		}
	}
	return emit(e)
}

// onNetworkMount reports whether path is on a network filesystem, which
// inotify cannot watch for remote changes.
func onNetworkMount(path string) (bool, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	switch st.Type { // linux/magic.h
	case 0x6969, // NFS
		0xFF534D42, // CIFS
		0x517B,     // SMB
		0xFE534D42, // SMB2
		0x65735546: // FUSE
		return true, nil
	}
	return false, nil
}
