package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// zombiesOf lists the zombie children of process pid.
func zombiesOf(pid int) []string {
	var out []string
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, tk := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, tk.Name()))
		for _, c := range strings.Fields(string(b)) {
			st, _ := os.ReadFile("/proc/" + c + "/stat")
			s := string(st)
			i := strings.LastIndexByte(s, ')')
			if i > 0 && len(s) > i+2 && s[i+2] == 'Z' {
				out = append(out, c+s[strings.IndexByte(s, '('):i+1])
			}
		}
	}
	return out
}

// TestOCIEngine_GVisorLeavesNoZombies: gVisor sandboxes created, stopped,
// started and destroyed in a loop through the API leave the daemon no
// zombie children (runsc's gofer and helpers are handed to it, a child
// subreaper, and reaped as strays).
func TestOCIEngine_GVisorLeavesNoZombies(t *testing.T) {
	t.Parallel()
	requireOCI(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("SKIP: runsc is not installed (scripts/setup-gvisor.sh installs it)")
	}
	ctx := testContext(t, 5*time.Minute)
	d := startDaemon(t, "ocireap", "--engine", "oci", "--pool", "none")
	c := newClient(d, true)
	for range 4 {
		sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage, Runtime: "gvisor", MemoryMB: 256})
		if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "echo ok"}); err != nil || res.Stdout != "ok\n" {
			t.Fatalf("exec in a gVisor sandbox: %+v, %v", res, err)
		}
		if _, err := c.StopSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.StartSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if err := c.DestroySandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	pid := d.PID()
	if err := testenv.Poll(ctx, 30*time.Second, func() error {
		if z := zombiesOf(pid); len(z) > 0 {
			return fmt.Errorf("zombie children of the daemon (pid %s): %v", strconv.Itoa(pid), z)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
