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
	"net/http"
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

// Bounds of the uploaded archives. One owner's oldest archives make room
// for its new ones; the host's bound refuses (429) rather than drop
// another owner's.
const (
	maxUploadBytes      = 8 << 20  // one archive, as sent
	maxOwnerUploadBytes = 16 << 20 // one owner's, together
	maxOwnerUploads     = 64       // archives of one owner's
	maxOwnerTokens      = 64       // unspent upload URLs of one owner's
	maxUploadsBytes     = 128 << 20
	maxUploadTokens     = 1024
	maxPutting          = 8 // archives being received at once
	uploadKeep          = 30 * time.Minute
	uploadTokenLife     = 10 * time.Minute
	// Of one archive, read: the entries, and the bytes inflated.
	maxArchiveEntries = 4096
	maxArchiveInflate = 2 * maxUploadBytes
)

type uploadKey struct{ owner, hash string }

type upload struct {
	data []byte
	at   time.Time
}

type uploadToken struct {
	key     uploadKey
	expires time.Time
	used    bool
}

// ownerUploads is what one owner holds.
type ownerUploads struct {
	bytes, files, tokens int
}

// uploads holds the archives and the tokens of the uploads under way.
type uploads struct {
	mu      sync.Mutex
	files   map[uploadKey]upload
	tokens  map[string]*uploadToken
	owners  map[string]*ownerUploads
	bytes   int
	now     func() time.Time
	putting chan struct{}
}

func newUploads(now func() time.Time) *uploads {
	return &uploads{
		files: map[uploadKey]upload{}, tokens: map[string]*uploadToken{}, owners: map[string]*ownerUploads{},
		now: now, putting: make(chan struct{}, maxPutting),
	}
}

func (u *uploads) ownerLocked(owner string) *ownerUploads {
	o := u.owners[owner]
	if o == nil {
		o = &ownerUploads{}
		u.owners[owner] = o
	}
	return o
}

// has reports whether owner's archive of hash is here.
func (u *uploads) has(owner, hash string) bool {
	_, ok := u.get(owner, hash)
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

// token returns an upload token for owner's archive of hash: the one
// handed out already while it is unspent, else a new one.
func (u *uploads) token(owner, hash string) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked()
	key := uploadKey{owner, hash}
	for tok, t := range u.tokens {
		if t.key == key && !t.used {
			return tok, nil
		}
	}
	if u.ownerLocked(owner).tokens >= maxOwnerTokens || len(u.tokens) >= maxUploadTokens {
		return "", errorf(http.StatusTooManyRequests, "too many template file uploads under way; try again shortly")
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	u.tokens[tok] = &uploadToken{key: key, expires: u.now().Add(uploadTokenLife)}
	u.ownerLocked(owner).tokens++
	return tok, nil
}

// check reports whether tok may upload, and whether it already did
// (a retried PUT, answered as the first one was).
func (u *uploads) check(tok string) (done bool, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked()
	t, ok := u.tokens[tok]
	if !ok {
		return false, errorf(http.StatusForbidden, "this upload URL is not valid (expired or unknown); build again to get another")
	}
	return t.used, nil
}

// put stores data under the token's owner and hash; the token is spent
// (a second put with it changes nothing). The owner's oldest archives
// make room within its bounds; past the host's, it is refused.
func (u *uploads) put(tok string, data []byte) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.expireLocked()
	t, ok := u.tokens[tok]
	switch {
	case !ok:
		return errorf(http.StatusForbidden, "this upload URL is not valid (expired or unknown); build again to get another")
	case t.used:
		return nil
	}
	u.dropLocked(t.key) // an archive of the same hash is replaced
	o := u.ownerLocked(t.key.owner)
	for o.files > 0 && (o.bytes+len(data) > maxOwnerUploadBytes || o.files >= maxOwnerUploads) {
		u.dropOldestLocked(t.key.owner)
	}
	if u.bytes+len(data) > maxUploadsBytes {
		return errorf(http.StatusTooManyRequests, "the daemon holds %d MiB of template files, its most; try again later", maxUploadsBytes>>20)
	}
	t.used = true
	o.tokens--
	u.files[t.key] = upload{data: data, at: u.now()}
	o.bytes += len(data)
	o.files++
	u.bytes += len(data)
	return nil
}

func (u *uploads) dropLocked(k uploadKey) {
	f, ok := u.files[k]
	if !ok {
		return
	}
	delete(u.files, k)
	o := u.ownerLocked(k.owner)
	o.bytes -= len(f.data)
	o.files--
	u.bytes -= len(f.data)
}

func (u *uploads) dropOldestLocked(owner string) {
	var (
		oldest uploadKey
		at     time.Time
		found  bool
	)
	for k, f := range u.files {
		if k.owner == owner && (!found || f.at.Before(at)) {
			oldest, at, found = k, f.at, true
		}
	}
	u.dropLocked(oldest)
}

func (u *uploads) expireLocked() {
	now := u.now()
	for k, f := range u.files {
		if now.Sub(f.at) > uploadKeep {
			u.dropLocked(k)
		}
	}
	for tok, t := range u.tokens {
		if now.After(t.expires) {
			delete(u.tokens, tok)
			if !t.used {
				u.ownerLocked(t.key.owner).tokens--
			}
		}
	}
	for owner, o := range u.owners {
		if *o == (ownerUploads{}) {
			delete(u.owners, owner)
		}
	}
}

