package oci

import (
	"bytes"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/internal/secrets"
)

// sealedImage writes files into a new image directory and seals it.
func sealedImage(t *testing.T, kr *secrets.Keyring, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := sealImage(dir, kr); err != nil {
		t.Fatalf("sealImage: %v", err)
	}
	return dir
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// TestSealImage_OpensToWhatWasSealed: files of every length around the
// chunk size come back as they were; no plain file is left; the key file
// and the sealed files are 0600.
func TestSealImage_OpensToWhatWasSealed(t *testing.T) {
	kr, err := secrets.OpenKeyring(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for name, n := range map[string]int{"empty": 0, "one": 1, "chunk": sealChunk, "chunkplus": sealChunk + 1, "three": 3*sealChunk - 7} {
		files[name] = randomBytes(n)
	}
	dir := sealedImage(t, kr, files)
	key, err := imageKey(dir, kr, false)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("the plain %s is left: %v", name, err)
		}
		fi, err := os.Stat(filepath.Join(dir, name+sealedSuffix))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s sealed: %v, %v; want a 0600 file", name, fi, err)
		}
		var got bytes.Buffer
		if err := openFile(filepath.Join(dir, name+sealedSuffix), name, key, &got); err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s opened to %d bytes, want the %d sealed", name, got.Len(), len(want))
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, imageKeyName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key file: %v, %v; want 0600", fi, err)
	}
}

// TestSealImage_TamperingFailsToOpen: a flipped byte, a file cut at a
// chunk's end, a chunk dropped, a sealed file under another name, another
// image's key and another keyring all fail to open.
func TestSealImage_TamperingFailsToOpen(t *testing.T) {
	kr, err := secrets.OpenKeyring(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := randomBytes(2*sealChunk + 100)
	dir := sealedImage(t, kr, map[string][]byte{"a": data, "b": data})
	key, err := imageKey(dir, kr, false)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := os.ReadFile(filepath.Join(dir, "a"+sealedSuffix))
	if err != nil {
		t.Fatal(err)
	}
	head, full := len(sealMagic)+8, sealChunk+16
	try := func(what string, blob []byte, name string, key []byte) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "x")
		if err := os.WriteFile(p, blob, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := openFile(p, name, key, io.Discard); err == nil {
			t.Errorf("%s: opened", what)
		}
	}
	flipped := bytes.Clone(sealed)
	flipped[head+full+5] ^= 1
	try("a flipped byte", flipped, "a", key)
	try("cut after two whole chunks", sealed[:head+2*full], "a", key)
	try("the first chunk dropped", append(bytes.Clone(sealed[:head]), sealed[head+full:]...), "a", key)
	try("under another name", sealed, "b", key)
	try("another key", sealed, "a", randomBytes(32))
	try("data past the last chunk", append(bytes.Clone(sealed), 0), "a", key)
	other, err := secrets.OpenKeyring(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := imageKey(dir, other, false); err == nil {
		t.Error("another keyring opened the image's key")
	}
}

// TestStageImage_OpensIntoATmpfsAndGoes: a sealed image is opened into a
// tmpfs in the sandbox's directory, where a plain file a cut-short seal
// left is linked as it is; done unmounts and removes it. A plain image is
// used where it is.
func TestStageImage_OpensIntoATmpfsAndGoes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: mounts a tmpfs (needs root)")
	}
	kr, err := secrets.OpenKeyring(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &Runtime{opts: Options{Dir: t.TempDir(), ImageSealer: kr}, log: slog.New(slog.DiscardHandler)}
	const id = "sb-0123456789abcdef"
	if err := os.MkdirAll(r.sandboxDir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	ckpt := randomBytes(sealChunk + 3)
	dir := sealedImage(t, kr, map[string][]byte{checkpointImage: ckpt})
	// A seal cut short: a plain file beside the key, its sealed copy
	// half written.
	left := randomBytes(10)
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), left, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages.img"+sealedSuffix+tmpPrefix), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !hasCheckpoint(dir) {
		t.Fatal("hasCheckpoint of a sealed image = false")
	}
	stage, done, err := r.stageImage(id, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !mounted(stage) {
		t.Errorf("%s is not a mount", stage)
	}
	for name, want := range map[string][]byte{checkpointImage: ckpt, "pages.img": left} {
		got, err := os.ReadFile(filepath.Join(stage, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s staged: %d bytes, %v; want the %d of the image", name, len(got), err, len(want))
		}
	}
	if entries, _ := os.ReadDir(stage); len(entries) != 2 {
		t.Errorf("staged: %v, want the two files only", entries)
	}
	done()
	if _, err := os.Lstat(stage); !os.IsNotExist(err) {
		t.Errorf("the stage after done: %v, want gone", err)
	}
	plain := t.TempDir()
	if err := os.WriteFile(filepath.Join(plain, checkpointImage), ckpt, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, done, err := r.stageImage(id, plain); err != nil || got != plain {
		t.Errorf("stage of a plain image = %q, %v; want it as it is", got, err)
	} else {
		done()
	}
}

// TestStageImage_SealedCopyWinsAndKilledStagesGo: where a file is both
// plain and sealed (a plain one put beside a whole image), the sealed
// copy is what runsc gets; a stage a killed daemon left mounted goes
// when this node's runtime starts again, another node's stays.
func TestStageImage_SealedCopyWinsAndKilledStagesGo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: mounts a tmpfs (needs root)")
	}
	kr, err := secrets.OpenKeyring(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	r := &Runtime{opts: Options{Dir: root, NodeID: "node-a", ImageSealer: kr}, log: slog.New(slog.DiscardHandler)}
	other := &Runtime{opts: Options{Dir: root, NodeID: "node-b", ImageSealer: kr}, log: slog.New(slog.DiscardHandler)}
	ckpt := randomBytes(100)
	dir := sealedImage(t, kr, map[string][]byte{checkpointImage: ckpt})
	if err := os.WriteFile(filepath.Join(dir, checkpointImage), []byte("planted"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rt *Runtime
		id string
	}{{r, "sb-000000000000000a"}, {other, "sb-000000000000000b"}} {
		if err := os.MkdirAll(c.rt.sandboxDir(c.id), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeJSON(filepath.Join(c.rt.sandboxDir(c.id), "meta.json"), &sandboxMeta{ID: c.id, Node: c.rt.opts.NodeID}); err != nil {
			t.Fatal(err)
		}
		stage, _, err := c.rt.stageImage(c.id, dir) // never done: a killed daemon's
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.rt.unstage(c.id) })
		if got, _ := os.ReadFile(filepath.Join(stage, checkpointImage)); !bytes.Equal(got, ckpt) {
			t.Errorf("staged %q, want the sealed copy's plain text", got)
		}
	}
	r.SweepStages()
	if mounted(filepath.Join(r.sandboxDir("sb-000000000000000a"), stageName)) {
		t.Error("this node's stage is still mounted after its sweep")
	}
	if !mounted(filepath.Join(other.sandboxDir("sb-000000000000000b"), stageName)) {
		t.Error("another node's stage was swept")
	}
}
