package e2e_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/testenv"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// TestCLI_ShellUnderPTY is the interactive-shell acceptance test: `sbx
// shell` runs on a pseudo-terminal as a person's terminal would be, puts
// it in raw mode, follows a resize, runs what is typed, exits with the
// shell's status, and leaves the terminal as it found it.
func TestCLI_ShellUnderPTY(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	sb := createTestSandbox(ctx, t, newClient(d, true), sandboxd.CreateRequest{Image: baseImage})

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close() // held open by the test so its mode can be read after sbx exits
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	before := termios(t, tty)
	if before.Lflag&unix.ICANON == 0 {
		t.Fatal("a fresh pty should start in canonical mode")
	}

	cmd := sbxCommand(ctx, d, t.TempDir(), "shell", sb.ID)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true} // the pty is sbx's controlling terminal
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sbx shell: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	reaped := false
	defer func() { // on a failure path, never leave sbx behind
		if !reaped {
			cmd.Process.Kill()
			<-exited
		}
	}()
	term := newScreen(ptmx)

	// sbx switches the terminal to raw mode once the remote shell runs.
	if err := waitFor(testenv.Deadline, func() bool { return termios(t, tty).Lflag&(unix.ICANON|unix.ECHO) == 0 }); err != nil {
		t.Fatalf("terminal never went raw: %v\nscreen: %q", err, term.String())
	}

	// A resize of the local terminal reaches the remote one (SIGWINCH →
	// resize frame). Ask until it shows: the signal and the frame are
	// asynchronous.
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(testenv.Deadline, func() bool {
		term.Type(t, "stty size\r")
		return term.WaitFor(outputLine("30 100"), time.Second) == nil
	}); err != nil {
		t.Errorf("remote terminal never reported 30 rows × 100 columns after the resize\nscreen: %q", term.String())
	}

	term.Type(t, "echo $((6*7)); exit\r")
	if err := term.WaitFor(outputLine("42"), testenv.Deadline); err != nil {
		t.Fatalf("%v\nscreen: %q", err, term.String())
	}
	select {
	case err := <-exited:
		reaped = true
		if err != nil {
			t.Errorf("sbx shell exited with %v; want 0 (the shell's status)\nscreen: %q", err, term.String())
		}
	case <-time.After(testenv.Deadline):
		t.Fatalf("sbx shell did not exit %v after `exit`\nscreen: %q", testenv.Deadline, term.String())
	}

	after := termios(t, tty)
	if diff := termiosDiff(before, after); diff != "" {
		t.Errorf("terminal not restored after sbx shell exited: %s", diff)
	}
}

// termios reads f's terminal attributes.
func termios(t *testing.T, f *os.File) *unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatalf("TCGETS: %v", err)
	}
	return tio
}

// termiosDiff describes how b's modes differ from a's, or returns "".
func termiosDiff(a, b *unix.Termios) string {
	var diffs []string
	for _, f := range []struct {
		name string
		a, b uint32
	}{
		{"iflag", a.Iflag, b.Iflag}, {"oflag", a.Oflag, b.Oflag},
		{"cflag", a.Cflag, b.Cflag}, {"lflag", a.Lflag, b.Lflag},
	} {
		if f.a != f.b {
			diffs = append(diffs, fmt.Sprintf("%s %#o → %#o", f.name, f.a, f.b))
		}
	}
	if a.Cc != b.Cc {
		diffs = append(diffs, "control characters changed")
	}
	return strings.Join(diffs, ", ")
}

// screen collects everything written to a pty master.
type screen struct {
	ptmx *os.File

	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newScreen(ptmx *os.File) *screen {
	s := &screen{ptmx: ptmx, changed: make(chan struct{})}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := ptmx.Read(b)
			s.mu.Lock()
			s.buf.Write(b[:n])
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			if err != nil {
				return // the test closed the pty
			}
		}
	}()
	return s
}

// Type writes keystrokes to the terminal.
func (s *screen) Type(t *testing.T, keys string) {
	t.Helper()
	if _, err := s.ptmx.WriteString(keys); err != nil {
		t.Fatalf("type %q: %v", keys, err)
	}
}

// outputLine matches line as a whole line of terminal output: after a
// line start (bash ends its bracketed-paste escape with \r) and before
// CR LF. A prompt or the echo of typed keys never matches it.
func outputLine(line string) *regexp.Regexp {
	return regexp.MustCompile(`[\r\n]` + regexp.QuoteMeta(line) + `\r\n`)
}

// WaitFor waits until the output matches want.
func (s *screen) WaitFor(want *regexp.Regexp, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		found, changed := want.Match(s.buf.Bytes()), s.changed
		s.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("no output matching %q within %v", want, timeout)
		}
	}
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
