// Package runtimetest holds what every runtime.Runtime implementation is
// tested with: Run, the conformance suite, run against the real engine; and
// Faulty, a wrapper that fails chosen methods on demand so that callers (the
// create chain) can test their failure paths.
package runtimetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// NewSandboxID returns a fresh sandbox id in the API's format: "sb-" and 16
// lowercase hex digits.
func NewSandboxID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand contract)
	return "sb-" + hex.EncodeToString(b[:])
}

// AgentModule is the agent's package, built by BuildAgent.
const AgentModule = "github.com/sandboxd/sandboxd/cmd/toolboxd"

// EnvAgentBinary names a prebuilt agent for tests to use instead of
// building one (e.g. bin/toolboxd from `make build`).
const EnvAgentBinary = "SANDBOXD_TEST_AGENT_BINARY"

// BuildAgent returns the path of a static agent binary in dir: the one named
// by $SANDBOXD_TEST_AGENT_BINARY if set, otherwise a fresh
// `CGO_ENABLED=0 go build` of cmd/toolboxd (which needs the go tool and the
// module source, as `go test` does).
func BuildAgent(ctx context.Context, dir string) (string, error) {
	if p := os.Getenv(EnvAgentBinary); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("$%s: %w", EnvAgentBinary, err)
		}
		return abs, nil
	}
	return buildStatic(ctx, filepath.Join(dir, "toolboxd"), AgentModule)
}

// FakeAgentModule is a hostile stand-in for the agent (see its package
// documentation), built by BuildFakeAgent.
const FakeAgentModule = "github.com/sandboxd/sandboxd/internal/runtime/runtimetest/fakeagent"

// BuildFakeAgent builds FakeAgentModule, static, into dir and returns its
// path. Tests run it inside a sandbox to play an attacker answering on an
// agent socket.
func BuildFakeAgent(ctx context.Context, dir string) (string, error) {
	return buildStatic(ctx, filepath.Join(dir, "fakeagent"), FakeAgentModule)
}

// buildStatic runs `CGO_ENABLED=0 go build` of pkg into out.
func buildStatic(ctx context.Context, out, pkg string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// WriteScriptAgent writes an executable shell script to dir for use as
// Spec.AgentBinary in images that have /bin/sh: a stand-in for an agent that
// never becomes ready (body "exec sleep 600") or crashes at start
// (body "echo boom >&2; exit 3"). It is not an agent.
func WriteScriptAgent(dir, name, body string) (string, error) {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		return "", err
	}
	return p, nil
}
