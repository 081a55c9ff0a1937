package process_test

import (
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent/server/logbook"
	"github.com/sandboxd/sandboxd/internal/agent/server/process"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

func bookLines(b *logbook.Book) string {
	lines, _, _ := b.Read(0, logbook.MaxLines)
	var out []string
	for _, l := range lines {
		out = append(out, l.Source+"/"+l.Stream+":"+string(l.Text))
	}
	return strings.Join(out, "|")
}

// Every process the service starts writes its output to the sandbox's
// log, by pid, whatever started it (here an envd-style Start with no
// sandboxd header, as E2B's SDKs send): stdout and stderr apart, an
// unfinished last line ended with the process, a PTY's output as pty.
// X-Sandboxd-Log: start names the start command; off keeps a process out;
// anything else is refused.
func TestLog_EveryProcessIsInTheSandboxLog(t *testing.T) {
	t.Parallel()
	book := logbook.New(nil)
	e := newEnv(t, process.Options{Logbook: book})
	if e.svc.Logbook() != book {
		t.Fatal("Logbook() is not the book of the options")
	}
	r := e.run(t, startOpts{}, "/bin/sh", "-c", "echo out; echo err >&2; printf tail")
	pid := fmt.Sprintf("pid-%d", r.pid)
	got := bookLines(book)
	for _, want := range []string{pid + "/stdout:out", pid + "/stderr:err", pid + "/stdout:tail"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q has no %q", got, want)
		}
	}

	start := func(header string) *result {
		req := connect.NewRequest(&rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo by-" + header}}})
		req.Header().Set("X-Sandboxd-Log", header)
		st, err := e.client.Start(t.Context(), req)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		defer st.Close()
		if header == "bogus" {
			if st.Receive() || connect.CodeOf(st.Err()) != connect.CodeInvalidArgument {
				t.Errorf("X-Sandboxd-Log: bogus: %v; want invalid_argument", st.Err())
			}
			return nil
		}
		return collect(t, events(st))
	}
	start("start")
	start("off")
	start("bogus")
	got = bookLines(book)
	if !strings.Contains(got, "start/stdout:by-start") || strings.Contains(got, "by-off") || strings.Contains(got, "by-bogus") {
		t.Errorf("log %q: want the start command's line as start's, and no other", got)
	}

	r = e.run(t, startOpts{pty: &rpc.PTY{Size: &rpc.PTY_Size{Cols: 80, Rows: 24}}}, "/bin/sh", "-c", "echo on-a-tty")
	if want := fmt.Sprintf("pid-%d/pty:on-a-tty\r", r.pid); !strings.Contains(bookLines(book), want) {
		t.Errorf("log %q has no %q", bookLines(book), want)
	}
}
