package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sandboxd/sandboxd/internal/clientconf"
	"github.com/sandboxd/sandboxd/internal/version"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Exit codes; scripts rely on them, so they never change.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitConflict    = 4
	exitAuth        = 5
	exitInterrupted = 130 // 128 + SIGINT, as shells report it
)

// cli is one run of sbx: its streams, its environment and its flags.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	getwd          func() (string, error)

	// clientOpts are appended to the API client's options (tests use them
	// to shorten retries).
	clientOpts []sandboxd.Option

	jsonOut bool             // --json
	conf    clientconf.Flags // --url, --token-file
	baseURL string           // the daemon's URL, once a client is made
	noToken bool             // no token was found; explains a 401
}

// usageError is a command line sbx cannot act on.
type usageError struct {
	cmd string // "sbx exec", for the hint
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: cmd.CommandPath(), err: fmt.Errorf(format, args...)}
}

// exitStatus carries a remote command's exit code; it prints nothing.
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func (c *cli) run(ctx context.Context, args []string) int {
	root := c.rootCmd()
	root.SetArgs(args)
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	ran, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	var st exitStatus
	if !errors.As(err, &st) {
		msg := c.message(err)
		if ran != nil && errors.Is(err, sandboxd.ErrInvalidArgument) {
			msg = flagWords(ran.CommandPath(), msg)
		}
		fmt.Fprintln(c.stderr, "sbx: "+msg)
	}
	return code
}

// requestFlags names, per command, the flag that sets each API request
// field the command sends, so that a refusal naming a field ("public: a
// tcp port cannot be private …") names the flag the user typed.
var requestFlags = map[string]map[string]string{
	"sbx ports expose": {"public": "--public", "protocol": "--protocol"},
	"sbx create": {
		"cpu": "--cpu", "memory_mb": "--memory", "disk_mb": "--disk", "timeout_s": "--timeout",
		"image": "--image", "name": "--name", "env": "--env", "tags": "--tag", "template": "--template",
		"network": "--network",
	},
}

// flagWords rewrites the API's field names in msg, an invalid_argument's
// text, into the flags of the command at path: the field the message
// opens with ("public: …", the daemon's field-error shape) and a field
// set to a value ("public: true", "protocol: http"), which is how the
// daemon says what to send instead.
func flagWords(path, msg string) string {
	for field, flag := range requestFlags[path] {
		if rest, ok := strings.CutPrefix(msg, "invalid argument: "+field+": "); ok {
			msg = "invalid argument: " + flag + ": " + rest
		}
		msg = strings.ReplaceAll(msg, " "+field+": true", " "+flag)
		msg = strings.ReplaceAll(msg, " "+field+": ", " "+flag+" ")
	}
	return msg
}

// exitCode maps an error to sbx's exit code.
func exitCode(err error) int {
	var st exitStatus
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &st):
		if st.code < 0 || st.code > 255 {
			return exitError
		}
		return st.code
	case errors.As(err, &ue), errors.Is(err, sandboxd.ErrInvalidArgument):
		return exitUsage
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.Is(err, sandboxd.ErrNotFound):
		return exitNotFound
	case errors.Is(err, sandboxd.ErrConflict), errors.Is(err, sandboxd.ErrIdempotencyKeyReused):
		return exitConflict
	case errors.Is(err, sandboxd.ErrUnauthenticated), errors.Is(err, sandboxd.ErrPermissionDenied):
		return exitAuth
	default:
		return exitError
	}
}

// message is the one line sbx prints for err, after "sbx: ".
func (c *cli) message(err error) string {
	var ue *usageError
	var apiErr *sandboxd.APIError
	var opErr *net.OpError
	switch {
	case errors.As(err, &ue):
		return fmt.Sprintf("%v (see '%s --help')", ue.err, ue.cmd)
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return fmt.Sprintf("cannot reach sandboxd at %s: %v (is it running? set SBX_API_URL to point elsewhere)", c.baseURL, opErr.Err)
	case errors.As(err, &apiErr):
		msg := strings.ReplaceAll(string(apiErr.Code), "_", " ")
		if apiErr.Message != "" {
			msg += ": " + apiErr.Message
		}
		if apiErr.Code == sandboxd.CodeUnauthenticated && c.noToken {
			msg += " (no token: " + clientconf.NoTokenHint + ")"
		}
		return msg
	default:
		return err.Error()
	}
}

