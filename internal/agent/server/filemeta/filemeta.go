// Package filemeta is envd's user-defined file metadata (envd 0.6.2): string
// pairs kept on a file as extended attributes named user.e2b.<key>. An upload
// sets them from its X-Metadata-<key> headers, replacing any the file had;
// Stat, ListDir, Move and watch events report every user.e2b.* attribute a
// file carries, including ones set inside the sandbox with setfattr.
//
// Keys are lowercased (HTTP header names have no case) and must be HTTP
// token characters; values printable US-ASCII, as the SDK checks before
// sending. Reads are bounded by the kernel's own limits (64 KiB of names,
// 64 KiB per value) and skip what is not valid UTF-8, which proto3 JSON
// cannot carry: a file with an odd attribute still stats.
package filemeta

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Prefix is the namespace of the attributes: "user.e2b." + key.
const Prefix = "user.e2b."

// HeaderPrefix starts the upload headers that carry metadata.
const HeaderPrefix = "X-Metadata-"

// Bounds. The kernel caps one value at 64 KiB and a file's attribute names
// at 64 KiB in all (XATTR_SIZE_MAX, XATTR_LIST_MAX); ext4 keeps far less.
const (
	maxList  = 64 << 10
	maxValue = 64 << 10
	// MaxPairs bounds how many pairs one upload may set.
	MaxPairs = 64
)

// ErrInvalid marks metadata an upload may not set.
var ErrInvalid = errors.New("invalid file metadata")

// FromHeader returns the metadata of an upload: one pair per X-Metadata-<key>
// header, key lowercased. nil when there is none.
func FromHeader(h http.Header) (map[string]string, error) {
	var meta map[string]string
	for name, values := range h {
		if len(name) <= len(HeaderPrefix) || !strings.EqualFold(name[:len(HeaderPrefix)], HeaderPrefix) {
			continue
		}
		key := strings.ToLower(name[len(HeaderPrefix):])
		if !validKey(key) {
			return nil, fmt.Errorf("%w: key %q: use letters, digits and !#$%%&'*+-.^_`|~", ErrInvalid, key)
		}
		value := strings.Join(values, ", ")
		if !validValue(value) {
			return nil, fmt.Errorf("%w: the value of %q must be printable US-ASCII", ErrInvalid, key)
		}
		if len(Prefix)+len(key) > 255 || len(value) > maxValue {
			return nil, fmt.Errorf("%w: %q is too long", ErrInvalid, key)
		}
		if meta == nil {
			meta = map[string]string{}
		}
		meta[key] = value
		if len(meta) > MaxPairs {
			return nil, fmt.Errorf("%w: more than %d keys", ErrInvalid, MaxPairs)
		}
	}
	return meta, nil
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// Replace makes meta the metadata of the open file f: every user.e2b.*
// attribute it had goes, then each pair is set. With no metadata on a file
// system without user attributes it does nothing and succeeds.
func Replace(f *os.File, meta map[string]string) error {
	fd := int(f.Fd())
	names, err := list(func(b []byte) (int, error) { return unix.Flistxattr(fd, b) })
	switch {
	case errors.Is(err, unix.ENOTSUP) && len(meta) == 0:
		return nil
	case err != nil && !errors.Is(err, unix.ENOTSUP):
		return fmt.Errorf("list attributes of %s: %w", f.Name(), err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, Prefix) {
			if err := unix.Fremovexattr(fd, n); err != nil && !errors.Is(err, unix.ENODATA) {
				return fmt.Errorf("remove attribute %s of %s: %w", n, f.Name(), err)
			}
		}
	}
	for k, v := range meta {
		if err := unix.Fsetxattr(fd, Prefix+k, []byte(v), 0); err != nil {
			return fmt.Errorf("set metadata %q on %s: %w", k, f.Name(), err)
		}
	}
	return nil
}

// Read returns the metadata at path (following a final symlink), nil when
// there is none or the file system keeps no attributes. It never fails: a
// file whose attributes cannot be read has none to report.
func Read(path string) map[string]string {
	names, err := list(func(b []byte) (int, error) { return unix.Listxattr(path, b) })
	if err != nil {
		return nil
	}
	var meta map[string]string
	for _, n := range names {
		key, ok := strings.CutPrefix(n, Prefix)
		if !ok || key == "" || !utf8.ValidString(key) {
			continue
		}
		v, err := value(path, n)
		if err != nil || !utf8.Valid(v) {
			continue
		}
		if meta == nil {
			meta = map[string]string{}
		}
		meta[key] = string(v)
	}
	return meta
}

// list reads attribute names with call (a listxattr), sized first, at most
// maxList bytes.
func list(call func([]byte) (int, error)) ([]string, error) {
	for range 3 { // the list may grow between sizing and reading
		n, err := call(nil)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
		if n > maxList {
			return nil, unix.E2BIG
		}
		buf := make([]byte, n)
		n, err = call(buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				names = append(names, s)
			}
		}
		return names, nil
	}
	return nil, unix.ERANGE
}

// value reads attribute name of path, at most maxValue bytes.
func value(path, name string) ([]byte, error) {
	for range 3 {
		n, err := unix.Getxattr(path, name, nil)
		if err != nil {
			return nil, err
		}
		if n > maxValue {
			return nil, unix.E2BIG
		}
		buf := make([]byte, n)
		n, err = unix.Getxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	return nil, unix.ERANGE
}
