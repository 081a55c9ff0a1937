package secrets

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"
)

const (
	// KeySize is the length of a key file's contents in bytes.
	KeySize = chacha20poly1305.KeySize

	// Overhead is how many bytes longer a sealed blob is than its plaintext:
	// the header, the nonce and the authentication tag.
	Overhead = headerSize + chacha20poly1305.NonceSizeX + chacha20poly1305.Overhead

	// formatVersion is the first byte of every blob. A new version would
	// mean a new cipher or layout; Open rejects versions it does not know.
	formatVersion byte = 1

	keyIDSize  = 4
	headerSize = 1 + keyIDSize

	// keysDirName is the keyring's directory inside the data directory.
	keysDirName = "keys"
	// keyFileExt ends every key file's name; any other *.key name is an error.
	keyFileExt = ".key"
	// tempPrefix starts the name of a key file being written; it is not
	// loaded, so a crash mid-write never leaves a short key behind.
	tempPrefix = ".tmp-"
)

var (
	// ErrUnknownKey means a blob names a key id that the keyring lacks.
	ErrUnknownKey = errors.New("secrets: unknown key")
	// ErrCorrupt means a blob is malformed or fails authentication: it was
	// altered, truncated, sealed with other associated data, or sealed by a
	// different key under the same id.
	ErrCorrupt = errors.New("secrets: corrupt blob")
)

// KeyID names a key in a [Keyring]. Ids start at 1 and increase with each
// rotation.
type KeyID uint32

// String returns the id as eight lowercase hex digits, as in key file names.
func (id KeyID) String() string { return fmt.Sprintf("%08x", uint32(id)) }

// Keyring seals and opens blobs with keys kept in a directory. The newest
// key seals; every key opens. A Keyring is safe for concurrent use.
type Keyring struct {
	dir string // <data-dir>/keys

	mu     sync.RWMutex
	keys   map[KeyID]cipher.AEAD
	active KeyID
}

// OpenKeyring loads every key in <dataDir>/keys, creating the directory
// (0700) and a first key (0600) if there are none, and makes the highest key
// id active.
//
// It refuses, rather than repairs, a keyring that may have been exposed or
// damaged: a keys directory or key file that group or others can access, a
// key file that is not a regular file or is not exactly [KeySize] bytes, and
// a *.key file whose name is not a canonical key id. Errors name the file,
// never its contents.
func OpenKeyring(dataDir string) (*Keyring, error) {
	dir := filepath.Join(dataDir, keysDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secrets: create key directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if err := checkPrivate(dir, fi); err != nil {
		return nil, err
	}
	k := &Keyring{dir: dir, keys: make(map[KeyID]cipher.AEAD)}
	if err := k.load(); err != nil {
		return nil, err
	}
	if len(k.keys) == 0 {
		if _, err := k.Rotate(); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// load reads every key file in k.dir. It is called before k is shared.
func (k *Keyring) load() error {
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		return fmt.Errorf("secrets: read key directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if filepath.Ext(name) != keyFileExt || name[0] == '.' {
			continue
		}
		path := filepath.Join(k.dir, name)
		id, ok := parseKeyFileName(name)
		if !ok {
			return fmt.Errorf("secrets: key file %s: name is not <8 lowercase hex digits>%s", path, keyFileExt)
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("secrets: key file %s: not a regular file", path)
		}
		key, err := readKeyFile(path)
		if err != nil {
			return err
		}
		aead, err := chacha20poly1305.NewX(key)
		clear(key)
		if err != nil {
			return fmt.Errorf("secrets: key file %s: %w", path, err)
		}
		k.keys[id] = aead
		k.active = max(k.active, id)
	}
	return nil
}

// parseKeyFileName returns the id named by a canonical key file name.
func parseKeyFileName(name string) (KeyID, bool) {
	hex, ok := strings.CutSuffix(name, keyFileExt)
	if !ok || len(hex) != 2*keyIDSize {
		return 0, false
	}
	n, err := strconv.ParseUint(hex, 16, 32)
	if err != nil || n == 0 || KeyID(n).String() != hex {
		return 0, false
	}
	return KeyID(n), true
}

// readKeyFile reads a key file after checking its permissions and size.
func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secrets: open key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if err := checkPrivate(path, fi); err != nil {
		return nil, err
	}
	// Read one byte more than a key so that a long file is detected.
	key := make([]byte, KeySize+1)
	n, err := io.ReadFull(f, key)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		clear(key)
		return nil, fmt.Errorf("secrets: read key file: %w", err)
	}
	if n != KeySize {
		clear(key)
		return nil, fmt.Errorf("secrets: key file %s: want %d bytes, not %d or more", path, KeySize, n)
	}
	return key[:KeySize], nil
}

// checkPrivate fails if group or others have any access to path, whose
// file info is fi.
func checkPrivate(path string, fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("secrets: %s has mode %#o; group and others must have no access (chmod go-rwx)", path, perm)
	}
	return nil
}

