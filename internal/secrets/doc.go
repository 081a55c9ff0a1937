// Package secrets seals small values (mount credentials, registry
// credentials, sandbox secrets) for storage at rest, with key ids so that
// keys can be rotated without re-sealing everything at once.
//
// # Keys
//
// A [Keyring] lives in <data-dir>/keys: one file per key, named by its
// [KeyID] as eight lowercase hex digits (00000001.key), holding exactly
// [KeySize] random bytes, mode 0600 in a 0700 directory. Key ids are
// assigned in increasing order; the highest id is the active key that
// [Keyring.Seal] uses, and every key in the directory can still
// [Keyring.Open] the blobs it sealed. [Keyring.Rotate] adds a new active
// key; it never deletes one. Deleting an old key file is an operator decision
// taken after every blob sealed under it has been re-sealed ([BlobKeyID]
// tells which key sealed a blob).
//
// Key ids are local to one keyring. Nodes that must open each other's blobs
// need the same key files.
//
// # Blob format
//
//	version (1 byte, = 1) | key id (4 bytes, big endian) | nonce (24 bytes) | ciphertext+tag
//
// The overhead is [Overhead] bytes. The header (version and key id) is
// authenticated together with the caller's associated data, so a blob whose
// header is edited fails to open like any other tampered blob.
//
// # Cipher
//
// XChaCha20-Poly1305 (golang.org/x/crypto/chacha20poly1305), not AES-GCM:
// its 192-bit nonces may be drawn at random for an effectively unlimited
// number of seals under one key, whereas AES-GCM's 96-bit random nonces are
// limited to about 2^32 seals per key before a collision (which breaks both
// confidentiality and integrity) becomes a real risk. With random nonces
// there is no counter to persist across restarts or share between nodes. It
// is also constant-time in software on hosts without AES instructions. The
// cost is that it is not a FIPS 140 approved algorithm: under
// GODEBUG=fips140=only the keyring fails to open.
//
// # Associated data
//
// Associated data is not encrypted but must be presented again to open a
// blob. Bind each blob to the row and purpose it belongs to, for example
// AssociatedData("sandbox", id, "mount", "0"), so that a blob copied into
// another row, or into another column of the same row, fails to open.
//
// # Errors
//
// Errors never contain plaintext or key material. A blob that fails
// authentication (tampered, truncated, wrong associated data, or sealed by a
// different key with the same id) is [ErrCorrupt]; a blob naming a key that
// is not in the keyring is [ErrUnknownKey].
package secrets
