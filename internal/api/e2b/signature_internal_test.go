package e2b

import (
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// TestFileSignature_MatchesTheSDK: vectors computed with the SDK's algorithm
// (src/sandbox/signature.ts: sha256, base64, "=" stripped, "v1_").
func TestFileSignature_MatchesTheSDK(t *testing.T) {
	for _, tc := range []struct{ path, op, user, token, exp, want string }{
		{"/tmp/a", "read", "", "tok", "", "v1_jRv7bf35peDXq059OOOyWD0PBnF4OWRLw0tBteoU7A4"},
		{"/home/user/x.txt", "write", "user", "tok", "1700000000", "v1_sZOFVaQd+A+q1sTbwox5b6CKgfi8y7do5PKAQYeMEb4"},
	} {
		if got := fileSignature(tc.path, tc.op, tc.user, tc.token, tc.exp); got != tc.want {
			t.Errorf("fileSignature(%q, %q, %q, _, %q) = %s, want %s", tc.path, tc.op, tc.user, tc.exp, got, tc.want)
		}
	}
}

func TestCheckSignature(t *testing.T) {
	f := New(Options{AccessTokenKey: []byte("k")})
	const id = "sb-0123456789abcdef"
	now := time.Unix(1_800_000_000, 0)
	token := f.token(accessTokenLabel, id)
	future, past := strconv.FormatInt(now.Unix()+60, 10), strconv.FormatInt(now.Unix()-1, 10)
	signed := func(method, path, user, exp string, mutate func(url.Values)) string {
		op := map[string]string{"GET": "read", "POST": "write"}[method]
		q := url.Values{"path": {path}, "signature": {fileSignature(path, op, user, token, exp)}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		if mutate != nil {
			mutate(q)
		}
		return f.checkSignature(httptest.NewRequest(method, "/files?"+q.Encode(), nil), id, now)
	}
	for _, tc := range []struct {
		name         string
		method, user string
		exp          string
		mutate       func(url.Values)
		wantOK       bool
	}{
		{name: "read", method: "GET", wantOK: true},
		{name: "write as user, unexpired", method: "POST", user: "user", exp: future, wantOK: true},
		{name: "expired", method: "GET", exp: past},
		{name: "expiration moved later", method: "GET", exp: past, mutate: func(q url.Values) { q.Set("signature_expiration", future) }},
		{name: "expiration dropped", method: "GET", exp: future, mutate: func(q url.Values) { q.Del("signature_expiration") }},
		{name: "bad expiration", method: "GET", exp: "soon"},
		{name: "another path", method: "GET", mutate: func(q url.Values) { q.Set("path", "/etc/shadow") }},
		{name: "another user", method: "GET", mutate: func(q url.Values) { q.Set("username", "root") }},
		{name: "no signature", method: "GET", mutate: func(q url.Values) { q.Del("signature") }},
		{name: "a read signature for a write", method: "POST", mutate: func(q url.Values) {
			q.Set("signature", fileSignature(q.Get("path"), "read", "", token, ""))
		}},
		{name: "another sandbox's token", method: "GET", mutate: func(q url.Values) {
			q.Set("signature", fileSignature(q.Get("path"), "read", "", f.token(accessTokenLabel, "sb-fedcba9876543210"), ""))
		}},
	} {
		msg := signed(tc.method, "/home/user/f.txt", tc.user, tc.exp, tc.mutate)
		if (msg == "") != tc.wantOK {
			t.Errorf("%s: checkSignature = %q, want ok=%v", tc.name, msg, tc.wantOK)
		}
	}
	// Only GET and POST /files are signable.
	if msg := f.checkSignature(httptest.NewRequest("POST", "/filesystem.Filesystem/Stat?signature=x", nil), id, now); msg == "" {
		t.Error("a signature authorized a Connect call")
	}
}
