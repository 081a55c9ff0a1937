package forward

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// PreamblePrefix starts the line a node writes before a TLS ClientHello it
// forwards to another node's SNI listener. A TLS connection starts with a
// handshake record (byte 0x16); 'S' never does, so the receiver tells the
// two apart by the first byte.
const PreamblePrefix = "SANDBOXD-PEER "

// MaxPreambleLen bounds the preamble line, its newline included. Cluster
// node ids are DNS labels (at most 63 bytes), so a line is at most
// 14 + 63 + 1 + 20 + 1 + 64 + 1 = 164 bytes; a receiver reads no further.
const MaxPreambleLen = 256

// maxLabelLen is the longest node id a preamble carries (a DNS label).
const maxLabelLen = 63

// tlsDomain starts the input of a preamble's MAC. A request's MAC input
// starts with the sender's node id, which comes from a header and so
// holds no NUL byte: neither kind of MAC can stand for the other.
const tlsDomain = "tls\x00"

// SignTLS returns the preamble line that carries a forwarded TLS
// connection for serverName (the ClientHello's SNI) to another node:
// "SANDBOXD-PEER <node> <unix seconds> <hex mac>\n", where mac is
// HMAC-SHA256 keyed by the cluster secret over
// "tls\x00<node>|<unix seconds>|<server name>". What it grants is the
// package documentation's ("The TLS preamble").
func (s Signer) SignTLS(serverName string) []byte {
	t := s.now().Unix()
	var b bytes.Buffer
	b.WriteString(PreamblePrefix)
	b.WriteString(s.Node)
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(t, 10))
	b.WriteByte(' ')
	b.WriteString(hex.EncodeToString(s.tlsMAC(s.Node, t, serverName)))
	b.WriteByte('\n')
	return b.Bytes()
}

// VerifyTLS reports whether line (a whole preamble, its newline included)
// is a valid preamble for serverName, and from which node. It refuses,
// like Verify: a Signer without a secret, a line longer than
// MaxPreambleLen or of any other shape, a sender that is empty, longer
// than a DNS label, or this node itself, a timestamp more than MaxSkew
// off the clock, and a wrong MAC (compared in constant time).
func (s Signer) VerifyTLS(line []byte, serverName string) (from string, ok bool) {
	if len(s.Secret) == 0 || len(line) > MaxPreambleLen {
		return "", false
	}
	rest, found := strings.CutPrefix(string(line), PreamblePrefix)
	if !found {
		return "", false
	}
	rest, found = strings.CutSuffix(rest, "\n")
	if !found {
		return "", false
	}
	parts := strings.Split(rest, " ")
	if len(parts) != 3 {
		return "", false
	}
	from, ts, macHex := parts[0], parts[1], parts[2]
	if from == "" || from == s.Node || len(from) > maxLabelLen || strings.ContainsAny(from, "|\x00") ||
		strings.Contains(serverName, "|") {
		return "", false
	}
	if !s.checkMAC(ts, macHex, func(t int64) []byte { return s.tlsMAC(from, t, serverName) }) {
		return "", false
	}
	return from, true
}

func (s Signer) tlsMAC(node string, t int64, serverName string) []byte {
	h := hmac.New(sha256.New, s.Secret)
	h.Write([]byte(tlsDomain))
	h.Write([]byte(node))
	h.Write([]byte{'|'})
	h.Write(strconv.AppendInt(nil, t, 10))
	h.Write([]byte{'|'})
	h.Write([]byte(serverName))
	return h.Sum(nil)
}
