package agent_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/agent/server"
)

// TestHeaderToken_MatchesServer: the client sends the token in the header
// the server checks (the two packages share no code).
func TestHeaderToken_MatchesServer(t *testing.T) {
	if agent.HeaderToken != server.HeaderToken {
		t.Fatalf("agent.HeaderToken = %q, server.HeaderToken = %q", agent.HeaderToken, server.HeaderToken)
	}
}
