package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster/forward"
)

// A peer request works once: its replay, within the MAC's minute, is
// refused as if the endpoint did not exist; a request without a valid MAC
// is refused the same way; two requests for the same URI in the same
// second are two requests (each has a nonce of its own).
func TestPeerOnly_RefusesReplaysAndStrangers(t *testing.T) {
	secret := make([]byte, 32)
	sender := &clusterNode{self: "n1", signer: forward.Signer{Node: "n1", Secret: secret}}
	receiver := &clusterNode{self: "n2", signer: forward.Signer{Node: "n2", Secret: secret}}
	serve := func(r *http.Request) int {
		w := httptest.NewRecorder()
		if from, ok := receiver.peerOnly(w, r); ok {
			if from != "n1" {
				t.Errorf("from %q, want n1", from)
			}
			w.WriteHeader(http.StatusOK)
		}
		return w.Code
	}
	incoming := func(out *http.Request) *http.Request {
		in := httptest.NewRequest(out.Method, out.URL.RequestURI(), nil)
		in.Header = out.Header.Clone()
		return in
	}
	first, err := sender.peerRequest(t.Context(), "http://n2.example", peerListPath+"?q=x")
	if err != nil {
		t.Fatal(err)
	}
	if code := serve(incoming(first)); code != http.StatusOK {
		t.Fatalf("a signed peer request: %d", code)
	}
	if code := serve(incoming(first)); code != http.StatusNotFound {
		t.Errorf("its replay: %d, want 404", code)
	}
	second, _ := sender.peerRequest(t.Context(), "http://n2.example", peerListPath+"?q=x")
	if first.URL.RawQuery == second.URL.RawQuery {
		t.Fatalf("two peer requests share a URI: %s", first.URL)
	}
	if code := serve(incoming(second)); code != http.StatusOK {
		t.Errorf("a second request for the same question: %d", code)
	}
	if code := serve(httptest.NewRequest(http.MethodGet, peerListPath+"?q=x", nil)); code != http.StatusNotFound {
		t.Errorf("an unsigned request: %d, want 404", code)
	}
}

// The MAC cache forgets a MAC once it could no longer verify.
func TestMacCache_ForgetsAfterTwiceTheSkew(t *testing.T) {
	var m macCache
	t0 := time.Unix(1_700_000_000, 0)
	if !m.first("a", t0) || m.first("a", t0.Add(time.Second)) {
		t.Fatal("a key is new once")
	}
	if !m.first("a", t0.Add(2*forward.MaxSkew+2*time.Second)) {
		t.Error("a key older than twice the skew is still remembered")
	}
}
