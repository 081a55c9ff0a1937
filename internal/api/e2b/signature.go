package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Signed /files URLs (sbx.uploadUrl(), sbx.downloadUrl()). The SDK signs
// with the sandbox's envd access token, which never travels in the URL:
//
//	signature = "v1_" + base64(sha256("<path>:<operation>:<user>:<token>[:<expiration>]")), "=" stripped
//
// where path and user are the `path` and `username` query parameters as
// sent (empty when absent: the default user), operation is "read" for GET
// and "write" for POST, and expiration, when the URL has one, is the
// `signature_expiration` parameter (unix seconds) verbatim.
const signaturePrefix = "v1_"

// fileOperation is the operation a /files request signs, "" for a request
// a signature cannot authorize.
func fileOperation(r *http.Request) string {
	if r.URL.Path != "/files" {
		return ""
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return "read"
	case http.MethodPost:
		return "write"
	}
	return ""
}

// fileSignature computes the signature of a /files URL, as the SDK does.
func fileSignature(path, operation, user, token, expiration string) string {
	raw := path + ":" + operation + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return signaturePrefix + base64.RawStdEncoding.EncodeToString(sum[:])
}

// checkSignature verifies the signature of a /files request to sandbox id
// that carries no X-Access-Token, against the sandbox's access token and,
// when the URL has an expiration, the clock now. It returns "" when the
// request may pass, else why not (answered 401).
func (f *Facade) checkSignature(r *http.Request, id string, now time.Time) string {
	op := fileOperation(r)
	q := r.URL.Query()
	sig := q.Get("signature")
	if op == "" || sig == "" {
		return "missing or invalid X-Access-Token"
	}
	exp := q.Get("signature_expiration")
	if exp != "" {
		unix, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return "invalid signature_expiration"
		}
		if now.Unix() > unix {
			return "signature is already expired"
		}
	}
	want := fileSignature(q.Get("path"), op, q.Get("username"), f.token(accessTokenLabel, id), exp)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return "invalid signature"
	}
	return ""
}

// signedBy reports whether sandbox id's access token made the signature of
// the /files request r, whatever its expiration (checkSignature judges
// that once the request is routed).
func (f *Facade) signedBy(r *http.Request, id string) bool {
	op := fileOperation(r)
	q := r.URL.Query()
	sig := q.Get("signature")
	if op == "" || sig == "" {
		return false
	}
	want := fileSignature(q.Get("path"), op, q.Get("username"), f.token(accessTokenLabel, id), q.Get("signature_expiration"))
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
}

// signedFilePage is how many running sandboxes serveSignedFile reads at a
// time: one bounded read of the store per page.
const signedFilePage = 500

// serveSignedFile serves a signed /files URL that names no sandbox, which
// is what sbx.uploadUrl() and sbx.downloadUrl() build on E2B_SANDBOX_URL:
// it goes to the running secure E2B sandbox whose access token made the
// signature, and is then checked (expiry, user) and forwarded like a
// routed one. Only the holder of a sandbox's token can sign for it, so
// the match tells nothing a routed URL's check would not; it costs one
// HMAC and one SHA-256 per running E2B sandbox of the host, and only such
// URLs pay it. A signature no sandbox made is 401, as a bad one is on
// E2B; a failed listing is 502.
//
// In cluster mode a URL no sandbox of this node made is matched against
// the ids of the other nodes' sandboxes, from memory (the access token is
// derived from the id with the cluster's key), and served by the node of
// the one that made it, which checks it again with its row. No other node
// is asked anything: an unauthenticated URL costs the cluster no I/O.
func (f *Facade) serveSignedFile(w http.ResponseWriter, r *http.Request) {
	filter := service.ListFilter{States: []service.State{service.StateRunning}, Limit: signedFilePage}
	for {
		page, next, err := f.svc.ListLocal(r.Context(), envdCaller, filter)
		if err != nil {
			f.log.ErrorContext(r.Context(), "e2b: signed file URL: list sandboxes", "err", err)
			f.envdError(w, r, http.StatusBadGateway, "unavailable", "sandboxes cannot be listed right now")
			return
		}
		for _, sb := range page {
			if sb.Annotations[annTemplate] != "" && secure(sb) && f.signedBy(r, sb.ID) {
				f.forward(w, r, sb, envdPort)
				return
			}
		}
		if next == "" {
			break
		}
		filter.PageToken = next
	}
	if f.peerIDs != nil && f.elsewhere != nil {
		for _, id := range f.peerIDs() {
			if !f.signedBy(r, id) {
				continue
			}
			// Named now as envd traffic names its sandbox, for the
			// router here and the facade of the node that has it.
			r.Header.Set(headerSandboxID, id)
			if f.elsewhere(w, r, id) {
				return // served by its node, which checks it again
			}
			r.Header.Del(headerSandboxID)
		}
	}
	f.envdError(w, r, http.StatusUnauthorized, "unauthenticated",
		"invalid signature: no running sandbox's access token signs this URL")
}
