package service_test

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service"
)

// TestPool_ClaimedGVisorSandboxKeepsItsTokenAndEnvAcrossAHibernate: a
// gVisor sandbox claimed from the warm pool (its agent handed its own
// token and its env and secret env by the claim) is hibernated and
// resumed. Its agent must take its own token after the resume, refuse
// the one it booted with (the pool's), and its processes must still get
// the env the claim handed over. On the old agent each wake from a park
// served a new handler built from the boot token: the claimed sandbox's
// own token was refused (401) and the pool's boot token taken again.
func TestPool_ClaimedGVisorSandboxKeepsItsTokenAndEnvAcrossAHibernate(t *testing.T) {
	t.Parallel()
	h := newHibernateHarness(t, harnessOptions{pool: []service.PoolTarget{
		{PoolClass: service.PoolClass{Image: busybox, Runtime: service.RuntimeGVisor}, Size: 1},
	}})
	runPool(t, h)
	waitReady(t, h, 1)
	ctx := t.Context()
	alice := service.Caller{Owner: "alice"}

	c, err := h.svc.CreateSandbox(ctx, service.CreateRequest{
		Owner: "alice", Image: busybox, Runtime: service.RuntimeGVisor, Timeout: time.Hour,
		Env: map[string]string{"PLAIN": "alice"}, SecretEnv: map[string]string{"SECRET": "alice-secret"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.svc.Destroy(t.Context(), admin, c.ID); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}()
	if !hit(c) {
		t.Fatalf("the create was not served from the pool: %+v", c.Timings)
	}
	row := mustRow(t, h, c.ID)
	ad := secrets.AssociatedData("sandbox", c.ID, "agent-token")
	own, err := h.keyring.Open(row.AgentTokenSealed, ad)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := h.keyring.Open(row.BootTokenSealed, ad)
	if err != nil {
		t.Fatal(err)
	}
	if hb, err := h.svc.Hibernate(ctx, alice, c.ID); err != nil || hb.Stopped {
		t.Fatalf("hibernate the claimed sandbox: %+v, %v; want it hibernated", hb, err)
	}
	if _, err := h.svc.Resume(ctx, alice, c.ID); err != nil {
		t.Fatalf("resume the claimed sandbox: %v", err)
	}
	if err := checkToken(h, c.ID, string(own)); err != nil {
		t.Errorf("after a hibernate and resume, the claimed agent refuses its own token: %v", err)
	}
	if err := checkToken(h, c.ID, string(boot)); err == nil {
		t.Errorf("after a hibernate and resume, the claimed agent takes the pool's boot token again")
	}
	res, err := h.svc.Exec(ctx, alice, c.ID, service.ExecRequest{Command: `echo "${PLAIN-none} ${SECRET-none}"`})
	if err != nil {
		t.Errorf("exec in the claimed sandbox after its resume: %v", err)
	} else if got := string(res.Stdout); got != "alice alice-secret\n" {
		t.Errorf("after its resume the claimed sandbox's processes see %q; want the claim's env", got)
	}
}
