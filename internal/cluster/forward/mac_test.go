package forward_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sandboxd/sandboxd/internal/cluster/forward"
)

var (
	secret = []byte("0123456789abcdef0123456789abcdef")
	epoch  = time.Unix(1_800_000_000, 0)
)

func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

// signed returns a server-side request as node "a" would have sent it for
// method and target, signed at the given time.
func signed(t *testing.T, method, target string, at time.Time) *http.Request {
	t.Helper()
	out := httptest.NewRequest(method, "http://b.internal"+target, nil)
	out.RequestURI = "" // an outgoing request
	forward.Signer{Node: "a", Secret: secret, Clock: fixed(at)}.Sign(out)
	in := httptest.NewRequest(method, target, nil) // RequestURI as received
	in.Header = out.Header.Clone()
	return in
}

func TestSigner_SignVerify(t *testing.T) {
	r := signed(t, http.MethodPost, "/v1/sandboxes/sb-0123456789abcdef/exec?x=1&y=%2F", epoch)
	b := forward.Signer{Node: "b", Secret: secret, Clock: fixed(epoch.Add(30 * time.Second))}
	from, ok := b.Verify(r)
	if !ok || from != "a" {
		t.Fatalf("Verify = %q, %v; want a, true", from, ok)
	}
}

func TestSigner_VerifyRefuses(t *testing.T) {
	const target = "/v1/sandboxes/sb-0123456789abcdef"
	b := forward.Signer{Node: "b", Secret: secret, Clock: fixed(epoch)}
	for name, mutate := range map[string]func(r *http.Request) *http.Request{
		"stale": func(*http.Request) *http.Request {
			return signed(t, http.MethodGet, target, epoch.Add(-forward.MaxSkew-time.Second))
		},
		"future": func(*http.Request) *http.Request {
			return signed(t, http.MethodGet, target, epoch.Add(forward.MaxSkew+time.Second))
		},
		"other method": func(r *http.Request) *http.Request { r.Method = http.MethodDelete; return r },
		"other uri":    func(r *http.Request) *http.Request { r.RequestURI = target + "/stop"; return r },
		"other query":  func(r *http.Request) *http.Request { r.RequestURI = target + "?a=1"; return r },
		"other node":   func(r *http.Request) *http.Request { r.Header.Set(forward.HeaderNode, "c"); return r },
		"self": func(*http.Request) *http.Request {
			r := httptest.NewRequest(http.MethodGet, target, nil)
			out := r.Clone(t.Context())
			out.RequestURI = ""
			forward.Signer{Node: "b", Secret: secret, Clock: fixed(epoch)}.Sign(out)
			r.Header = out.Header
			return r
		},
		"no node": func(r *http.Request) *http.Request { r.Header.Del(forward.HeaderNode); return r },
		"no auth": func(r *http.Request) *http.Request { r.Header.Del(forward.HeaderAuth); return r },
		"two auths": func(r *http.Request) *http.Request {
			r.Header.Add(forward.HeaderAuth, r.Header.Get(forward.HeaderAuth))
			return r
		},
		"two nodes": func(r *http.Request) *http.Request { r.Header.Add(forward.HeaderNode, "a"); return r },
		"garbage":   func(r *http.Request) *http.Request { r.Header.Set(forward.HeaderAuth, "garbage"); return r },
		"no mac":    func(r *http.Request) *http.Request { r.Header.Set(forward.HeaderAuth, "t=1800000000"); return r },
		"short mac": func(r *http.Request) *http.Request {
			r.Header.Set(forward.HeaderAuth, "t=1800000000,mac=abcd")
			return r
		},
		"bad time":   func(r *http.Request) *http.Request { r.Header.Set(forward.HeaderAuth, "t=x,mac=00"); return r },
		"pipe node":  func(r *http.Request) *http.Request { r.Header.Set(forward.HeaderNode, "a|1"); return r },
		"wrong key":  func(*http.Request) *http.Request { return signedWith(t, []byte("another secret"), target) },
		"empty node": func(r *http.Request) *http.Request { r.Header.Set(forward.HeaderNode, ""); return r },
	} {
		t.Run(name, func(t *testing.T) {
			r := mutate(signed(t, http.MethodGet, target, epoch))
			if from, ok := b.Verify(r); ok {
				t.Errorf("Verify = %q, true; want refused", from)
			}
		})
	}
	t.Run("no secret", func(t *testing.T) {
		r := signedWith(t, nil, target)
		if _, ok := (forward.Signer{Node: "b", Clock: fixed(epoch)}).Verify(r); ok {
			t.Error("a Signer without a secret verified a request")
		}
	})
}

func signedWith(t *testing.T, key []byte, target string) *http.Request {
	t.Helper()
	out := httptest.NewRequest(http.MethodGet, target, nil)
	out.RequestURI = ""
	forward.Signer{Node: "a", Secret: key, Clock: fixed(epoch)}.Sign(out)
	in := httptest.NewRequest(http.MethodGet, target, nil)
	in.Header = out.Header.Clone()
	return in
}

func TestStripNodeHeaders(t *testing.T) {
	h := http.Header{
		"X-Sandboxd-Node":      {"a"},
		"X-Sandboxd-Node-Auth": {"t=1,mac=00"},
		"X-Sandboxd-Node-Next": {"future"},
		"x-sandboxd-node-raw":  {"not canonical"},
		"X-Sandboxd-Token":     {"user's"},
		"Authorization":        {"Bearer user"},
	}
	forward.StripNodeHeaders(h)
	want := http.Header{"X-Sandboxd-Token": {"user's"}, "Authorization": {"Bearer user"}}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("headers after strip (-want +got):\n%s", diff)
	}
}
