package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps_NoAgentServer: the daemon links the agent client (package
// agent) and the tunnel, never the in-sandbox agent server (package
// agent/server and its process, filesystem, files and account packages),
// which only toolboxd runs.
func TestDeps_NoAgentServer(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/sandboxd/sandboxd/cmd/sandboxd").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const server = "github.com/sandboxd/sandboxd/internal/agent/server"
	var sawClient bool
	for dep := range strings.Lines(string(out)) {
		dep = strings.TrimSpace(dep)
		if dep == server || strings.HasPrefix(dep, server+"/") {
			t.Errorf("cmd/sandboxd links %s, the in-sandbox agent server", dep)
		}
		sawClient = sawClient || dep == "github.com/sandboxd/sandboxd/internal/agent"
	}
	if !sawClient {
		t.Fatalf("cmd/sandboxd does not link the agent client; is the list right?\n%s", out)
	}
}
