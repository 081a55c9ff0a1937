package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"
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
