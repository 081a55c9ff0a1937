// Command sbx is the command-line client of a sandboxd daemon: create
// sandboxes, run commands and shells in them, copy files, expose ports.
//
// It finds the daemon at SBX_API_URL (default http://127.0.0.1:7070) and
// authenticates with SBX_TOKEN, or else with the local admin token in
// $SBX_DATA_DIR/admin.token, or else, for a loopback URL, in
// .sandboxd/admin.token in the current directory or the nearest parent up
// to $HOME that has one (package clientconf says which files it trusts).
//
// Exit codes: 0 ok, 1 error, 2 usage error (or an argument the daemon
// rejected), 3 not found, 4 conflict, 5 unauthenticated or permission
// denied, 130 interrupted. sbx exec and sbx shell exit with the command's
// own exit code once it has run.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGHUP too: a closed terminal must still restore its mode (sbx shell).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is sbx with its arguments (without the program name) and standard
// streams; it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{
		stdin:  stdin,
		stdout: stdout,
		stderr: stderr,
		getenv: os.Getenv,
		getwd:  os.Getwd,
	}
	return c.run(ctx, args)
}
