package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Labels separate the HMACs derived from the one key.
const (
	accessTokenLabel  = "e2b-envd-access-token\x00"
	trafficTokenLabel = "e2b-traffic-access-token\x00"
)

// token derives sandbox id's token of the kind label names. It is never
// stored: the key and the id recompute it.
func (f *Facade) token(label, id string) string {
	m := hmac.New(sha256.New, f.tokenKey)
	m.Write([]byte(label))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// validToken compares got with sandbox id's token in constant time.
func (f *Facade) validToken(label, id, got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(f.token(label, id))) == 1
}

// secure reports whether envd traffic to sb needs its access token: always,
// except for a sandbox created through v1 with secure=false.
func secure(sb service.Sandbox) bool { return sb.Annotations[annSecure] != "false" }

// private reports whether traffic to sb's other ports needs its traffic
// access token (network.allowPublicTraffic=false at create).
func private(sb service.Sandbox) bool { return sb.Annotations[annPrivate] == "true" }

// accessTokenFor is the envd access token to hand out for sb ("" when it
// is not secure).
func (f *Facade) accessTokenFor(sb service.Sandbox) string {
	if !secure(sb) {
		return ""
	}
	return f.token(accessTokenLabel, sb.ID)
}

// trafficTokenFor is the traffic access token of sb (nil when its ports are
// public).
func (f *Facade) trafficTokenFor(sb service.Sandbox) *string {
	if !private(sb) {
		return nil
	}
	t := f.token(trafficTokenLabel, sb.ID)
	return &t
}
