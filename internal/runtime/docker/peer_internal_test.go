package docker

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// peerBench is a runtime (never touching the engine) whose sandbox "sb-b"
// has its agent socket served by this process, with this process's pid
// cached as the agent's: the state of every dial after a boot.
func peerBench(b *testing.B) *Runtime {
	b.Helper()
	dir, err := os.MkdirTemp("", "pb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	r, err := New(Options{NodeID: "bench", SocketRoot: dir})
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Mkdir(r.SocketDir("sb-b"), 0o700); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(r.SocketDir("sb-b"), runtime.AgentSocketName))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	r.setPID("sb-b", os.Getpid())
	return r
}

// BenchmarkDial_PeerChecked is DialAgent's path: the no-follow dial, then
// the SO_PEERCRED check against the cached pid.
func BenchmarkDial_PeerChecked(b *testing.B) {
	r := peerBench(b)
	for b.Loop() {
		c, err := r.dialAgent(context.Background(), "sb-b")
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkDial_Unchecked is the same dial without the peer check: the
// difference is the check's cost.
func BenchmarkDial_Unchecked(b *testing.B) {
	r := peerBench(b)
	for b.Loop() {
		c, err := dialSocket(context.Background(), r.AgentSocketPath("sb-b"))
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkCheckPeer is the check alone, on one open connection.
func BenchmarkCheckPeer(b *testing.B) {
	r := peerBench(b)
	c, err := dialSocket(context.Background(), r.AgentSocketPath("sb-b"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if err := r.checkPeer(context.Background(), "sb-b", c); err != nil {
			b.Fatal(err)
		}
	}
}
