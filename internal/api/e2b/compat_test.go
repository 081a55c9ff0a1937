package e2b_test

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestSDKCompat runs the Node SDK suite (test/compat/e2b, helper-owned) against
// this package's facade over the real service, without the daemon:
//
//	E2B_COMPAT=1 go test ./internal/api/e2b/ -run TestSDKCompat -timeout 30m -v
func TestSDKCompat(t *testing.T) {
	if os.Getenv("E2B_COMPAT") == "" {
		t.Skip("set E2B_COMPAT=1 to run the E2B SDK suite (needs node)")
	}
	h := newHarness(t, harnessOptions{realClock: true})
	go h.svc.RunBackground(t.Context(), 500*time.Millisecond, time.Minute)
	cmd := exec.CommandContext(t.Context(), "../../../test/compat/e2b/run.sh", os.Args[len(os.Args):]...)
	cmd.Env = append(os.Environ(), "SANDBOXD_URL="+h.url, "SANDBOXD_TOKEN="+h.admin)
	if p := os.Getenv("E2B_COMPAT_PATTERN"); p != "" {
		cmd.Args = append(cmd.Args, "--test-name-pattern="+p)
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
}