func (c *cli) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sbx",
		Short: "Manage sandboxes on a sandboxd daemon",
		Long: `sbx manages sandboxes on a sandboxd daemon.

The daemon is at --url, else $SBX_API_URL (default ` + sandboxd.DefaultBaseURL + `). The
token is read from --token-file, else $SBX_TOKEN, else the admin token in
$SBX_DATA_DIR/admin.token, else, for a loopback URL, in .sandboxd/admin.token
in this directory or the nearest parent up to $HOME that has one: a regular
file of yours (no symlink) holding a token (sandboxd mcp finds it the same way).

Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict,
5 unauthenticated or permission denied; exec and shell exit with the
command's own code.`,
		Version:       version.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(cmd, "unknown command %q", args[0])
			}
			return cmd.Help()
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{cmd: cmd.CommandPath(), err: err}
	})
	root.PersistentFlags().BoolVar(&c.jsonOut, "json", false, "print the API object as JSON")
	root.PersistentFlags().StringVar(&c.conf.URL, clientconf.URLFlag, "", clientconf.URLHelp)
	root.PersistentFlags().StringVar(&c.conf.TokenFile, clientconf.TokenFileFlag, "", clientconf.TokenFileHelp)
	root.AddCommand(
		c.createCmd(), c.lsCmd(), c.getCmd(), c.execCmd(), c.shellCmd(), c.cpCmd(),
		c.startCmd(), c.stopCmd(), c.pauseCmd(), c.hibernateCmd(), c.resumeCmd(), c.rmCmd(), c.portsCmd(), c.domainsCmd(), c.tokenCmd(), c.poolCmd(),
		c.templateCmd(), c.snapshotCmd(), c.forkCmd(), c.networkCmd(), c.imagesCmd(), c.pullCmd(), c.sessionCmd(),
		c.logsCmd(),
	)
	return root
}

// args returns a validator that wants between min and max positional
// arguments (max < 0: no limit), named in usage for the error.
func args(minN, maxN int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < minN || (maxN >= 0 && len(args) > maxN) {
			return usagef(cmd, "want %s", usage)
		}
		return nil
	}
}

// client returns an API client configured by package clientconf's rules.
func (c *cli) client() (*sandboxd.Client, error) {
	conf, err := clientconf.Resolve(c.conf, clientconf.Env{Getenv: c.getenv, Getwd: c.getwd})
	if err != nil {
		return nil, err
	}
	c.baseURL, c.noToken = conf.URL, conf.Token == ""
	opts := append([]sandboxd.Option{sandboxd.WithUserAgent("sbx/" + version.Version)}, c.clientOpts...)
	return sandboxd.New(conf.URL, conf.Token, opts...), nil
}

// token finds the API token by package clientconf's rules. No token at
// all is not an error here: the daemon answers 401 and message explains.
func (c *cli) token() (string, error) {
	conf, err := clientconf.Resolve(c.conf, clientconf.Env{Getenv: c.getenv, Getwd: c.getwd})
	return conf.Token, err
}

// resolve returns the id of the sandbox ref names: ref itself when it is
// an id, else the id of the sandbox with that name. The API documents
// name lookup for GET only, so sbx resolves names before other calls.
func resolve(ctx context.Context, cl *sandboxd.Client, ref string) (string, error) {
	if sandboxd.IsSandboxID(ref) {
		return ref, nil
	}
	sb, err := cl.GetSandbox(ctx, ref)
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}

// printJSON writes v as indented JSON.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseKV parses repeated K=V flags into a map (nil when there are none).
func parseKV(cmd *cobra.Command, flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef(cmd, "--%s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

// isTerminal reports whether f is an *os.File on a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}
