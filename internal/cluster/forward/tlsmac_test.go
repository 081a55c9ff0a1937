package forward_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster/forward"
)

const serverName = "8443-sb-0123456789abcdef.sandboxes.example.com"

func TestSigner_SignVerifyTLS(t *testing.T) {
	line := forward.Signer{Node: "a", Secret: secret, Clock: fixed(epoch)}.SignTLS(serverName)
	if !bytes.HasPrefix(line, []byte(forward.PreamblePrefix+"a 1800000000 ")) || !bytes.HasSuffix(line, []byte("\n")) {
		t.Fatalf("preamble %q: want %q, the node, the time, a MAC and a newline", line, forward.PreamblePrefix)
	}
	if line[0] == 0x16 {
		t.Fatal("the preamble starts like a TLS handshake record")
	}
	b := forward.Signer{Node: "b", Secret: secret, Clock: fixed(epoch.Add(-30 * time.Second))}
	from, ok := b.VerifyTLS(line, serverName)
	if !ok || from != "a" {
		t.Fatalf("VerifyTLS = %q, %v; want a, true", from, ok)
	}
	long := forward.Signer{Node: strings.Repeat("n", 63), Secret: secret, Clock: fixed(epoch)}.SignTLS(serverName)
	if len(long) > forward.MaxPreambleLen {
		t.Fatalf("a preamble from a 63-byte node id is %d bytes, over MaxPreambleLen %d", len(long), forward.MaxPreambleLen)
	}
	if _, ok := b.VerifyTLS(long, serverName); !ok {
		t.Fatal("VerifyTLS refused a preamble from a 63-byte node id")
	}
}

func TestSigner_VerifyTLSRefuses(t *testing.T) {
	a := forward.Signer{Node: "a", Secret: secret, Clock: fixed(epoch)}
	good := string(a.SignTLS(serverName))
	b := forward.Signer{Node: "b", Secret: secret, Clock: fixed(epoch)}
	for name, tc := range map[string]struct {
		line, serverName string
	}{
		"stale":             {string(forward.Signer{Node: "a", Secret: secret, Clock: fixed(epoch.Add(-forward.MaxSkew - time.Second))}.SignTLS(serverName)), serverName},
		"future":            {string(forward.Signer{Node: "a", Secret: secret, Clock: fixed(epoch.Add(forward.MaxSkew + time.Second))}.SignTLS(serverName)), serverName},
		"other server name": {good, "8443-sb-fedcba9876543210.sandboxes.example.com"},
		"other node":        {strings.Replace(good, " a ", " c ", 1), serverName},
		"self":              {string(forward.Signer{Node: "b", Secret: secret, Clock: fixed(epoch)}.SignTLS(serverName)), serverName},
		"wrong key":         {string(forward.Signer{Node: "a", Secret: []byte("another secret"), Clock: fixed(epoch)}.SignTLS(serverName)), serverName},
		"no newline":        {strings.TrimSuffix(good, "\n"), serverName},
		"crlf":              {strings.TrimSuffix(good, "\n") + "\r\n", serverName},
		"no prefix":         {strings.TrimPrefix(good, forward.PreamblePrefix), serverName},
		"lower prefix":      {strings.ToLower(forward.PreamblePrefix) + strings.TrimPrefix(good, forward.PreamblePrefix), serverName},
		"extra field":       {strings.TrimSuffix(good, "\n") + " x\n", serverName},
		"two spaces":        {strings.Replace(good, " a ", " a  ", 1), serverName},
		"empty node":        {strings.Replace(good, " a ", "  ", 1), serverName},
		"short mac":         {forward.PreamblePrefix + "a 1800000000 abcd\n", serverName},
		"bad time":          {forward.PreamblePrefix + "a x " + strings.Repeat("00", 32) + "\n", serverName},
		"garbage":           {"GET / HTTP/1.1\r\n", serverName},
		"too long":          {good[:len(good)-1] + strings.Repeat("0", forward.MaxPreambleLen) + "\n", serverName},
		"pipe server name":  {string(a.SignTLS("a|b")), "a|b"},
		"long node":         {string(forward.Signer{Node: strings.Repeat("n", 64), Secret: secret, Clock: fixed(epoch)}.SignTLS(serverName)), serverName},
	} {
		t.Run(name, func(t *testing.T) {
			if from, ok := b.VerifyTLS([]byte(tc.line), tc.serverName); ok {
				t.Errorf("VerifyTLS(%q) = %q, true; want refused", tc.line, from)
			}
		})
	}
	t.Run("no secret", func(t *testing.T) {
		line := forward.Signer{Node: "a", Clock: fixed(epoch)}.SignTLS(serverName)
		if _, ok := (forward.Signer{Node: "b", Clock: fixed(epoch)}).VerifyTLS(line, serverName); ok {
			t.Error("a Signer without a secret verified a preamble")
		}
	})
}

// TestSigner_MACsDoNotCross: a request's MAC is no preamble's and the
// other way round, even for a node, method and URI shaped to line up.
func TestSigner_MACsDoNotCross(t *testing.T) {
	const target = "/x"
	out := httptest.NewRequest("1800000000", "http://b.internal"+target, nil)
	out.RequestURI = ""
	forward.Signer{Node: "a", Secret: secret, Clock: fixed(epoch)}.Sign(out)
	mac := strings.TrimPrefix(out.Header.Get(forward.HeaderAuth), "t=1800000000,mac=")
	b := forward.Signer{Node: "b", Secret: secret, Clock: fixed(epoch)}
	if _, ok := b.VerifyTLS([]byte(forward.PreamblePrefix+"a 1800000000 "+mac+"\n"), target); ok {
		t.Error("a request's MAC verified as a preamble")
	}
	line := forward.Signer{Node: "a", Secret: secret, Clock: fixed(epoch)}.SignTLS(target)
	fields := strings.Fields(string(line))
	in := httptest.NewRequest(http.MethodGet, target, nil)
	in.Header.Set(forward.HeaderNode, "a")
	in.Header.Set(forward.HeaderAuth, "t=1800000000,mac="+fields[3])
	if _, ok := b.Verify(in); ok {
		t.Error("a preamble's MAC verified as a request's")
	}
}
