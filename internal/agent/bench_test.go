package agent_test

import (
	"context"
	"io"
	"net"
	"path/filepath"
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

// BenchmarkUpload_Local uploads 50 MB through an in-process agent on a
// unix socket, the body of unknown length as the daemon passes an API
// request's on (chunked). `go test -cpuprofile` on it shows where an
// upload's CPU goes: the agent's share is what a sandbox's CPU limit
// throttles.
func BenchmarkUpload_Local(b *testing.B) {
	const size = 50 << 20
	sock := localAgentB(b)
	c := agent.NewClient(agent.UnixDialer(sock), testToken)
	defer c.Close()
	dst := filepath.Join(b.TempDir(), "big.bin")
	chunk := make([]byte, 1<<20)
	b.SetBytes(size)
	for b.Loop() {
		r := struct{ io.Reader }{io.LimitReader(repeatReader(chunk), size)}
		if err := c.Upload(b.Context(), dst, r, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// repeatReader reads b over and over.
type repeatReader []byte

func (r repeatReader) Read(p []byte) (int, error) { return copy(p, r), nil }
