package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

func (c *cli) execCmd() *cobra.Command {
	var (
		env         []string
		workdir     string
		user        string
		interactive bool
	)
	cmd := &cobra.Command{
		Use:   "exec <id|name> [-e K=V]… [-w DIR] [--user USER] [-i] -- CMD [ARG…]",
		Short: "Run a command in a sandbox, streaming its output",
		Long: `Run a command in a sandbox. Its output streams as it is produced; sbx exits
with the command's exit code. Standard input is forwarded when it is not a
terminal, or with -i. With --json, output is collected and printed at the
end as {"exit_code", "stdout", "stderr", "duration_ms", "truncated"}.

Interrupting sbx (Ctrl-C) closes the stream, which kills the command.`,
		Args: args(2, -1, "a sandbox id or name, then the command (after --)"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return usagef(cmd, "want one sandbox id or name before --, got %d arguments", dash)
			}
			envMap, err := parseKV(cmd, "env", env)
			if err != nil {
				return err
			}
			req := sandboxd.StreamRequest{Cmd: a[1:], Env: envMap, Cwd: workdir, User: user}
			forward := interactive || !isTerminal(c.stdin)
			return c.runExec(cmd.Context(), a[0], req, forward)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `K=V` (repeatable)")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory")
	f.StringVar(&user, "user", "", "user to run as")
	f.BoolVarP(&interactive, "interactive", "i", false, "forward standard input even from a terminal")
	return cmd
}

// runExec runs req in the sandbox ref, streaming output to stdout and
// stderr (or collecting it for --json). With forward, stdin is copied to
// the command; otherwise the command's stdin is closed at once.
func (c *cli) runExec(ctx context.Context, ref string, req sandboxd.StreamRequest, forward bool) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	id, err := resolve(ctx, cl, ref)
	if err != nil {
		return err
	}
	var outBuf, errBuf bytes.Buffer
	req.Stdout, req.Stderr = c.stdout, c.stderr
	if c.jsonOut {
		req.Stdout, req.Stderr = &outBuf, &errBuf
	}
	start := time.Now()
	p, err := cl.ExecStream(ctx, id, req)
	if err != nil {
		return err
	}
	defer p.Close()
	if forward {
		// Not waited for: a read from a terminal or an idle pipe cannot be
		// interrupted, and the process is leaving anyway.
		go func() {
			if _, err := io.Copy(p, c.stdin); err == nil {
				p.CloseStdin()
			}
		}()
	} else if err := p.CloseStdin(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	code, err := p.Wait()
	if err != nil {
		return err
	}
	if c.jsonOut {
		res := sandboxd.ExecResult{ExitCode: code, Stdout: outBuf.String(), Stderr: errBuf.String(), Duration: time.Since(start)}
		if err := c.printJSON(res); err != nil {
			return err
		}
	}
	if code != 0 {
		return exitStatus{code}
	}
	return nil
}

// shellCommand starts the best login shell the image has.
const shellCommand = `if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l`

func (c *cli) shellCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "shell <id|name> [-- CMD [ARG…]]",
		Short: "Open an interactive shell (or run CMD) on a terminal in a sandbox",
		Long: `Open an interactive shell in a sandbox, on a terminal sized like yours.
Your terminal is in raw mode until the shell exits: keys such as Ctrl-C and
Ctrl-D go to the sandbox. sbx exits with the shell's exit code.`,
		Args: args(1, -1, "a sandbox id or name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if c.jsonOut {
				return usagef(cmd, "--json does not apply to an interactive shell; use 'sbx exec --json'")
			}
			in, ok := c.stdin.(*os.File)
			if !ok || !term.IsTerminal(int(in.Fd())) {
				return usagef(cmd, "standard input is not a terminal; use 'sbx exec' to run a command")
			}
			return c.runShell(cmd.Context(), in, a[0], a[1:])
		},
	}
}

// runShell runs a command (a login shell when argv is empty) on a remote
// terminal, with the local terminal in raw mode. The terminal is restored
// on every way out: normal exit, error, panic (the defer), and SIGINT,
// SIGTERM or SIGHUP (main turns them into the cancellation of ctx, which
// ends the stream and so this function).
func (c *cli) runShell(ctx context.Context, in *os.File, ref string, argv []string) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	id, err := resolve(ctx, cl, ref)
	if err != nil {
		return err
	}
	fd := int(in.Fd())
	cols, rows := 80, 24
	if out, ok := c.stdout.(*os.File); ok {
		if w, h, err := term.GetSize(int(out.Fd())); err == nil {
			cols, rows = w, h
		}
	}
	termName := c.getenv("TERM")
	if termName == "" {
		termName = "xterm-256color"
	}
	req := sandboxd.StreamRequest{
		Cmd:    argv,
		Env:    map[string]string{"TERM": termName},
		PTY:    &sandboxd.PTYSize{Cols: cols, Rows: rows},
		Stdout: c.stdout,
		Stderr: c.stderr,
	}
	if len(argv) == 0 {
		req.Command = shellCommand
	}
	p, err := cl.ExecStream(ctx, id, req)
	if err != nil {
		return err
	}
	defer p.Close()

	old, err := term.MakeRaw(fd)
	if err != nil {
		return err
	}
	defer term.Restore(fd, old)
	stop := watchResize(ctx, c.stdout, p)
	defer stop()

	// Ctrl-D is a byte like any other on a raw terminal, so stdin is never
	// closed; the copy ends with the process.
	go io.Copy(p, in)

	code, err := p.Wait()
	if err != nil {
		return err
	}
	if code != 0 {
		return exitStatus{code}
	}
	return nil
}
