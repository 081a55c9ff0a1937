package secrets_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sandboxd/sandboxd/internal/secrets"
)

// openKeyring opens a keyring in a fresh data directory.
func openKeyring(t *testing.T) (*secrets.Keyring, string) {
	t.Helper()
	dir := t.TempDir()
	k, err := secrets.OpenKeyring(dir)
	if err != nil {
		t.Fatalf("OpenKeyring: %v", err)
	}
	return k, dir
}

func seal(t *testing.T, k *secrets.Keyring, plaintext, ad []byte) []byte {
	t.Helper()
	blob, err := k.Seal(plaintext, ad)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return blob
}

func TestSealOpen_RoundTrip(t *testing.T) {
	k, _ := openKeyring(t)
	tests := []struct {
		name          string
		plaintext, ad []byte
	}{
		{"empty", nil, nil},
		{"no associated data", []byte("hunter2"), nil},
		{"bound to a row", []byte(`{"user":"u","password":"p"}`), secrets.AssociatedData("sandbox", "sb-0123456789abcdef", "mount", "0")},
		{"large", bytes.Repeat([]byte{0xa5}, 1<<20), []byte("big")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blob := seal(t, k, tt.plaintext, tt.ad)
			if got, want := len(blob), len(tt.plaintext)+secrets.Overhead; got != want {
				t.Errorf("len(blob) = %d, want %d", got, want)
			}
			got, err := k.Open(blob, tt.ad)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if !bytes.Equal(got, tt.plaintext) {
				t.Errorf("Open returned %d bytes differing from the %d sealed", len(got), len(tt.plaintext))
			}
		})
	}
}

func TestSeal_FreshNonce(t *testing.T) {
	k, _ := openKeyring(t)
	a := seal(t, k, []byte("same"), nil)
	b := seal(t, k, []byte("same"), nil)
	if bytes.Equal(a, b) {
		t.Error("sealing the same plaintext twice gave the same blob")
	}
}

func TestOpen_WrongAssociatedData(t *testing.T) {
	k, _ := openKeyring(t)
	blob := seal(t, k, []byte("secret"), secrets.AssociatedData("sandbox", "sb-a", "env"))
	for _, ad := range [][]byte{
		nil,
		secrets.AssociatedData("sandbox", "sb-b", "env"),   // another row
		secrets.AssociatedData("sandbox", "sb-a", "mount"), // another purpose
	} {
		_, err := k.Open(blob, ad)
		if !errors.Is(err, secrets.ErrCorrupt) {
			t.Errorf("Open with associated data %q: err = %v, want ErrCorrupt", ad, err)
		}
	}
}

func TestOpen_Tampered(t *testing.T) {
	k, _ := openKeyring(t)
	ad := []byte("row")
	blob := seal(t, k, []byte("secret value"), ad)
	for i := range blob {
		tampered := bytes.Clone(blob)
		tampered[i] ^= 0x01
		_, err := k.Open(tampered, ad)
		want := secrets.ErrCorrupt
		if i >= 1 && i < 5 { // the key id: names a key the keyring lacks
			want = secrets.ErrUnknownKey
		}
		if !errors.Is(err, want) {
			t.Errorf("byte %d flipped: err = %v, want %v", i, err, want)
		}
	}
}

func TestOpen_Truncated(t *testing.T) {
	k, _ := openKeyring(t)
	blob := seal(t, k, []byte("secret value"), nil)
	for n := range len(blob) {
		if _, err := k.Open(blob[:n], nil); !errors.Is(err, secrets.ErrCorrupt) {
			t.Errorf("first %d bytes: err = %v, want ErrCorrupt", n, err)
		}
	}
	if _, err := k.Open(append(bytes.Clone(blob), 0), nil); !errors.Is(err, secrets.ErrCorrupt) {
		t.Errorf("one byte appended: err = %v, want ErrCorrupt", err)
	}
}

func TestOpen_SameKeyIDOtherKeyring(t *testing.T) {
	a, _ := openKeyring(t)
	b, _ := openKeyring(t)
	if a.ActiveKeyID() != b.ActiveKeyID() {
		t.Fatalf("active key ids differ: %s, %s", a.ActiveKeyID(), b.ActiveKeyID())
	}
	blob := seal(t, a, []byte("secret"), nil)
	if _, err := b.Open(blob, nil); !errors.Is(err, secrets.ErrCorrupt) {
		t.Errorf("err = %v, want ErrCorrupt", err)
	}
}

