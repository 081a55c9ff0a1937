package cluster

import (
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
)

const (
	// sealVersion is the first byte of every sealed blob; Open rejects
	// others. A new version would mean a new cipher, key or layout.
	sealVersion byte = 1
	// sealInfo is the HKDF info that makes the sealing key: another use of
	// the cluster secret (the node MAC) derives its own key with its own
	// label, so no key serves two purposes.
	sealInfo = "sandboxd/v1 cluster seal"
)

// sealer derives the sealing AEAD from the cluster secret.
func sealer(secret []byte) (cipher.AEAD, error) {
	if len(secret) < minSecret {
		return nil, fmt.Errorf("%w: cluster secret is %d bytes, want at least %d", ErrInvalidArgument, len(secret), minSecret)
	}
	key, err := hkdf.Key(sha256.New, secret, nil, sealInfo, chacha20poly1305.KeySize)
	if err != nil {
		return nil, err
	}
	return chacha20poly1305.NewX(key)
}

// Seal encrypts and authenticates plain, binding ad (which is not stored:
// Open needs the same ad), with XChaCha20-Poly1305 under a key derived by
// HKDF-SHA256 from the cluster secret, so every node with the secret can
// open it. The blob is a version byte, a random nonce, and the ciphertext.
func (n *Node) Seal(plain, ad []byte) ([]byte, error) {
	ns := n.aead.NonceSize()
	out := make([]byte, 1+ns, 1+ns+len(plain)+n.aead.Overhead())
	out[0] = sealVersion
	nonce := out[1:]
	rand.Read(nonce) // never fails; see crypto/rand.Read
	return n.aead.Seal(out, nonce, plain, sealAD(ad)), nil
}

// Open reverses Seal. A blob that was altered or truncated, sealed with
// another ad, or sealed under another cluster secret is ErrCorrupt.
func (n *Node) Open(sealed, ad []byte) ([]byte, error) {
	ns := n.aead.NonceSize()
	if len(sealed) < 1+ns+n.aead.Overhead() || sealed[0] != sealVersion {
		return nil, fmt.Errorf("open sealed blob: %w: bad length or version", ErrCorrupt)
	}
	plain, err := n.aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], sealAD(ad))
	if err != nil {
		return nil, fmt.Errorf("open sealed blob: %w", ErrCorrupt)
	}
	return plain, nil
}

// sealAD binds the version byte too, so a blob cannot be replayed as
// another version's.
func sealAD(ad []byte) []byte {
	return append([]byte{sealVersion}, ad...)
}
