package mcp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Env is what Command reads of its process: the environment and the
// working directory.
type Env struct {
	Getenv func(string) string
	Getwd  func() (string, error)
}

// Command is `sandboxd mcp`: an MCP server on stdin and stdout for one
// client (an agent that started it), acting on the daemon at --url with
// the token sbx would use. It returns the exit code: 0 when the client
// closed the session, 1 on a failure, 2 on a usage error.
//
// The daemon's URL is --url, else SBX_API_URL, else the local default.
// The token is read from --token-file, else SBX_TOKEN, else
// $SBX_DATA_DIR/admin.token, else .sandboxd/admin.token in the working
// directory or the nearest parent that has one: sbx's rules. There is no
// --token flag: a command line is readable by every user of the host.
func Command(ctx context.Context, args []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer, env Env, version string) int {
	fset := flag.NewFlagSet("sandboxd mcp", flag.ContinueOnError)
	fset.SetOutput(stderr)
	url := fset.String("url", "", "the daemon's API URL (default $SBX_API_URL, else "+sandboxd.DefaultBaseURL+")")
	tokenFile := fset.String("token-file", "", "a file holding the API token (default $SBX_TOKEN, else the local admin token, as sbx finds it)")
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
	base := *url
	if base == "" {
		base = env.Getenv("SBX_API_URL")
	}
	if base == "" {
		base = sandboxd.DefaultBaseURL
	}
	token, err := findToken(*tokenFile, env)
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd mcp:", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if token == "" {
		logger.Warn("no API token found: calls will be refused (set SBX_TOKEN or --token-file)")
	}
	client := sandboxd.New(base, token, sandboxd.WithUserAgent("sandboxd-mcp/"+version))
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

// findToken finds the API token as sbx does (cmd/sbx), with file first
// when given.
func findToken(file string, env Env) (string, error) {
	if file != "" {
		t, err := readToken(file)
		if err == nil && t == "" {
			err = fmt.Errorf("token file %s is missing or empty", file)
		}
		return t, err
	}
	if t := strings.TrimSpace(env.Getenv("SBX_TOKEN")); t != "" {
		return t, nil
	}
	if dir := env.Getenv("SBX_DATA_DIR"); dir != "" {
		return readToken(filepath.Join(dir, "admin.token"))
	}
	wd, err := env.Getwd()
	if err != nil {
		return "", nil
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		t, err := readToken(filepath.Join(dir, ".sandboxd", "admin.token"))
		if t != "" || err != nil {
			return t, err
		}
		if filepath.Dir(dir) == dir {
			return "", nil
		}
	}
}

// readToken returns the token in a file, or "" when there is no file.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
