package mcp

import (
	"context"
	"log/slog"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// ClientFunc returns the API client one tool call acts with: the same
// client for every call of a stdio session, a client carrying the
// request's own token on /mcp.
type ClientFunc func(ctx context.Context, req *mcpsdk.CallToolRequest) (*sandboxd.Client, error)

// Options configure NewServer.
type Options struct {
	// Client gives each tool call its API client. Required.
	Client ClientFunc
	// Version is reported to clients in the initialize answer.
	Version string
	// Logger receives the SDK's own log; nil discards it.
	Logger *slog.Logger
}

// instructions tell a model how the tools fit together.
const instructions = `sandboxd runs isolated Linux sandboxes (containers) on its host.
Typical flow: create_sandbox (note its id), then exec, write_file, read_file,
list_directory and expose_port with that id (a sandbox's name works too),
and destroy_sandbox when done; a sandbox left behind is destroyed when its
timeout ends. list_sandboxes shows the sandboxes this token can use.
Pass a progressToken with exec to receive its output while it runs.`

// NewServer returns an MCP server with sandboxd's tools, acting through
// the clients opts.Client gives. It keeps no state between calls.
func NewServer(opts Options) *mcpsdk.Server {
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "sandboxd", Title: "sandboxd sandboxes", Version: version},
		&mcpsdk.ServerOptions{
			Instructions: instructions,
			Logger:       opts.Logger,
			// Tools only (the SDK adds them): no logging capability, since
			// output streams as progress notifications.
			Capabilities: &mcpsdk.ServerCapabilities{},
		})
	addTools(s, &tools{client: opts.Client})
	return s
}
