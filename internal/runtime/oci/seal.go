package oci

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// Sealed checkpoint images. A checkpoint holds the sandbox's memory, its
// secrets among them, and outlives the daemon (a restart, a reboot): at
// rest it is sealed, as every secret the daemon keeps is. Once runsc has
// written the image, each of its files F becomes F.sealed, encrypted and
// authenticated with a data key of the image's own, and the data key,
// sealed by the daemon's keyring (Options.ImageSealer), is the file
// image.key beside them. A restore opens them into a tmpfs of the
// sandbox's directory (stageImage: in memory, never on disk in clear),
// which runsc restores from and which goes once runsc has the image
// (unmounted lazily: what runsc still reads stays readable).
//
// A sealed file is sealMagic, an 8-byte random nonce prefix, then chunks
// of at most sealChunk bytes of plain text, each AES-256-GCM under the
// data key with the nonce prefix and the chunk's index, and as associated
// data the file's name, the index and whether it is the last chunk. The
// last chunk is the first shorter than sealChunk (empty when the file's
// length is a multiple of it), so a file cut short, chunks reordered or
// swapped between files, or another image's data key fail to open.
//
// The order makes every moment recoverable: the key file is written and
// synced first; each file's sealed copy is written, synced and renamed
// into place before its plain file is removed. A daemon killed midway
// leaves some files plain beside the key: a restore takes the plain file
// where it exists and opens the sealed one where it does not, and the
// next checkpoint seals it all again.

// ImageSealer seals and opens a checkpoint image's data key: the daemon's
// keyring (secrets.Keyring).
type ImageSealer interface {
	Seal(plaintext, associatedData []byte) ([]byte, error)
	Open(blob, associatedData []byte) ([]byte, error)
}

const (
	imageKeyName = "image.key"
	sealedSuffix = ".sealed"
	sealMagic    = "sbxseal1"
	sealChunk    = 1 << 20
	// stageName is the tmpfs in a sandbox's directory that a sealed
	// image is opened into for its restore.
	stageName = "restore-image"
)

// imageKeyAD binds a sealed data key to its use.
var imageKeyAD = []byte("sandboxd checkpoint image data key v1")

// imageSealed reports whether dir holds a sealed image (its key file).
func imageSealed(dir string) bool {
	fi, err := os.Lstat(filepath.Join(dir, imageKeyName))
	return err == nil && fi.Mode().IsRegular()
}

// hasCheckpoint reports whether dir holds runsc's image, plain or sealed.
func hasCheckpoint(dir string) bool {
	for _, name := range []string{checkpointImage, checkpointImage + sealedSuffix} {
		if fi, err := os.Lstat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() {
			return name == checkpointImage || imageSealed(dir)
		}
	}
	return false
}

var _ runtime.CheckpointSealer = (*Runtime)(nil)

// SealCheckpoint implements runtime.CheckpointSealer.
func (r *Runtime) SealCheckpoint(dir string) error {
	if r.opts.ImageSealer == nil {
		return nil
	}
	return sealImage(dir, r.opts.ImageSealer)
}

// sealImage seals every plain file of the image in dir with s (see
// above). An image sealed before keeps its data key.
func sealImage(dir string, s ImageSealer) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var plain []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != imageKeyName && !strings.HasSuffix(e.Name(), sealedSuffix) &&
			!strings.HasSuffix(e.Name(), tmpPrefix) {
			plain = append(plain, e.Name())
		}
	}
	if len(plain) == 0 {
		return nil
	}
	key, err := imageKey(dir, s, true)
	if err != nil {
		return err
	}
	for _, name := range plain {
		if err := sealFile(dir, name, key); err != nil {
			return fmt.Errorf("seal the image's %s: %w", name, err)
		}
	}
	return syncDir(dir)
}

// imageKey is the data key of the image in dir, opened with s; with
// create set, a new one is written (synced) when dir has none.
func imageKey(dir string, s ImageSealer, create bool) ([]byte, error) {
	path := filepath.Join(dir, imageKeyName)
	blob, err := os.ReadFile(path)
	if err == nil {
		key, err := s.Open(blob, imageKeyAD)
		if err != nil {
			return nil, fmt.Errorf("open the image's data key: %w", err)
		}
		if len(key) != 32 {
			return nil, fmt.Errorf("the image's data key is %d bytes", len(key))
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) || !create {
		return nil, fmt.Errorf("the image's data key: %w", err)
	}
	key := make32()
	if blob, err = s.Seal(key, imageKeyAD); err != nil {
		return nil, fmt.Errorf("seal the image's data key: %w", err)
	}
	if err := writeWhole(path, blob); err != nil {
		return nil, fmt.Errorf("write the image's data key: %w", err)
	}
	return key, nil
}

func make32() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}

