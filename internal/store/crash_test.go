package store_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/store"
)

// crashChildEnv names the database TestCrashChild writes to; unset, it skips.
const crashChildEnv = "SANDBOXD_STORE_CRASH_CHILD_DB"

// committedPrefix marks a line the child prints after a write committed.
const committedPrefix = "committed "

// TestCrashChild is the child half of TestCrash_SIGKILLKeepsCommittedWrites: it writes until
// it is killed and prints each id after its transaction committed.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("helper process for TestCrash_SIGKILLKeepsCommittedWrites")
	}
	ctx := context.Background()
	s, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		sb := store.Sandbox{ID: sandboxID(i), Name: fmt.Sprintf("n%d", i), Image: "debian", State: store.StateRunning}
		if err := s.CreateSandbox(ctx, &sb); err != nil {
			fmt.Fprintln(os.Stderr, "create:", err)
			os.Exit(2)
		}
		// One port per sandbox: a second table, and a transaction with a follow-up read.
		if _, _, err := s.ReserveHostPort(ctx, tcp(sb.ID, 22), store.PortRange{Lo: 1024, Hi: 65535}, nil); err != nil {
			fmt.Fprintln(os.Stderr, "reserve:", err)
			os.Exit(2)
		}
		fmt.Fprintln(out, committedPrefix+sb.ID)
		out.Flush()
	}
}

func TestCrash_SIGKILLKeepsCommittedWrites(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("running as the crash child")
	}
	const wantIDs = 500 // ~1000 transactions: enough to cross a WAL auto-checkpoint
	path := filepath.Join(t.TempDir(), "crash.db")

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var committed []string
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if id, ok := strings.CutPrefix(lines.Text(), committedPrefix); ok {
			committed = append(committed, id)
		}
		if len(committed) == wantIDs {
			// Kill mid-work: the child is inside its next transaction or about to be.
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	// Ids already in the pipe were committed too.
	for lines.Scan() {
		if id, ok := strings.CutPrefix(lines.Text(), committedPrefix); ok {
			committed = append(committed, id)
		}
	}
	err = cmd.Wait()
	if len(committed) < wantIDs {
		t.Fatalf("child reported %d commits before exiting (%v); stderr:\n%s", len(committed), err, stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child exited with %v, want killed by SIGKILL; stderr:\n%s", err, stderr.String())
	}

	s, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer s.Close()
	var integrity string
	if err := store.ReaderForTest(s).QueryRowContext(t.Context(), "PRAGMA integrity_check").Scan(&integrity); err != nil || integrity != "ok" {
		t.Fatalf("integrity_check = %q, %v; want ok", integrity, err)
	}
	for _, id := range committed {
		if _, err := s.GetSandbox(t.Context(), id); err != nil {
			t.Fatalf("committed sandbox %s: %v", id, err)
		}
		if ports, err := s.ListExposedPorts(t.Context(), id); err != nil || len(ports) != 1 {
			t.Fatalf("committed port of %s: %v, %v", id, ports, err)
		}
	}
	t.Logf("%d committed writes survived SIGKILL", len(committed))
}