func TestRotate_OldKeyOpensOldBlob(t *testing.T) {
	k, _ := openKeyring(t)
	old := seal(t, k, []byte("old"), []byte("ad"))
	first := k.ActiveKeyID()

	id, err := k.Rotate()
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if id <= first || k.ActiveKeyID() != id {
		t.Fatalf("Rotate = %s, active %s; want a new active id above %s", id, k.ActiveKeyID(), first)
	}
	fresh := seal(t, k, []byte("new"), []byte("ad"))

	for _, c := range []struct {
		blob   []byte
		wantID secrets.KeyID
		want   string
	}{{old, first, "old"}, {fresh, id, "new"}} {
		gotID, err := secrets.BlobKeyID(c.blob)
		if err != nil || gotID != c.wantID {
			t.Errorf("BlobKeyID = %s, %v; want %s", gotID, err, c.wantID)
		}
		got, err := k.Open(c.blob, []byte("ad"))
		if err != nil || string(got) != c.want {
			t.Errorf("Open = %q, %v; want %q", got, err, c.want)
		}
	}
}

func TestOpenKeyring_Permissions(t *testing.T) {
	k, dir := openKeyring(t)
	if _, err := k.Rotate(); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "keys")
	fi, err := os.Stat(keys)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("keys directory mode = %#o, want 0700", got)
	}
	entries, err := os.ReadDir(keys)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode(); got != 0o600 {
			t.Errorf("%s mode = %v, want -rw-------", e.Name(), got)
		}
		if fi.Size() != secrets.KeySize {
			t.Errorf("%s size = %d, want %d", e.Name(), fi.Size(), secrets.KeySize)
		}
	}
	if diff := cmp.Diff([]string{"00000001.key", "00000002.key"}, names); diff != "" {
		t.Errorf("key files (-want +got):\n%s", diff)
	}
}

func TestOpenKeyring_Reopen(t *testing.T) {
	k, dir := openKeyring(t)
	old := seal(t, k, []byte("old"), nil)
	if _, err := k.Rotate(); err != nil {
		t.Fatal(err)
	}
	fresh := seal(t, k, []byte("new"), nil)

	reopened, err := secrets.OpenKeyring(dir)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if got, want := reopened.ActiveKeyID(), k.ActiveKeyID(); got != want {
		t.Errorf("reopened active key = %s, want %s", got, want)
	}
	for _, c := range []struct {
		blob []byte
		want string
	}{{old, "old"}, {fresh, "new"}} {
		got, err := reopened.Open(c.blob, nil)
		if err != nil || string(got) != c.want {
			t.Errorf("reopened Open = %q, %v; want %q", got, err, c.want)
		}
	}
	// Blobs sealed after reopening open in the original keyring: same key.
	blob := seal(t, reopened, []byte("after"), nil)
	if got, err := k.Open(blob, nil); err != nil || string(got) != "after" {
		t.Errorf("original Open = %q, %v; want %q", got, err, "after")
	}
}

func TestOpenKeyring_UnknownKeyAfterKeyRemoved(t *testing.T) {
	k, dir := openKeyring(t)
	old := seal(t, k, []byte("old"), nil)
	if _, err := k.Rotate(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "keys", "00000001.key")); err != nil {
		t.Fatal(err)
	}
	reopened, err := secrets.OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reopened.Open(old, nil); !errors.Is(err, secrets.ErrUnknownKey) {
		t.Errorf("err = %v, want ErrUnknownKey", err)
	}
}