// receive reads an archive's body, at most maxPutting at once (the others
// wait, as long as their requests do).
func (u *uploads) receive(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	select {
	case u.putting <- struct{}{}:
		defer func() { <-u.putting }()
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return readAllLimit(w, r, maxUploadBytes)
}

// copyBudget is what the COPY steps of one build may still produce: the
// service's bounds of a recipe's copies (files and links, and bytes),
// spent as the archives are read so that no step reads past them.
type copyBudget struct {
	steps int
	bytes int
}

func newCopyBudget() *copyBudget {
	return &copyBudget{steps: service.MaxCopySteps, bytes: service.MaxCopyBytes}
}

// copyArgs are one COPY step's: its archive's entries matching src go to
// dest (relative to workdir), with mode (0: each file's own) and owned
// by owner ("": the steps' user).
type copyArgs struct {
	src, dest, workdir string
	mode               uint32
	owner              string
}

// copySteps turns one COPY step and its archive into the service's copy
// steps, one per file or symbolic link, in dest as Docker's COPY places
// them (a file to dest, or into it when dest ends in '/'; a directory's
// files under dest; what a glob matched into dest). Entries are read
// from the archive only: a name that is absolute or climbs out is
// refused, as is anything but files, directories and links (hard links
// to a file this step copies become a copy of it).
func copySteps(archive []byte, a copyArgs, budget *copyBudget) ([]service.Step, error) {
	dest := a.dest
	intoDir := strings.HasSuffix(dest, "/")
	if !path.IsAbs(dest) && a.workdir != "" {
		dest = path.Join(a.workdir, dest)
	}
	// Without an absolute WORKDIR step yet, a relative dest stays
	// relative: the build resolves it under the working directory then
	// (the base image's, or under it a relative WORKDIR's), as E2B (and
	// Docker's COPY) do.
	dest = path.Clean(dest)
	src := path.Clean(strings.TrimPrefix(a.src, "./"))
	r, err := archiveReader(archive)
	if err != nil {
		return nil, err
	}
	var steps []service.Step
	copied := map[string]*service.CopyStep{} // by entry name, for hard links
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
		name, err := entryName(h.Name)
		if err != nil {
			return nil, err
		}
		if name == "." {
			continue // the context's own directory
		}
		target, ok := copyTarget(name, src, dest, intoDir)
		if !ok {
			continue // not this step's (a context's other files)
		}
		var step *service.CopyStep
		switch h.Typeflag {
		case tar.TypeDir:
			continue // made as the parent of its files
		case tar.TypeReg:
			if budget.bytes < 0 || h.Size > int64(budget.bytes) {
				return nil, fmt.Errorf("the COPY steps carry more than %d bytes together", service.MaxCopyBytes)
			}
			content, err := io.ReadAll(io.LimitReader(r, int64(budget.bytes)+1))
			if err != nil {
				return nil, fmt.Errorf("read %s from the archive: %w", name, err)
			}
			if budget.bytes -= len(content); budget.bytes < 0 {
				return nil, fmt.Errorf("the COPY steps carry more than %d bytes together", service.MaxCopyBytes)
			}
			m := a.mode
			if m == 0 && h.Mode&0o7777 != 0o644 {
				m = uint32(h.Mode & 0o7777)
			}
			step = &service.CopyStep{Path: target, Content: content, Mode: m, Owner: a.owner}
			copied[name] = step
		case tar.TypeLink:
			linked, err := entryName(h.Linkname)
			if err != nil {
				return nil, err
			}
			of, ok := copied[linked]
			if !ok {
				return nil, fmt.Errorf("the archive's %s is a hard link to %s, which this COPY does not copy", name, h.Linkname)
			}
			if budget.bytes -= len(of.Content); budget.bytes < 0 {
				return nil, fmt.Errorf("the COPY steps carry more than %d bytes together", service.MaxCopyBytes)
			}
			step = &service.CopyStep{Path: target, Content: of.Content, Mode: of.Mode, Owner: a.owner}
		case tar.TypeSymlink:
			step = &service.CopyStep{Path: target, Link: h.Linkname, Owner: a.owner}
		default:
			return nil, fmt.Errorf("the archive's %s is neither a file, a directory nor a link", name)
		}
		if budget.steps--; budget.steps < 0 {
			return nil, fmt.Errorf("the COPY steps copy more than %d files and links together", service.MaxCopySteps)
		}
		steps = append(steps, service.Step{Copy: step})
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no file of the archive matches %q", a.src)
	}
	return steps, nil
}

// entryName is an archive entry's name, relative and clean ("." for the
// archive's own directory), or an error when it is absolute or climbs
// out.
func entryName(raw string) (string, error) {
	name := strings.TrimSuffix(strings.TrimPrefix(raw, "./"), "/")
	if name == "" || name == "." {
		return ".", nil
	}
	if path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("the archive has an entry named %q: names must be relative and stay inside", raw)
	}
	return name, nil
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
		// The budget bounds what is kept; this bounds the inflating.
		return tar.NewReader(io.LimitReader(zr, maxArchiveInflate)), nil
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
