package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// The files of a template's COPY steps. The SDK hashes each step's files,
// asks GET /templates/{id}/files/{hash} whether the server has them and,
// when it does not, PUTs a tar (gzipped by default) of them to the URL
// the answer gives, without its API key. The facade keeps the archives in
// memory, per owner and hash, for a while and within bounds: they live
// only between the upload and the build that reads them (a build that
// finds one gone says so, and the SDK's next build uploads it again). The
// upload URL carries a random token that names the owner and the hash,
// so that the PUT needs no credential and can write nothing else.

// Bounds of the uploaded archives.
const (
	maxUploadBytes      = 8 << 20  // one archive, as sent
	maxOwnerUploadBytes = 32 << 20 // one owner's, together
	maxUploadsBytes     = 128 << 20
	uploadKeep          = 30 * time.Minute
	uploadTokenLife     = 10 * time.Minute
	maxUploadTokens     = 1024
	// Of one archive, unpacked: the service bounds a recipe's copied
	// bytes (8 MiB); the entries are bounded here.
	maxArchiveEntries = 4096
)

type uploadKey struct{ owner, hash string }

type upload struct {
	data []byte
	at   time.Time
}

type uploadToken struct {
	key     uploadKey
	expires time.Time
}

// uploads holds the archives and the tokens of the uploads under way.
type uploads struct {
	mu     sync.Mutex
	files  map[uploadKey]upload
	tokens map[string]uploadToken
	now    func() time.Time
}

func newUploads(now func() time.Time) *uploads {
	return &uploads{files: map[uploadKey]upload{}, tokens: map[string]uploadToken{}, now: now}
}

// has reports whether owner's archive of hash is here.
func (u *uploads) has(owner, hash string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked()
	_, ok := u.files[uploadKey{owner, hash}]
	return ok
}

// get returns owner's archive of hash.
func (u *uploads) get(owner, hash string) ([]byte, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked()
	f, ok := u.files[uploadKey{owner, hash}]
	return f.data, ok
}

// token returns a new upload token for owner's archive of hash.
func (u *uploads) token(owner, hash string) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked()
	if len(u.tokens) >= maxUploadTokens {
		return "", errorf(429, "too many template file uploads under way; try again shortly")
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	u.tokens[tok] = uploadToken{key: uploadKey{owner, hash}, expires: u.now().Add(uploadTokenLife)}
	return tok, nil
}

// put stores data under the token's owner and hash and spends the
// token. To stay within the owner's and everyone's bounds it drops the
// oldest archives (of the owner first).
func (u *uploads) put(tok string, data []byte) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked()
	t, ok := u.tokens[tok]
	if !ok {
		return errorf(403, "this upload URL is not valid (expired or used); build again to get another")
	}
	delete(u.tokens, tok)
	u.files[t.key] = upload{data: data, at: u.now()}
	for u.bytesLocked(t.key.owner) > maxOwnerUploadBytes {
		u.dropOldestLocked(t.key.owner)
	}
	for u.bytesLocked("") > maxUploadsBytes {
		u.dropOldestLocked("")
	}
	return nil
}

// bytesLocked is the size of owner's archives (everyone's for "").
func (u *uploads) bytesLocked(owner string) int {
	n := 0
	for k, f := range u.files {
		if owner == "" || k.owner == owner {
			n += len(f.data)
		}
	}
	return n
}

func (u *uploads) dropOldestLocked(owner string) {
	var (
		oldest uploadKey
		at     time.Time
		found  bool
	)
	for k, f := range u.files {
		if (owner == "" || k.owner == owner) && (!found || f.at.Before(at)) {
			oldest, at, found = k, f.at, true
		}
	}
	delete(u.files, oldest)
}

func (u *uploads) expireLocked() {
	now := u.now()
	for k, f := range u.files {
		if now.Sub(f.at) > uploadKeep {
			delete(u.files, k)
		}
	}
	for tok, t := range u.tokens {
		if now.After(t.expires) {
			delete(u.tokens, tok)
		}
	}
}

// copySteps turns one COPY step (src, dest, user, mode) and its archive
// into the service's copy steps, one per file or symbolic link, in dest
// as Docker's COPY places them (a file to dest, or into it when dest ends
// in '/'; a directory's files under dest; what a glob matched into dest). Entries are read from the archive only: a name
// that is absolute or climbs out ("..") is refused, as is anything but
// files, directories and links.
func copySteps(archive []byte, src, dest, workdir string, mode uint32) ([]service.Step, error) {
	intoDir := strings.HasSuffix(dest, "/")
	if !path.IsAbs(dest) {
		dest = path.Join("/", workdir, dest)
	}
	dest = path.Clean(dest)
	src = path.Clean(strings.TrimPrefix(src, "./"))
	r, err := archiveReader(archive)
	if err != nil {
		return nil, err
	}
	var steps []service.Step
	for n := 0; ; n++ {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read the archive: %w", err)
		}
		if n >= maxArchiveEntries {
			return nil, fmt.Errorf("the archive has more than %d entries", maxArchiveEntries)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
			return nil, fmt.Errorf("the archive has an entry named %q: names must be relative and stay inside", h.Name)
		}
		target, ok := copyTarget(name, src, dest, intoDir)
		if !ok {
			continue // not this step's (a context's other files)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			continue // made as the parent of its files
		case tar.TypeReg:
			content, err := io.ReadAll(io.LimitReader(r, maxUploadBytes+1))
			if err != nil {
				return nil, fmt.Errorf("read %s from the archive: %w", name, err)
			}
			if len(content) > maxUploadBytes {
				return nil, fmt.Errorf("%s is larger than %d bytes", name, maxUploadBytes)
			}
			m := mode
			if m == 0 && h.Mode&0o7777 != 0o644 {
				m = uint32(h.Mode & 0o7777)
			}
			steps = append(steps, service.Step{Copy: &service.CopyStep{Path: target, Content: content, Mode: m}})
		case tar.TypeSymlink:
			steps = append(steps, service.Step{Copy: &service.CopyStep{Path: target, Link: h.Linkname}})
		default:
			return nil, fmt.Errorf("the archive's %s is neither a file, a directory nor a symbolic link", name)
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no file of the archive matches %q", src)
	}
	return steps, nil
}

// copyTarget places archive entry name for a COPY of src into dest.
func copyTarget(name, src, dest string, intoDir bool) (string, bool) {
	switch {
	case name == src:
		if intoDir {
			return path.Join(dest, path.Base(name)), true
		}
		return dest, true
	case src == "." || src == "":
		return path.Join(dest, name), true
	case strings.HasPrefix(name, src+"/"):
		return path.Join(dest, strings.TrimPrefix(name, src+"/")), true
	}
	// A glob: a matched file goes into dest, a matched directory's files
	// under dest.
	parts := strings.Split(name, "/")
	for k := 1; k <= len(parts); k++ {
		if ok, _ := path.Match(src, strings.Join(parts[:k], "/")); ok {
			if k == len(parts) {
				return path.Join(dest, parts[k-1]), true
			}
			return path.Join(dest, path.Join(parts[k:]...)), true
		}
	}
	return "", false
}

// archiveReader reads a tar, gzipped or not.
func archiveReader(b []byte) (*tar.Reader, error) {
	if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("read the archive: %w", err)
		}
		// The service bounds what is copied; this bounds the inflating.
		return tar.NewReader(io.LimitReader(zr, 4*maxUploadBytes)), nil
	}
	return tar.NewReader(bytes.NewReader(b)), nil
}

// parseMode reads a COPY step's mode ("0755"; "" none).
func parseMode(s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %q is not octal permission bits", s)
	}
	return uint32(m), nil
}
