package auth_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/auth"
)

func TestPreviewTokens_ScopedToSandboxAndPort(t *testing.T) {
	p := auth.NewPreviewTokens([]byte("k"))
	tok := p.Token("sb-1", 8080)
	if !p.Valid("sb-1", 8080, tok) {
		t.Fatal("a token does not open its own port")
	}
	for _, c := range []struct {
		id   string
		port int
		tok  string
	}{{"sb-2", 8080, tok}, {"sb-1", 8081, tok}, {"sb-1", 8080, ""}, {"sb-1", 8080, tok[:10]}} {
		if p.Valid(c.id, c.port, c.tok) {
			t.Errorf("token opened %s:%d (token %q)", c.id, c.port, c.tok)
		}
	}
	if auth.NewPreviewTokens([]byte("other")).Valid("sb-1", 8080, tok) {
		t.Error("a token is valid under another key")
	}
}
