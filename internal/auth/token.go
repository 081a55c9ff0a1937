package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

const (
	tokenPrefix = "sbx_"
	// idLen is the token id's length in hex digits (32 bits): short enough
	// to read aloud, long enough that collisions are rare and retried.
	idLen = 8
	// secretBytes is the token secret's entropy: 256 bits, beyond guessing.
	secretBytes = 32
	// tokenLen is the length of every well-formed token.
	tokenLen = len(tokenPrefix) + idLen + 1 + 2*secretBytes

	e2bPrefix = "e2b_"
)

// ErrMalformedToken matches every [*MalformedTokenError].
var ErrMalformedToken = errors.New("auth: malformed token")

// MalformedTokenError reports a string that is not a well-formed token.
// Reason never quotes the input.
type MalformedTokenError struct {
	Reason string
}

func (e *MalformedTokenError) Error() string { return "auth: malformed token: " + e.Reason }

// Is reports whether target is [ErrMalformedToken].
func (e *MalformedTokenError) Is(target error) bool { return target == ErrMalformedToken }

// Role is what a token may do.
type Role string

const (
	// RoleAdmin may see and manage every resource and manage tokens.
	RoleAdmin Role = "admin"
	// RoleUser may see and manage only resources it owns.
	RoleUser Role = "user"
)

// ParseRole returns the role named s, or an error if s names none.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAdmin, RoleUser:
		return r, nil
	}
	return "", fmt.Errorf("auth: unknown role %q (want %q or %q)", s, RoleAdmin, RoleUser)
}

// Token describes an API token; it holds nothing secret.
type Token struct {
	ID    string // 8 lowercase hex digits, visible in the token itself
	Role  Role
	Owner string // the tenant whose resources a user token sees
	Name  string // a label chosen by whoever created the token
	// Quota bounds what Owner may hold when this token creates or starts
	// sandboxes; it does not apply to admin tokens.
	Quota Quota
}

// Quota is what a user token's owner may hold at once: running
// sandboxes, their CPU (1000 per core), memory (MB) and disk limits
// (MiB, summed). A zero field is unlimited.
type Quota struct {
	Sandboxes int64
	MilliCPU  int64
	MemoryMB  int64
	DiskMB    int64
}

// Generate makes a new token for owner with role, and returns the plaintext
// (show it once, never store or log it), its description (Name empty, for
// the caller to fill) and the hash to store. It does not validate role: the
// API edge checks it with [ParseRole], and [Authenticator] rejects a token
// stored with an unknown role.
func Generate(role Role, owner string) (plaintext string, tok Token, hash [32]byte) {
	var id [idLen / 2]byte
	var secret [secretBytes]byte
	rand.Read(id[:]) // never fails; see crypto/rand.Read
	rand.Read(secret[:])
	tok = Token{ID: hex.EncodeToString(id[:]), Role: role, Owner: owner}
	plaintext = tokenPrefix + tok.ID + "_" + hex.EncodeToString(secret[:])
	return plaintext, tok, Hash(plaintext)
}

// Hash returns the SHA-256 of the whole token, the only form stored. It
// does not check that plaintext is well formed.
func Hash(plaintext string) [32]byte {
	return sha256.Sum256([]byte(plaintext))
}

// Parse checks that plaintext is a well-formed token and returns its id. It
// fails with a [*MalformedTokenError]. A well-formed token may still be
// unknown or revoked: that is for [Authenticator] to find.
func Parse(plaintext string) (id string, err error) {
	if len(plaintext) != tokenLen {
		return "", &MalformedTokenError{Reason: fmt.Sprintf("length %d, want %d", len(plaintext), tokenLen)}
	}
	rest, ok := strings.CutPrefix(plaintext, tokenPrefix)
	if !ok {
		return "", &MalformedTokenError{Reason: "missing " + tokenPrefix + " prefix"}
	}
	id, secret := rest[:idLen], rest[idLen+1:]
	if rest[idLen] != '_' {
		return "", &MalformedTokenError{Reason: "missing _ after the id"}
	}
	if !isLowerHex(id) {
		return "", &MalformedTokenError{Reason: "id is not lowercase hex"}
	}
	if !isLowerHex(secret) {
		return "", &MalformedTokenError{Reason: "secret is not lowercase hex"}
	}
	return id, nil
}

func isLowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// E2BKey returns token in the form the E2B SDKs accept as an API key:
// "e2b_" followed by the token's bytes in lowercase hex.
func E2BKey(token string) string {
	return e2bPrefix + hex.EncodeToString([]byte(token))
}

// FromE2BKey reverses [E2BKey]. It fails with a [*MalformedTokenError]
// unless s is exactly the E2B form of a well-formed token.
func FromE2BKey(s string) (string, error) {
	h, ok := strings.CutPrefix(s, e2bPrefix)
	if !ok {
		return "", &MalformedTokenError{Reason: "missing " + e2bPrefix + " prefix"}
	}
	// Check the length before decoding, so that no input makes us allocate
	// more than a token.
	if len(h) != 2*tokenLen {
		return "", &MalformedTokenError{Reason: fmt.Sprintf("E2B key length %d, want %d", len(s), len(e2bPrefix)+2*tokenLen)}
	}
	if !isLowerHex(h) {
		return "", &MalformedTokenError{Reason: "E2B key is not lowercase hex"}
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return "", &MalformedTokenError{Reason: "E2B key is not hex"}
	}
	token := string(b)
	if _, err := Parse(token); err != nil {
		return "", err
	}
	return token, nil
}
