package forward

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The node headers of a forwarded request.
const (
	// HeaderNode names the node that sent the request.
	HeaderNode = "X-Sandboxd-Node"
	// HeaderAuth carries the sender's MAC: "t=<unix seconds>,mac=<hex>".
	HeaderAuth = "X-Sandboxd-Node-Auth"
)

// nodeHeaderPrefix is what every node header starts with; StripNodeHeaders
// removes them all, including ones a later version may add.
const nodeHeaderPrefix = "X-Sandboxd-Node"

// MaxSkew is how far a MAC's timestamp may be from the verifier's clock,
// either way. Nodes run NTP; a minute is far beyond their drift and still
// short enough that a captured header set is soon useless.
const MaxSkew = 60 * time.Second

// maxAuthLen bounds the auth header Verify parses: "t=" + 20 digits +
// ",mac=" + 64 hex digits is 91 bytes.
const maxAuthLen = 128

// maxNodeLen bounds a node id in a header (a DNS name's length).
const maxNodeLen = 253

// Signer signs and verifies node-to-node requests with the cluster secret.
// The zero Clock is time.Now. A Signer with an empty Secret verifies
// nothing.
type Signer struct {
	Node   string // this node's id: the sender of what Sign signs
	Secret []byte // the cluster secret, shared by every node
	Clock  func() time.Time
}

func (s Signer) now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

// Sign sets HeaderNode to s.Node and HeaderAuth to
// HMAC-SHA256(secret, node|unix-seconds|method|request-URI), where the
// request URI is r.URL.RequestURI(): what a client writes on the request
// line. Call it on an outgoing request after its URL is final. The body
// and the other headers are not covered (see the package documentation).
func (s Signer) Sign(r *http.Request) {
	t := s.now().Unix()
	r.Header.Set(HeaderNode, s.Node)
	r.Header.Set(HeaderAuth, "t="+strconv.FormatInt(t, 10)+",mac="+hex.EncodeToString(s.mac(s.Node, t, r.Method, r.URL.RequestURI())))
}

// Verify reports whether r carries a valid node MAC, and from which node.
// It checks, in constant time for the MAC, that: each node header appears
// once; the sender is not empty, not this node (a node never forwards to
// itself, so a MAC naming this node is a replay or a misconfiguration) and
// holds no '|'; the timestamp is within MaxSkew of the clock; and the MAC
// over the sender, the timestamp, r.Method and the request URI (r.RequestURI
// as received, else r.URL.RequestURI()) is right. It reads nothing but
// headers and changes nothing.
func (s Signer) Verify(r *http.Request) (from string, ok bool) {
	if len(s.Secret) == 0 {
		return "", false
	}
	nodes, auths := r.Header.Values(HeaderNode), r.Header.Values(HeaderAuth)
	if len(nodes) != 1 || len(auths) != 1 {
		return "", false
	}
	from, auth := nodes[0], auths[0]
	if from == "" || from == s.Node || len(from) > maxNodeLen || strings.Contains(from, "|") ||
		len(auth) > maxAuthLen || strings.Contains(r.Method, "|") {
		return "", false
	}
	ts, macHex, found := strings.Cut(auth, ",")
	if !found {
		return "", false
	}
	ts, okT := strings.CutPrefix(ts, "t=")
	macHex, okM := strings.CutPrefix(macHex, "mac=")
	if !okT || !okM {
		return "", false
	}
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	if !s.checkMAC(ts, macHex, func(t int64) []byte { return s.mac(from, t, r.Method, uri) }) {
		return "", false
	}
	return from, true
}

// checkMAC reports whether macHex is the hex of want(t) for the decimal
// unix seconds ts, and t is within MaxSkew of the clock: what the request
// MAC and the TLS preamble check alike. The MAC is compared in constant
// time.
func (s Signer) checkMAC(ts, macHex string, want func(t int64) []byte) bool {
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	got, err := hex.DecodeString(macHex)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	if skew := s.now().Sub(time.Unix(t, 0)); skew > MaxSkew || skew < -MaxSkew {
		return false
	}
	return hmac.Equal(got, want(t))
}

func (s Signer) mac(node string, t int64, method, uri string) []byte {
	h := hmac.New(sha256.New, s.Secret)
	h.Write([]byte(node))
	h.Write([]byte{'|'})
	h.Write(strconv.AppendInt(nil, t, 10))
	h.Write([]byte{'|'})
	h.Write([]byte(method))
	h.Write([]byte{'|'})
	h.Write([]byte(uri))
	return h.Sum(nil)
}

// StripNodeHeaders removes every header whose name starts with
// X-Sandboxd-Node (any case), so nothing downstream can read a claim that
// was not verified.
func StripNodeHeaders(h http.Header) {
	for k := range h {
		if len(k) >= len(nodeHeaderPrefix) && strings.EqualFold(k[:len(nodeHeaderPrefix)], nodeHeaderPrefix) {
			delete(h, k)
		}
	}
}