func TestOpenKeyring_RejectsExposedKeyFile(t *testing.T) {
	_, dir := openKeyring(t)
	if err := os.Chmod(filepath.Join(dir, "keys", "00000001.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.OpenKeyring(dir); err == nil || !strings.Contains(err.Error(), "0644") {
		t.Errorf("err = %v, want a complaint about mode 0644", err)
	}
}

func TestOpenKeyring_RejectsExposedKeyDir(t *testing.T) {
	_, dir := openKeyring(t)
	if err := os.Chmod(filepath.Join(dir, "keys"), 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.OpenKeyring(dir); err == nil {
		t.Error("OpenKeyring accepted a world-writable key directory")
	}
}

func TestOpenKeyring_RejectsBadKeyFiles(t *testing.T) {
	tests := []struct {
		name     string
		contents []byte
	}{
		{"00000002.key", make([]byte, secrets.KeySize-1)}, // short
		{"00000002.key", make([]byte, secrets.KeySize+1)}, // long
		{"2.key", make([]byte, secrets.KeySize)},          // not canonical
		{"0000000A.key", make([]byte, secrets.KeySize)},   // upper case
		{"00000000.key", make([]byte, secrets.KeySize)},   // id 0 is never issued
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, dir := openKeyring(t)
			if err := os.WriteFile(filepath.Join(dir, "keys", tt.name), tt.contents, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := secrets.OpenKeyring(dir); err == nil {
				t.Errorf("OpenKeyring accepted key file %s of %d bytes", tt.name, len(tt.contents))
			}
		})
	}
}

func TestOpenKeyring_IgnoresTempFiles(t *testing.T) {
	_, dir := openKeyring(t)
	// What a crash in the middle of Rotate leaves behind.
	if err := os.WriteFile(filepath.Join(dir, "keys", ".tmp-123"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := secrets.OpenKeyring(dir)
	if err != nil {
		t.Fatalf("OpenKeyring: %v", err)
	}
	if got := k.ActiveKeyID(); got != 1 {
		t.Errorf("active key = %s, want 00000001", got)
	}
}

func TestErrors_DoNotLeakSecrets(t *testing.T) {
	k, dir := openKeyring(t)
	key, err := os.ReadFile(filepath.Join(dir, "keys", "00000001.key"))
	if err != nil {
		t.Fatal(err)
	}
	plaintext := []byte("PLAINTEXT-CANARY")
	blob := seal(t, k, plaintext, []byte("ad"))
	tampered := bytes.Clone(blob)
	tampered[len(tampered)-1] ^= 0xff

	for _, c := range []struct {
		blob, ad []byte
	}{{blob, []byte("other")}, {tampered, []byte("ad")}, {blob[:10], nil}} {
		got, err := k.Open(c.blob, c.ad)
		if err == nil {
			t.Fatal("Open succeeded")
		}
		if got != nil {
			t.Errorf("Open returned %d bytes alongside an error", len(got))
		}
		msg := err.Error()
		for _, secret := range []string{string(plaintext), string(key), hex.EncodeToString(key)} {
			if strings.Contains(msg, secret) {
				t.Errorf("error %q contains secret material", msg)
			}
		}
	}
	if s := k.String(); strings.Contains(s, string(key)) || strings.Contains(s, hex.EncodeToString(key)) {
		t.Errorf("String() = %q contains key material", s)
	}
}

func TestAssociatedData_Unambiguous(t *testing.T) {
	pairs := [][2][]string{
		{{"ab", "c"}, {"a", "bc"}},
		{{"a", ""}, {"a"}},
		{{""}, {}},
	}
	for _, p := range pairs {
		if bytes.Equal(secrets.AssociatedData(p[0]...), secrets.AssociatedData(p[1]...)) {
			t.Errorf("AssociatedData(%q) == AssociatedData(%q)", p[0], p[1])
		}
	}
}

func TestKeyring_ConcurrentSealOpenRotate(t *testing.T) {
	k, _ := openKeyring(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				blob, err := k.Seal([]byte("x"), nil)
				if err != nil {
					t.Error(err)
					return
				}
				if got, err := k.Open(blob, nil); err != nil || string(got) != "x" {
					t.Errorf("Open = %q, %v", got, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			if _, err := k.Rotate(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if got := k.ActiveKeyID(); got != 6 {
		t.Errorf("active key = %s, want 00000006", got)
	}
}

func FuzzOpen(f *testing.F) {
	k, err := secrets.OpenKeyring(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	valid, err := k.Seal([]byte("plaintext"), []byte("ad"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid, []byte("ad"))
	f.Add(valid, []byte{})
	f.Add(valid[:secrets.Overhead], []byte("ad"))
	f.Add([]byte{}, []byte{})
	f.Add([]byte{1, 0, 0, 0, 1}, []byte{})
	f.Add(bytes.Repeat([]byte{0xff}, secrets.Overhead+3), []byte{})
	f.Fuzz(func(t *testing.T, blob, ad []byte) {
		got, err := k.Open(blob, ad)
		switch {
		case err == nil:
			// Only an authentic blob opens: the one seed above.
			if !bytes.Equal(blob, valid) || string(ad) != "ad" || string(got) != "plaintext" {
				t.Fatalf("Open accepted a forged blob: %x", blob)
			}
		case errors.Is(err, secrets.ErrCorrupt), errors.Is(err, secrets.ErrUnknownKey):
			if got != nil {
				t.Fatalf("Open returned plaintext with error %v", err)
			}
		default:
			t.Fatalf("Open: unexpected error %v", err)
		}
	})
}
