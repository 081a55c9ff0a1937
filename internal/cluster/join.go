package cluster

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// The join hand-over (docs/cluster.md, "Joining"): a joining node makes
// its etcd key, and POSTs a JoinRequest with a certificate request for it
// to the API of a node that holds the CA key (the node that ran `cluster
// init`). The request body is authenticated by JoinMAC, an HMAC keyed by
// a key derived from the cluster secret, in the HeaderJoinAuth header; the
// answer, a JoinResponse with the signed certificate, the CA certificate
// and the cluster's etcd endpoints, is authenticated by ResponseMAC, bound
// to the request's MAC. So:
//
//   - nobody without the secret gets a certificate (the MAC does not
//     verify: 403, nothing signed);
//   - the secret never travels: only MACs do;
//   - a captured request replayed (within MaxJoinSkew, since the body
//     carries its time) gets a certificate for the joiner's public key,
//     which is useless without the joiner's private key, and a changed
//     CSR breaks the MAC;
//   - a joiner talking to an impostor (plain HTTP between hosts) rejects
//     an answer without the response MAC, so it never trusts a CA that
//     someone without the secret chose.
const (
	// JoinPath is where a node serves join requests.
	JoinPath = "/v1/cluster/join"
	// HeaderJoinAuth carries the hex MAC of a join request or answer body.
	HeaderJoinAuth = "X-Sandboxd-Join-Auth"
	// MaxJoinBody bounds a join request's body (a CSR is ~500 bytes).
	MaxJoinBody = 16 << 10
	// MaxJoinSkew is how far a join request's time may be from the
	// signer's clock, either way (the node MAC's window).
	MaxJoinSkew = 60 * time.Second
	// joinInfo is the HKDF label of the join MAC's key: no other use of
	// the cluster secret shares it.
	joinInfo = "sandboxd/v1 cluster join"
)

// JoinRequest is what a joining node sends.
type JoinRequest struct {
	Node  string   `json:"node"`  // the joiner's node id: its certificate's common name
	Hosts []string `json:"hosts"` // the hosts of its member's client and peer addresses
	CSR   string   `json:"csr"`   // PEM certificate request for the joiner's own key
	Time  int64    `json:"time"`  // unix seconds when it was made
}

// JoinResponse is what the signing node answers.
type JoinResponse struct {
	CA        string   `json:"ca"`        // the cluster CA certificate (PEM)
	Cert      string   `json:"cert"`      // the joiner's signed certificate (PEM)
	Endpoints []string `json:"endpoints"` // etcd client URLs of the cluster
}

func joinKey(secret []byte) ([]byte, error) {
	if len(secret) < minSecret {
		return nil, fmt.Errorf("%w: cluster secret is %d bytes, want at least %d", ErrInvalidArgument, len(secret), minSecret)
	}
	return hkdf.Key(sha256.New, secret, nil, joinInfo, sha256.Size)
}

func joinMAC(secret []byte, parts ...[]byte) ([]byte, error) {
	key, err := joinKey(secret)
	if err != nil {
		return nil, err
	}
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return h.Sum(nil), nil
}

// JoinMAC is the hex MAC of a join request's body.
func JoinMAC(secret, body []byte) (string, error) {
	m, err := joinMAC(secret, []byte("request"), body)
	return hex.EncodeToString(m), err
}

// ResponseMAC is the hex MAC of the answer body to the request whose MAC
// is reqMAC.
func ResponseMAC(secret []byte, reqMAC string, body []byte) (string, error) {
	m, err := joinMAC(secret, []byte("response"), []byte(reqMAC), body)
	return hex.EncodeToString(m), err
}

// VerifyMAC reports, in constant time, whether got is want (both hex).
func VerifyMAC(got, want string) bool {
	g, err := hex.DecodeString(got)
	if err != nil || len(g) != sha256.Size {
		return false
	}
	w, err := hex.DecodeString(want)
	return err == nil && hmac.Equal(g, w)
}

// CheckJoinTime reports whether a request made at unix seconds t is within
// MaxJoinSkew of now.
func CheckJoinTime(t int64, now time.Time) bool {
	d := now.Sub(time.Unix(t, 0))
	return d <= MaxJoinSkew && d >= -MaxJoinSkew
}
