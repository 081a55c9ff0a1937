package e2b_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// needsBaseImageOfThisCheckout skips a test of the base image's contents
// when the engine's sandboxd/base:bookworm was built from another recipe
// than this checkout's (another checkout sharing the engine rebuilt it);
// `make setup` rebuilds it from this one. In CI, where setup always runs
// first, a mismatch fails instead.
func needsBaseImageOfThisCheckout(t *testing.T) {
	t.Helper()
	want, err := exec.CommandContext(t.Context(), "bash", "../../../scripts/build-images.sh", "--recipe", "base").Output()
	if err != nil {
		t.Fatalf("build-images.sh --recipe base: %v", err)
	}
	got, err := exec.CommandContext(t.Context(), "docker", "image", "inspect", "--format",
		`{{index .Config.Labels "sandboxd.recipe"}}`, "sandboxd/base:bookworm").Output()
	if err != nil {
		t.Fatalf("inspect the base image: %v", err)
	}
	if g, w := strings.TrimSpace(string(got)), strings.TrimSpace(string(want)); g != w {
		msg := "sandboxd/base:bookworm has recipe " + g + ", this checkout's is " + w + ": run scripts/build-images.sh base"
		if testenv.CI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// TestBaseImage_PasswordlessSudoForUser: as in E2B's base template, user
// runs sudo without a password, under the runtime's hardened defaults
// (runtime.SandboxCapabilities, no network), and sudo prints nothing on
// stderr (the sandbox's hostname resolves without a network).
func TestBaseImage_PasswordlessSudoForUser(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	needsBaseImageOfThisCheckout(t)
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
