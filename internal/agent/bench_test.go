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
// unix socket: chunked (a body of unknown length) and sized (the
// Content-Length the daemon passes on, which the agent splices into the
// file). `go test -cpuprofile` on it shows where an upload's CPU goes: the
// agent's share is what a sandbox's CPU limit throttles.
func BenchmarkUpload_Local(b *testing.B) {
	const size = 50 << 20
	sock := localAgentB(b)
	c := agent.NewClient(agent.UnixDialer(sock), testToken)
	defer c.Close()
	dst := filepath.Join(b.TempDir(), "big.bin")
	chunk := make([]byte, 1<<20)
	for _, sized := range []bool{false, true} {
		name := "chunked"
		if sized {
			name = "sized"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				var r io.Reader = struct{ io.Reader }{io.LimitReader(repeatReader(chunk), size)}
				if sized {
					r = &lenReader{r: r, left: size}
				}
				if err := c.Upload(b.Context(), dst, r, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// lenReader has a Len, as the daemon's upload bodies of known length do.
type lenReader struct {
	r    io.Reader
	left int
}

func (l *lenReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.left -= n
	return n, err
}

func (l *lenReader) Len() int { return l.left }

// repeatReader reads b over and over.
type repeatReader []byte

func (r repeatReader) Read(p []byte) (int, error) { return copy(p, r), nil }
