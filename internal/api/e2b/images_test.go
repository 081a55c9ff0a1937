package e2b_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestBaseImage_PasswordlessSudoForUser: as in E2B's base template, user
// runs sudo without a password, under the runtime's hardened defaults
// (runtime.SandboxCapabilities, no network), and sudo prints nothing on
// stderr (the sandbox's hostname resolves without a network).
func TestBaseImage_PasswordlessSudoForUser(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"})
	res, err := h.svc.Exec(t.Context(), service.Caller{Admin: true}, c.SandboxID, service.ExecRequest{
		Command: "id -un && sudo -n id -u && sudo -n sh -c 'echo root-only > /root/sudo-test && cat /root/sudo-test'",
		User:    "user",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Stdout), "user\n0\nroot-only\n"; res.ExitCode != 0 || got != want || len(res.Stderr) != 0 {
		t.Errorf("sudo as user: exit %d, stdout %q (want %q), stderr %q (want none)", res.ExitCode, got, want, res.Stderr)
	}
}
