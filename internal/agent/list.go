package agent

import (
	"context"

	"connectrpc.com/connect"

	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// ProcessInfo is one process the agent tracks, as List reports it.
// Everything in it is the agent's word: callers validate it.
type ProcessInfo struct {
	PID  uint32
	Tag  string
	Cmd  string
	Args []string
	Env  map[string]string
	Cwd  string
}

// maxListBytes bounds a List answer ListProcesses decodes. A process
// costs a few bytes on the wire and far more decoded, so the message
// limit of other calls (4 MiB: two million empty processes, hundreds of
// MiB decoded) is too loose here; 1 MiB holds thousands of real ones.
const maxListBytes = 1 << 20

// ListProcesses returns the processes the agent tracks, in start order.
// The answer is bounded by maxListBytes.
func (c *Client) ListProcesses(ctx context.Context) ([]ProcessInfo, error) {
	resp, err := c.list.List(ctx, connect.NewRequest(&rpc.ListRequest{}))
	if err != nil {
		return nil, wrap("list processes", err)
	}
	out := make([]ProcessInfo, 0, len(resp.Msg.GetProcesses()))
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{PID: p.GetPid(), Tag: p.GetTag(), Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Env: cfg.GetEnvs(), Cwd: cfg.GetCwd()})
	}
	return out, nil
}
