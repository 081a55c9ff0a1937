package service_test

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service"
)

// TestSnapshotWithMemory_RestoredSandboxKeepsItsOwnTokenAcrossAHibernate:
// a sandbox created from a snapshot with memory is hibernated and resumed
// (as --pause-max, memory pressure, E2B's autoPause with keepMemory and
// sbx hibernate do). Its agent must take its own token after the resume,
// and never the source's. Before the fix, the agent's park and wake
// (cmd/toolboxd: a new server with cfg.token, the token it was booted
// with) drops the token the create handed it: after the resume the
// restored agent takes the source's token (sealed in the snapshot) again
// and refuses the sandbox's own, so every exec and file call of the
// sandbox fails (401 from the agent).
func TestSnapshotWithMemory_RestoredSandboxKeepsItsOwnTokenAcrossAHibernate(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{})
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}
	g, snap := counterSnapshot(t, h)
	srcTok, err := h.keyring.Open(mustRow(t, h, g.ID).AgentTokenSealed, secrets.AssociatedData("sandbox", g.ID, "agent-token"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{Owner: "alice", Template: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	ownTok, err := h.keyring.Open(mustRow(t, h, c.ID).AgentTokenSealed, secrets.AssociatedData("sandbox", c.ID, "agent-token"))
	if err != nil {
		t.Fatal(err)
	}
	if hb, err := h.svc.Hibernate(ctx, alice, c.ID); err != nil || hb.Stopped {
		t.Fatalf("hibernate the restored sandbox: %+v, %v; want it hibernated", hb, err)
	}
	if _, err := h.svc.Resume(ctx, alice, c.ID); err != nil {
		t.Fatalf("resume the restored sandbox: %v", err)
	}
	if err := checkToken(h, c.ID, string(ownTok)); err != nil {
		t.Errorf("after a hibernate and resume, the restored agent refuses its own token: %v", err)
	}
	if err := checkToken(h, c.ID, string(srcTok)); err == nil {
		t.Errorf("after a hibernate and resume, the restored agent takes the source's token again")
	}
	res, err := h.svc.Exec(ctx, alice, c.ID, service.ExecRequest{Command: "cat /tmp/c"})
	if err != nil {
		t.Errorf("exec in the restored sandbox after its resume: %v", err)
	} else if strings.TrimSpace(string(res.Stdout)) == "" {
		t.Errorf("exec in the restored sandbox after its resume: %+v", res)
	}
	for _, id := range []string{g.ID, c.ID} {
		if err := h.svc.Destroy(ctx, alice, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.svc.DeleteTemplate(ctx, alice, snap.ID); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, h)
}
