package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// logsCmd is sbx logs: the output of the processes a sandbox's agent ran
// (its execs, any API's processes, sessions, its template's start
// command), stdout lines to
// stdout and stderr lines to stderr, or with --json one JSON object a line.
// A sandbox's output is an attacker's: printed to a terminal, its control
// characters (C0 but tab, DEL, C1) are escaped (\x1b), so that no line can
// move the cursor, rewrite the prefix -t prints or set the clipboard (OSC
// 52); --raw prints them as they are. A stream the daemon ends early is
// the command's error, after the lines before it.
func (c *cli) logsCmd() *cobra.Command {
	var (
		follow, timestamps, raw bool
		since                   string
		tail                    int
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
			escOut, escErr := !raw && isTerminal(c.stdout), !raw && isTerminal(c.stderr)
			enc := json.NewEncoder(out)
			return cl.Logs(cmd.Context(), a[0], opts, func(l sandboxd.LogLine) error {
				if c.jsonOut {
					return enc.Encode(l) // JSON escapes control characters
				}
				w, esc := out, escOut
				if l.Stream == "stderr" {
					w, esc = errOut, escErr
				}
				src, text := l.Source, l.Text
				if esc {
					src, text = escapeControls(src), escapeControls(text)
				}
				if timestamps {
					fmt.Fprintf(w, "%s %s ", l.Time.Local().Format(time.RFC3339Nano), src)
				}
				fmt.Fprintln(w, text)
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
	f.BoolVar(&raw, "raw", false, "print control characters as they are, even to a terminal")
	return cmd
}

// escapeControls writes s's control characters but tab as Go escapes:
// C0 and DEL as \x1b, C1 as \u009b (invalid UTF-8 as U+FFFD).
func escapeControls(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, isEscaped) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case isEscaped(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isEscaped(r rune) bool {
	return (r < 0x20 && r != '\t') || (r >= 0x7f && r <= 0x9f)
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
