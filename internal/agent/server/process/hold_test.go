package process_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// procState is the state letter of /proc/<pid>/stat ("t": tracing stop).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return err.Error()
	}
	// pid (comm) state ...: comm may hold spaces, the state follows ") ".
	_, rest, _ := strings.Cut(string(b), ") ")
	state, _, _ := strings.Cut(rest, " ")
	return state
}

// atExecRecorder records, for every AtExec call, the child's state and
// the program it is about to run.
type atExecRecorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *atExecRecorder) atExec(pid int) {
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, procState(pid)+" "+filepath.Base(exe))
}

func (r *atExecRecorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// TestAtExec_HoldsTheChildAtItsExec: AtExec sees the child stopped, with
// its program already exec'd and not yet run; the program then runs as
// usual, with a pipe and with a terminal.
func TestAtExec_HoldsTheChildAtItsExec(t *testing.T) {
	var rec atExecRecorder
	e := newEnv(t, process.Options{AtExec: rec.atExec})
	if res := e.run(t, startOpts{}, "/bin/sh", "-c", "echo ran"); res.stdout.String() != "ran\n" || res.end.GetExitCode() != 0 {
		t.Errorf("held child: stdout %q, end %v", res.stdout.String(), res.end)
	}
	if res := e.run(t, startOpts{pty: &rpc.PTY{Size: &rpc.PTY_Size{Cols: 80, Rows: 24}}}, "/bin/sh", "-c", "echo ran"); !strings.Contains(res.pty.String(), "ran") {
		t.Errorf("held terminal child: output %q", res.pty.String())
	}
	want := []string{"t " + filepath.Base(resolve(t, "/bin/sh")), "t " + filepath.Base(resolve(t, "/bin/sh"))}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Errorf("AtExec saw %q, want %q (stopped, program exec'd)", got, want)
	}
}

// TestAtExec_SetuidProgramsAreNotHeld: a traced exec would drop a setuid
// bit, so such a program runs unheld, and AtExec is still called.
func TestAtExec_SetuidProgramsAreNotHeld(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a setuid copy of a program")
	}
	var rec atExecRecorder
	e := newEnv(t, process.Options{AtExec: rec.atExec})
	prog := filepath.Join(e.dir, "suid-sleep")
	b, err := os.ReadFile(resolve(t, "/bin/sleep"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(prog, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if res := e.run(t, startOpts{}, prog, "0.2"); res.end.GetExitCode() != 0 {
		t.Fatalf("setuid program: end %v, stderr %q", res.end, res.stderr.String())
	}
	if got := rec.got(); len(got) != 1 || strings.HasPrefix(got[0], "t ") {
		t.Errorf("AtExec saw %q, want one call on a child that is not stopped", got)
	}
}

func resolve(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
