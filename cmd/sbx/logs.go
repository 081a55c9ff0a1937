package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// logsCmd is sbx logs: the output of the processes a sandbox's agent ran
// (its execs, any API's processes, sessions, its template's start
// command), stdout lines to
// stdout and stderr lines to stderr, or with --json one JSON object a line.
func (c *cli) logsCmd() *cobra.Command {
	var (
		follow, timestamps bool
		since              string
		tail               int
	)
	cmd := &cobra.Command{
		Use:   "logs [-f] [--since 10m|<RFC 3339>] [--tail N] <id|name>",
		Short: "Show a sandbox's logs (its processes' output)",
		Args:  args(1, 1, "one sandbox id or name"),
		RunE: func(cmd *cobra.Command, a []string) error {
			opts := sandboxd.LogOptions{Follow: follow}
			if tail < 0 {
				return usagef(cmd, "--tail must not be negative")
			}
			opts.Tail = tail
			if since != "" {
				t, err := parseSinceFlag(since, time.Now())
				if err != nil {
					return usagef(cmd, "--since: %v", err)
				}
				opts.Since = t
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			out, errOut := bufio.NewWriter(c.stdout), bufio.NewWriter(c.stderr)
			defer out.Flush()
			defer errOut.Flush()
			enc := json.NewEncoder(out)
			return cl.Logs(cmd.Context(), a[0], opts, func(l sandboxd.LogLine) error {
				if c.jsonOut {
					return enc.Encode(l)
				}
				w := out
				if l.Stream == "stderr" {
					w = errOut
				}
				if timestamps {
					fmt.Fprintf(w, "%s %s ", l.Time.Local().Format(time.RFC3339Nano), l.Source)
				}
				fmt.Fprintln(w, l.Text)
				if follow {
					if err := out.Flush(); err != nil {
						return err
					}
					return errOut.Flush()
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the sandbox stops")
	f.StringVar(&since, "since", "", "only lines since a time (RFC 3339) or for a duration back (10m, 1h)")
	f.IntVar(&tail, "tail", 0, "only the last N lines (0: all)")
	f.BoolVarP(&timestamps, "timestamps", "t", false, "prefix each line with its time and process")
	return cmd
}

// parseSinceFlag reads --since: an RFC 3339 time or a duration back from
// now.
func parseSinceFlag(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration such as 10m", v)
}
