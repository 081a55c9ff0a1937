package filesystem

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/filemeta"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
)

// statEntry describes the entry at path without following a final symlink.
func statEntry(path string, names *account.Names) (*rpc.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return entryInfo(path, fi, names), nil
}

// entryInfo describes path, whose Lstat result is fi, the way envd does
// (see the package doc for symlinks).
func entryInfo(path string, fi fs.FileInfo, names *account.Names) *rpc.EntryInfo {
	mode := fi.Mode()
	e := &rpc.EntryInfo{
		Name:         filepath.Base(path),
		Type:         fileType(mode),
		Path:         path,
		Size:         fi.Size(),
		Mode:         unixPerm(mode),
		Permissions:  mode.String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = names.User(st.Uid), names.Group(st.Gid)
	}
	e.Metadata = filemeta.Read(path)
	if mode&fs.ModeSymlink != 0 {
		e.Type = rpc.FileType_FILE_TYPE_SYMLINK
		if target, err := filepath.EvalSymlinks(path); err == nil {
			e.SymlinkTarget = &target
			if tfi, err := os.Stat(target); err == nil {
				e.Type, e.Mode = fileType(tfi.Mode()), unixPerm(tfi.Mode())
			}
		} else if raw, err := os.Readlink(path); err == nil { // dangling
			e.SymlinkTarget = &raw
		}
	}
	return e
}

func fileType(m fs.FileMode) rpc.FileType {
	switch {
	case m.IsRegular():
		return rpc.FileType_FILE_TYPE_FILE
	case m.IsDir():
		return rpc.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return rpc.FileType_FILE_TYPE_SYMLINK
	default:
		return rpc.FileType_FILE_TYPE_UNSPECIFIED
	}
}

// unixPerm returns the permission bits of m as chmod(2) spells them.
func unixPerm(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		p |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		p |= syscall.S_ISVTX
	}
	return p
}
