package daytona_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestSDKCompat runs the Node SDK suite (test/compat/daytona: the real
// @daytonaio/sdk, 42 tests) against the daemon with this facade mounted:
//
//	DAYTONA_COMPAT=1 go test ./internal/api/daytona/ -run TestSDKCompat -timeout 30m -v
//
// DAYTONA_COMPAT_PATTERN narrows it to the tests whose names match.
func TestSDKCompat(t *testing.T) {
	if os.Getenv("DAYTONA_COMPAT") == "" {
		t.Skip("set DAYTONA_COMPAT=1 to run the Daytona SDK suite (needs node)")
	}
	s := need(t)
	cmd := exec.CommandContext(t.Context(), "../../../test/compat/daytona/run.sh")
	cmd.Env = append(os.Environ(), "SANDBOXD_URL="+s.URL, "SANDBOXD_TOKEN="+s.Admin)
	if p := os.Getenv("DAYTONA_COMPAT_PATTERN"); p != "" {
		cmd.Args = append(cmd.Args, "--test-name-pattern="+p)
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
}
