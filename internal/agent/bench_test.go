package agent_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// BenchmarkExec_Local is an exec round trip of `true` through an
// in-process agent on a unix socket (see bench/agentbench for the
// container figure beside docker exec).
func BenchmarkExec_Local(b *testing.B) {
	sock := localAgentB(b)
	var dials atomic.Int64
	dial := agent.UnixDialer(sock)
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { dials.Add(1); return dial(ctx) }, testToken)
	defer c.Close()
	defer func() { b.ReportMetric(float64(dials.Load())/float64(b.N), "dials/op") }()
	for b.Loop() {
		if _, err := c.Exec(b.Context(), agent.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
	}
}
