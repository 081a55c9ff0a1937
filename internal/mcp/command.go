package mcp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/clientconf"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Env is what Command reads of its process: the environment and the
// working directory.
type Env = clientconf.Env

// Command is `sandboxd mcp`: an MCP server on stdin and stdout for one
// client (an agent that started it), acting on the daemon at --url with
// the token sbx would use. It returns the exit code: 0 when the client
// closed the session, 1 on a failure, 2 on a usage error.
//
// The daemon's URL and the token are found by package clientconf's rules,
// which sbx follows too: --url, else SBX_API_URL, else the local default;
// --token-file, else SBX_TOKEN, else $SBX_DATA_DIR/admin.token, else the
// nearest .sandboxd/admin.token. There is no --token flag: a command line
// is readable by every user of the host.
func Command(ctx context.Context, args []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer, env Env, version string) int {
	fset := flag.NewFlagSet("sandboxd mcp", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var flags clientconf.Flags
	fset.StringVar(&flags.URL, clientconf.URLFlag, "", clientconf.URLHelp)
	fset.StringVar(&flags.TokenFile, clientconf.TokenFileFlag, "", clientconf.TokenFileHelp)
	fset.Usage = func() {
		fmt.Fprintln(stderr, "usage: sandboxd mcp [--url URL] [--token-file FILE]")
		fmt.Fprintln(stderr, "Serves the Model Context Protocol on stdin/stdout (for an MCP client to start), acting on a sandboxd daemon.")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "sandboxd mcp: unexpected argument %q\n", fset.Arg(0))
		return 2
	}
	conf, err := clientconf.Resolve(flags, env)
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd mcp:", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if conf.Token == "" {
		logger.Warn("no API token found: calls will be refused (" + clientconf.NoTokenHint + ")")
	}
	client := sandboxd.New(conf.URL, conf.Token, sandboxd.WithUserAgent("sandboxd-mcp/"+version))
	server := NewServer(Options{
		Version: version,
		Logger:  logger,
		Client: func(context.Context, *mcpsdk.CallToolRequest) (*sandboxd.Client, error) {
			return client, nil
		},
	})
	err = server.Run(ctx, &mcpsdk.IOTransport{Reader: stdin, Writer: stdout})
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(stderr, "sandboxd mcp:", err)
		return 1
	}
	return 0
}
