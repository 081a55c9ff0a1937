package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// PreviewTokens derives tokens that open one private preview port of one
// sandbox, and nothing else: HMAC-SHA256 over the sandbox id and port under
// a daemon key. Nothing is stored; a token is valid as long as the key is.
// They are what a user hands to a browser or a teammate instead of an API
// token.
type PreviewTokens struct{ key []byte }

// NewPreviewTokens returns a deriver keyed by key (32 random bytes kept
// with the daemon's data).
func NewPreviewTokens(key []byte) *PreviewTokens { return &PreviewTokens{key: key} }

// Token is the preview token of port of sandboxID.
func (p *PreviewTokens) Token(sandboxID string, port int) string {
	m := hmac.New(sha256.New, p.key)
	m.Write([]byte("preview\x00" + sandboxID + "\x00" + strconv.Itoa(port)))
	return hex.EncodeToString(m.Sum(nil))
}

// Valid reports, in constant time, whether token opens port of sandboxID.
func (p *PreviewTokens) Valid(sandboxID string, port int, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(p.Token(sandboxID, port)))
}
