package docker

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// TestEngineErr_EngineGone: an engine whose socket is missing, refuses,
// or closes the connection without an answer is runtime.ErrUnavailable
// from the calls of every kind (inspect, list, create, destroy, ping),
// without any engine: the sockets are the test's own.
func TestEngineErr_EngineGone(t *testing.T) {
	dir, err := os.MkdirTemp("", "eg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	missing := filepath.Join(dir, "missing.sock")
	refusing := filepath.Join(dir, "refusing.sock")
	ln, err := net.Listen("unix", refusing)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays; nothing listens: ECONNREFUSED
	hangup := filepath.Join(dir, "hangup.sock")
	hl, err := net.Listen("unix", hangup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hl.Close() })
	go func() {
		for {
			c, err := hl.Accept()
			if err != nil {
				return
			}
			c.Close() // accepted, then cut: what a proxy that lost the engine does
		}
	}()

	for _, sock := range []string{missing, refusing, hangup} {
		t.Run(filepath.Base(sock), func(t *testing.T) {
			cli, err := client.New(client.WithHost("unix://" + sock))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Close() })
			r, err := New(Options{Client: cli, NodeID: "eg", SocketRoot: filepath.Join(dir, "s")})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			_, ierr := r.Inspect(ctx, "sb-0000000000000001")
			_, lerr := r.ListOurs(ctx)
			derr := r.Destroy(ctx, "sb-0000000000000001")
			perr := r.Ping(ctx)
			for name, err := range map[string]error{"Inspect": ierr, "ListOurs": lerr, "Destroy": derr, "Ping": perr} {
				if !errors.Is(err, runtime.ErrUnavailable) {
					t.Errorf("%s = %v, want ErrUnavailable", name, err)
				}
			}
		})
	}
}

// TestEngineErr_NoSpace: ENOSPC, and the engine's text for it, are
// runtime.ErrNoSpace; other errors pass unchanged.
func TestEngineErr_NoSpace(t *testing.T) {
	enospc := &os.PathError{Op: "mkdir", Path: "x", Err: syscall.ENOSPC}
	if !errors.Is(engineErr(enospc), runtime.ErrNoSpace) {
		t.Error("ENOSPC is not ErrNoSpace")
	}
	engine := errors.New("Error response from daemon: failed to mkdir /var/lib/docker/x: no space left on device")
	if !errors.Is(engineErr(engine), runtime.ErrNoSpace) {
		t.Error("the engine's no space left on device is not ErrNoSpace")
	}
	if err := errors.New("other"); engineErr(err) != err {
		t.Error("an unrelated error was changed")
	}
}
