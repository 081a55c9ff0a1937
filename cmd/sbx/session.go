package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// sessionCmd is `sbx session`: shell sessions, which live in the sandbox
// (they survive a restart of the daemon) and run commands one after
// another in one shell.
func (c *cli) sessionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session (create|ls|exec|logs|rm) …",
		Short: "Long-lived shell sessions: commands share one shell's state",
	}
	cmd.AddCommand(c.sessionCreateCmd(), c.sessionListCmd(), c.sessionExecCmd(), c.sessionLogsCmd(), c.sessionRmCmd())
	return cmd
}

// sessionCreateCmd is `sbx session create`.
func (c *cli) sessionCreateCmd() *cobra.Command {
	var user, cwd string
	create := &cobra.Command{
		Use:   "create <id|name> <session> [--user u] [--cwd dir]",
		Short: "Start a shell session",
		Args:  args(2, 2, "a sandbox id or name and a session id"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, id, err := c.clientFor(cmd, a[0])
			if err != nil {
				return err
			}
			s, err := cl.CreateSession(cmd.Context(), id, sandboxd.CreateSessionRequest{ID: a[1], User: user, Cwd: cwd})
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(s)
			}
			fmt.Fprintln(c.stdout, s.ID)
			return nil
		},
	}
	create.Flags().StringVar(&user, "user", "", "run the shell as this user (default root)")
	create.Flags().StringVar(&cwd, "cwd", "", "start in this directory (default the user's home)")
	return create
}

// sessionExecCmd is `sbx session exec`.
func (c *cli) sessionExecCmd() *cobra.Command {
	var async bool
	execCmd := &cobra.Command{
		Use:   "exec <id|name> <session> [--async] -- <shell command>",
		Short: "Run a command in a session; exits with its exit code",
		Args:  args(3, -1, "a sandbox id or name, a session id and a command"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, id, err := c.clientFor(cmd, a[0])
			if err != nil {
				return err
			}
			res, err := cl.SessionExec(cmd.Context(), id, a[1], strings.Join(a[2:], " "), async)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(res)
			}
			if async {
				fmt.Fprintln(c.stdout, res.ID)
				return nil
			}
			if res.Stdout != nil {
				io.WriteString(c.stdout, *res.Stdout)
			}
			if res.Stderr != nil {
				io.WriteString(c.stderr, *res.Stderr)
			}
			return exitOf(res.ExitCode)
		},
	}
	execCmd.Flags().BoolVar(&async, "async", false, "print the command's id and return at once")
	return execCmd
}

// sessionLogsCmd is `sbx session logs`.
func (c *cli) sessionLogsCmd() *cobra.Command {
	var follow bool
	logs := &cobra.Command{
		Use:   "logs <id|name> <session> <command id> [-f]",
		Short: "Print a command's output; -f follows it to its end and exits with its exit code",
		Args:  args(3, 3, "a sandbox id or name, a session id and a command id"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, id, err := c.clientFor(cmd, a[0])
			if err != nil {
				return err
			}
			if !follow {
				l, err := cl.SessionCommandLogs(cmd.Context(), id, a[1], a[2])
				if err != nil {
					return err
				}
				if c.jsonOut {
					return c.printJSON(l)
				}
				io.WriteString(c.stdout, l.Stdout)
				io.WriteString(c.stderr, l.Stderr)
				return nil
			}
			code, err := cl.FollowSessionCommand(cmd.Context(), id, a[1], a[2], func(stderr bool, data string) error {
				w := c.stdout
				if stderr {
					w = c.stderr
				}
				_, err := io.WriteString(w, data)
				return err
			})
			if err != nil {
				return err
			}
			return exitOf(code)
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the command ends")
	return logs
}

// sessionListCmd is `sbx session ls`.
func (c *cli) sessionListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls <id|name> [session]",
		Aliases: []string{"list"},
		Short:   "List a sandbox's sessions, or one session's commands",
		Args:    args(1, 2, "a sandbox id or name, and a session id"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, id, err := c.clientFor(cmd, a[0])
			if err != nil {
				return err
			}
			var all []sandboxd.Session
			if len(a) == 2 {
				s, err := cl.GetSession(cmd.Context(), id, a[1])
				if err != nil {
					return err
				}
				all = []sandboxd.Session{*s}
			} else if all, err = cl.ListSessions(cmd.Context(), id); err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(all)
			}
			return c.printSessions(all)
		},
	}
}

// printSessions prints one line per command of each session (one line
// for a session that ran none).
func (c *cli) printSessions(all []sandboxd.Session) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tCOMMAND ID\tEXIT\tCOMMAND")
	for _, s := range all {
		if len(s.Commands) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\n", s.ID)
		}
		for _, cm := range s.Commands {
			exit := "running"
			if cm.ExitCode != nil {
				exit = fmt.Sprint(*cm.ExitCode)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.ID, cm.ID, exit, oneLine(cm.Command, 60))
		}
	}
	return tw.Flush()
}

// sessionRmCmd is `sbx session rm`.
func (c *cli) sessionRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm <id|name> <session>",
		Aliases: []string{"delete"},
		Short:   "Kill a session's shell and what it runs",
		Args:    args(2, 2, "a sandbox id or name and a session id"),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, id, err := c.clientFor(cmd, a[0])
			if err != nil {
				return err
			}
			return cl.DeleteSession(cmd.Context(), id, a[1])
		},
	}
}

// exitOf is the command error for a command's exit code: nil for 0 or
// an unknown code.
func exitOf(code *int) error {
	if code != nil && *code != 0 {
		return exitStatus{*code}
	}
	return nil
}

// oneLine is s on one line, cut to n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
