package docker

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// The agent token is not in the container's environment (the kernel
// shows a process's exec-time environment in /proc/<pid>/environ for its
// whole life, and the agent had to execute itself a second time to drop
// it): the daemon hands it to the agent with its socket at every boot
// (boot.go; under gVisor in a file the agent removes). Start needs it
// again after a stop, a daemon restart or a host reboot, so the container
// carries it in a label, sealed: labels are not visible inside the
// sandbox, but the engine shows them to more readers than its
// configuration (docker ps, events, monitoring exporters). The key is
// derived from Options.NameKey, the node's secret (without one, as in
// tests and benchmarks, the seal hides nothing from whoever reads this
// file); Commit blanks the label like every other (images.go).
//
// A container without the label (one created before, whose environment
// still carries the token) boots with no token handed over: its agent
// takes the one in its environment (cmd/toolboxd's token.go).
const labelAgentToken = runtime.LabelPrefix + "agent-token"

// tokenAEAD is the cipher the token label is sealed with.
func (r *Runtime) tokenAEAD() (cipher.AEAD, error) {
	m := hmac.New(sha256.New, r.opts.NameKey)
	m.Write([]byte("sandboxd docker runtime: agent token label"))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealToken is the label value carrying token for sandbox id.
func (r *Runtime) sealToken(id, token string) (string, error) {
	aead, err := r.tokenAEAD()
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce) // never fails (crypto/rand contract)
	return base64.RawStdEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(token), []byte(id))), nil
}

// openToken is the token a label value made by sealToken for id carries;
// nil for an empty value (no label).
func (r *Runtime) openToken(id, sealed string) ([]byte, error) {
	if sealed == "" {
		return nil, nil
	}
	b, err := base64.RawStdEncoding.DecodeString(sealed)
	if err != nil {
		return nil, fmt.Errorf("agent token label: %w", err)
	}
	aead, err := r.tokenAEAD()
	if err != nil {
		return nil, err
	}
	if len(b) < aead.NonceSize() {
		return nil, errors.New("agent token label: too short")
	}
	token, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], []byte(id))
	if err != nil {
		return nil, fmt.Errorf("agent token label: %w (another node key?)", err)
	}
	return token, nil
}
