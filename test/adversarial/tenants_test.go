package adversarial_test

import (
	"testing"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Another tenant's sandbox is invisible: by id it is not found for every
// call, exactly like a sandbox that does not exist, and it keeps working.
func TestTenants_AnotherTenantsSandboxIsNotFound(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "tenants")
	alice, mallory := tenant(t, d, "alice"), tenant(t, d, "mallory")
	sb := sandbox(t, alice, sandboxd.CreateRequest{})
	watch := watchBystander(t, d)

	ctx := t.Context()
	const missing = "sb-00000000000000ff"
	for _, id := range []string{sb.ID, missing} {
		if _, err := mallory.GetSandbox(ctx, id); !isNotFound(err) {
			t.Errorf("get %s as another tenant: %v, want 404", id, err)
		}
		if _, err := mallory.Exec(ctx, id, sandboxd.ExecRequest{Cmd: []string{"true"}}); !isNotFound(err) {
			t.Errorf("exec in %s as another tenant: %v, want 404", id, err)
		}
		if err := mallory.DestroySandbox(ctx, id); !isNotFound(err) {
			t.Errorf("destroy %s as another tenant: %v, want 404", id, err)
		}
	}
	if res := sh(t, alice, sb.ID, "echo still mine"); res.Stdout != "still mine\n" {
		t.Errorf("owner's exec after the attempts: %+v", res)
	}
	if err := watch.Stop(); err != nil {
		t.Error(err)
	}
}