// Rotate creates a new key with the next id and makes it active. Blobs
// sealed before keep opening with their own key. The key file is written
// to a temporary name, synced, then linked into place, so a crash leaves
// either no key or a whole one, and an existing key file is never replaced.
// On error the keyring is unchanged.
func (k *Keyring) Rotate() (KeyID, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.active == math.MaxUint32 {
		return 0, errors.New("secrets: rotate: key ids exhausted")
	}
	id := k.active + 1
	key := make([]byte, KeySize)
	defer clear(key)
	if _, err := rand.Read(key); err != nil {
		return 0, fmt.Errorf("secrets: rotate: %w", err)
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return 0, fmt.Errorf("secrets: rotate: %w", err)
	}
	if err := writeKeyFile(k.dir, id, key); err != nil {
		return 0, fmt.Errorf("secrets: rotate to key %s: %w", id, err)
	}
	k.keys[id] = aead
	k.active = id
	return id, nil
}

// writeKeyFile atomically creates <dir>/<id>.key holding key, mode 0600.
// It fails with an error matching [fs.ErrExist] if the file exists.
func writeKeyFile(dir string, id KeyID, key []byte) (err error) {
	tmp, err := os.CreateTemp(dir, tempPrefix+"*") // mode 0600
	if err != nil {
		return err
	}
	defer func() {
		if cerr := tmp.Close(); cerr != nil && !errors.Is(cerr, fs.ErrClosed) && err == nil {
			err = cerr
		}
		if rerr := os.Remove(tmp.Name()); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if _, err := tmp.Write(key); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// link(2) fails rather than replace an existing name.
	if err := os.Link(tmp.Name(), filepath.Join(dir, id.String()+keyFileExt)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ActiveKeyID returns the id of the key that [Keyring.Seal] uses.
func (k *Keyring) ActiveKeyID() KeyID {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.active
}

// String describes the keyring without key material.
func (k *Keyring) String() string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return fmt.Sprintf("secrets.Keyring(%s, active key %s, %d keys)", k.dir, k.active, len(k.keys))
}

// Seal encrypts plaintext under the active key, authenticating it together
// with associatedData, and returns a new blob of len(plaintext)+[Overhead]
// bytes. The same associatedData must be given to [Keyring.Open]. Sealing
// the same plaintext twice gives different blobs (random nonces). Seal fails
// only if randomness cannot be read.
func (k *Keyring) Seal(plaintext, associatedData []byte) ([]byte, error) {
	k.mu.RLock()
	id, aead := k.active, k.keys[k.active]
	k.mu.RUnlock()

	blob := make([]byte, headerSize+chacha20poly1305.NonceSizeX, Overhead+len(plaintext))
	blob[0] = formatVersion
	binary.BigEndian.PutUint32(blob[1:headerSize], uint32(id))
	nonce := blob[headerSize:]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("secrets: seal: %w", err)
	}
	return aead.Seal(blob, nonce, plaintext, authData(blob[:headerSize], associatedData)), nil
}

// Open authenticates and decrypts a blob made by [Keyring.Seal] with the
// same associatedData. It fails with [ErrUnknownKey] if the blob's key is
// not in the keyring, and with [ErrCorrupt] for any other bad blob; wrong
// associated data is indistinguishable from tampering. It never panics,
// whatever blob holds, and never returns partial plaintext.
func (k *Keyring) Open(blob, associatedData []byte) ([]byte, error) {
	id, err := BlobKeyID(blob)
	if err != nil {
		return nil, err
	}
	k.mu.RLock()
	aead, ok := k.keys[id]
	k.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: key %s is not in the keyring", ErrUnknownKey, id)
	}
	nonce := blob[headerSize : headerSize+chacha20poly1305.NonceSizeX]
	ciphertext := blob[headerSize+chacha20poly1305.NonceSizeX:]
	plaintext, err := aead.Open(nil, nonce, ciphertext, authData(blob[:headerSize], associatedData))
	if err != nil {
		return nil, fmt.Errorf("%w: authentication failed (altered blob or wrong associated data)", ErrCorrupt)
	}
	return plaintext, nil
}

// BlobKeyID returns the id of the key that sealed blob, without opening it,
// so that a re-sealing job can find blobs under old keys. It fails with
// [ErrCorrupt] if blob is too short or of an unknown version. The id is not
// authenticated until the blob is opened.
func BlobKeyID(blob []byte) (KeyID, error) {
	if len(blob) < Overhead {
		return 0, fmt.Errorf("%w: %d bytes, shorter than the %d-byte minimum", ErrCorrupt, len(blob), Overhead)
	}
	if blob[0] != formatVersion {
		return 0, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, blob[0])
	}
	return KeyID(binary.BigEndian.Uint32(blob[1:headerSize])), nil
}

// authData is what the AEAD authenticates besides the ciphertext: the
// fixed-length header, then the caller's associated data.
func authData(header, associatedData []byte) []byte {
	ad := make([]byte, 0, len(header)+len(associatedData))
	return append(append(ad, header...), associatedData...)
}

// AssociatedData encodes parts unambiguously (each prefixed by its length)
// for use as associated data, so that ("ab", "c") and ("a", "bc") differ.
// Name what the blob is bound to, e.g. AssociatedData("sandbox", id,
// "registry-auth").
func AssociatedData(parts ...string) []byte {
	n := 0
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}
