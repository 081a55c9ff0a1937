package reaper_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent/server/process/reaper"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestReaper_OrphansAndTrackedChildren makes this test process a child
// subreaper (so orphans of its children are re-parented to it, as they are
// to PID 1 in a sandbox), then checks that the Reaper collects an orphan
// and still hands a tracked child's status to its starter.
func TestReaper_OrphansAndTrackedChildren(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	r := reaper.New(nil)
	done := make(chan struct{})
	go func() { _ = r.Run(t.Context()); close(done) }()
	t.Cleanup(func() { <-done })

	// The shell prints the orphan's pid and exits; the orphan outlives it.
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.2 & echo $!; exit 5")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	exits, err := r.Start(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	orphan, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatalf("orphan pid %q: %v", buf[:n], err)
	}
	select {
	case ws := <-exits:
		if !ws.Exited() || ws.ExitStatus() != 5 {
			t.Errorf("tracked child: status %v, want exit 5", ws)
		}
	case <-time.After(testenv.Deadline):
		t.Fatal("tracked child's status never arrived")
	}
	// The orphan exits after 0.2 s; the reaper must remove it entirely.
	testenv.WaitFor(t, fmt.Sprintf("orphan %d to be reaped", orphan), func() error {
		if _, err := os.Stat("/proc/" + strconv.Itoa(orphan)); os.IsNotExist(err) {
			return nil
		}
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(orphan) + "/stat")
		return fmt.Errorf("still in /proc: %s", stat)
	})
}

func TestOwn_ReportsExit(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "kill -TERM $$")
	exits, err := reaper.Own{}.Start(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ws := <-exits; !ws.Signaled() || ws.Signal() != unix.SIGTERM {
		t.Errorf("status %v, want killed by SIGTERM", ws)
	}
}