// writeWhole writes a new file at path (0600) whole or not at all: under
// a temporary name, synced, renamed, and its directory synced (a key file
// torn by a kill or a full disk would make the image it names unusable).
func writeWhole(path string, data []byte) (err error) {
	tmp := path + tmpPrefix
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return noSpace(err)
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return noSpace(err)
	}
	if err := f.Sync(); err != nil {
		return noSpace(err)
	}
	if err := f.Close(); err != nil {
		return noSpace(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// chunkAD is the associated data of chunk i of the file name.
func chunkAD(name string, i uint32, last bool) []byte {
	ad := make([]byte, 0, len(name)+6)
	ad = append(ad, name...)
	ad = append(ad, 0)
	ad = binary.BigEndian.AppendUint32(ad, i)
	if last {
		return append(ad, 1)
	}
	return append(ad, 0)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealFile writes dir/name.sealed from dir/name under key (through a
// temporary file, synced, then renamed) and removes dir/name.
func sealFile(dir, name string, key []byte) error {
	aead, err := newGCM(key)
	if err != nil {
		return err
	}
	src, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := filepath.Join(dir, name+sealedSuffix+tmpPrefix)
	_ = os.Remove(tmp) // an earlier, cut-short try's
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return noSpace(err)
	}
	ok := false
	defer func() {
		if !ok {
			dst.Close()
			_ = os.Remove(tmp)
		}
	}()
	var prefix [8]byte
	_, _ = rand.Read(prefix[:])
	if _, err := dst.Write(append([]byte(sealMagic), prefix[:]...)); err != nil {
		return noSpace(err)
	}
	buf := make([]byte, sealChunk)
	out := make([]byte, 0, sealChunk+aead.Overhead())
	nonce := make([]byte, aead.NonceSize())
	copy(nonce, prefix[:])
	for i := uint32(0); ; i++ {
		n, err := io.ReadFull(src, buf)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return err
		}
		last := n < sealChunk
		binary.BigEndian.PutUint32(nonce[8:], i)
		out = aead.Seal(out[:0], nonce, buf[:n], chunkAD(name, i, last))
		if _, err := dst.Write(out); err != nil {
			return noSpace(err)
		}
		if last {
			break
		}
		if i == ^uint32(0) {
			return errors.New("too large to seal")
		}
	}
	if err := dst.Sync(); err != nil {
		return noSpace(err)
	}
	if err := dst.Close(); err != nil {
		return noSpace(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name+sealedSuffix)); err != nil {
		return err
	}
	ok = true
	return os.Remove(filepath.Join(dir, name))
}

// openFile writes to w the plain text of the sealed file at path, whose
// plain name is name, under key. Nothing it wrote is to be used unless
// it returns nil: a chunk that fails to open ends it.
func openFile(path, name string, key []byte, w io.Writer) error {
	aead, err := newGCM(key)
	if err != nil {
		return err
	}
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	head := make([]byte, len(sealMagic)+8)
	if _, err := io.ReadFull(src, head); err != nil || string(head[:len(sealMagic)]) != sealMagic {
		return fmt.Errorf("%s is not a sealed image file", name)
	}
	nonce := make([]byte, aead.NonceSize())
	copy(nonce, head[len(sealMagic):])
	buf := make([]byte, sealChunk+aead.Overhead())
	plain := make([]byte, 0, sealChunk)
	for i := uint32(0); ; i++ {
		n, err := io.ReadFull(src, buf)
		switch {
		case n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
			return fmt.Errorf("%s is cut short", name)
		case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
			return err
		}
		last := n < len(buf)
		binary.BigEndian.PutUint32(nonce[8:], i)
		if plain, err = aead.Open(plain[:0], nonce, buf[:n], chunkAD(name, i, last)); err != nil {
			return fmt.Errorf("%s: chunk %d does not open: %w", name, i, err)
		}
		if _, err := w.Write(plain); err != nil {
			return err
		}
		if last {
			if m, _ := src.Read(buf[:1]); m != 0 {
				return fmt.Errorf("%s has data past its last chunk", name)
			}
			return nil
		}
	}
}

// stageImage returns the directory runsc restores sandbox id from, for
// the image in dir, and what to call once runsc has it. A plain image is
// dir itself. A sealed one is opened into a tmpfs mounted at the
// sandbox's stageName (0700, the size of the sealed files, kept out of
// swap where the kernel can): a plain file a seal cut short left beside
// the key, without its sealed copy, is linked there as it is.
func (r *Runtime) stageImage(id, dir string) (string, func(), error) {
	if !imageSealed(dir) {
		return dir, func() {}, nil
	}
	if r.opts.ImageSealer == nil {
		return "", nil, errors.New("the image is sealed and this runtime has no keyring to open it")
	}
	key, err := imageKey(dir, r.opts.ImageSealer, false)
	if err != nil {
		return "", nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	size := int64(1 << 20)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			size += fi.Size()
		}
	}
	stage := filepath.Join(r.sandboxDir(id), stageName)
	if err := r.unstage(id); err != nil {
		return "", nil, err
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		return "", nil, err
	}
	opts := "mode=0700,size=" + strconv.FormatInt(size, 10)
	err = unix.Mount("tmpfs", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts+",noswap")
	if errors.Is(err, unix.EINVAL) { // a kernel before 6.4: no noswap
		err = unix.Mount("tmpfs", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts)
	}
	if err != nil {
		_ = os.Remove(stage)
		return "", nil, fmt.Errorf("mount a tmpfs to open the sealed image in: %w", err)
	}
	done := func() {
		if err := r.unstage(id); err != nil {
			r.log.Warn("remove the opened image", "sandbox", id, "err", err)
		}
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || name == imageKeyName {
			continue
		}
		var err error
		switch base, sealed := strings.CutSuffix(name, sealedSuffix); {
		case sealed:
			err = openInto(filepath.Join(dir, name), base, key, filepath.Join(stage, base))
		case strings.HasSuffix(name, tmpPrefix):
			continue // a cut-short seal's or key's
		case fileExists(filepath.Join(dir, name+sealedSuffix)):
			continue // sealed whole (renamed once synced): that copy is used
		default:
			// Left plain by a seal cut short (the key was written first).
			err = os.Symlink(filepath.Join(dir, name), filepath.Join(stage, name))
		}
		if err != nil {
			done()
			return "", nil, fmt.Errorf("open the sealed image: %w", err)
		}
	}
	return stage, done, nil
}

func fileExists(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular()
}

// openInto writes the plain text of the sealed file at path to a new
// file dst.
func openInto(path, name string, key []byte, dst string) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := openFile(path, name, key, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// SweepStages unstages the opened images a killed daemon left mounted in
// this node's sandboxes' directories. The daemon calls it as it starts,
// before any restore of its own: a stage lives only while runsc restores,
// so none is in use then. Not New's: a tool that opens the same
// directory beside a running daemon (a leak check) would unmount the
// image of a restore in flight.
func (r *Runtime) SweepStages() {
	dirs, _ := filepath.Glob(filepath.Join(r.opts.Dir, "sandboxes", "*", stageName))
	for _, stage := range dirs {
		id := filepath.Base(filepath.Dir(stage))
		if m, err := r.readMeta(id); err != nil || m.Node != r.opts.NodeID {
			continue // another node's (they may share the directory)
		}
		if err := r.unstage(id); err != nil {
			r.log.Warn("remove an opened image a killed daemon left", "sandbox", id, "err", err)
		}
	}
}

// unstage unmounts and removes sandbox id's opened image, if any. A
// lazy unmount: a restore still reading its file keeps it until it
// closes it.
func (r *Runtime) unstage(id string) error {
	stage := filepath.Join(r.sandboxDir(id), stageName)
	for mounted(stage) {
		if err := unix.Unmount(stage, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount the opened image: %w", err)
		}
	}
	if err := os.RemoveAll(stage); err != nil {
		return fmt.Errorf("remove the opened image: %w", err)
	}
	return nil
}
