package service

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"fmt"

	"golang.org/x/crypto/ssh"
)

// newSandboxID returns "sb-" and 16 lowercase hex digits: a DNS label, so
// it also names the container and the preview host.
func newSandboxID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "sb-" + hex.EncodeToString(b[:])
}

// newAgentToken returns the secret the sandbox's agent requires on every
// request. It never leaves the daemon except into the agent's environment.
func newAgentToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sshKeyPair is a sandbox's Ed25519 key pair in OpenSSH encodings.
type sshKeyPair struct {
	Public  string // "ssh-ed25519 AAAA…"
	Private string // PEM "OPENSSH PRIVATE KEY"; only in the create response
}

func newSSHKeyPair(comment string) (sshKeyPair, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return sshKeyPair{}, fmt.Errorf("generate ed25519 key: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return sshKeyPair{}, fmt.Errorf("encode ssh public key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return sshKeyPair{}, fmt.Errorf("encode ssh private key: %w", err)
	}
	authorized := ssh.MarshalAuthorizedKey(sshPub)
	return sshKeyPair{
		Public:  string(authorized[:len(authorized)-1]) + " " + comment,
		Private: string(pem.EncodeToMemory(block)),
	}, nil
}
