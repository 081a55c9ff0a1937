package filesystem_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/agent/server/filesystem"
	"github.com/sandboxd/sandboxd/internal/gen/envd/filesystem/filesystemconnect"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is an agent serving the filesystem service on a unix socket in a temp
// dir, with a Connect JSON client like E2B's SDKs use.
type env struct {
	svc    *filesystem.Service
	client filesystemconnect.FilesystemClient
	home   string // user's home
	dir    string // scratch directory
}

const (
	userUID = 1000
	userGID = 1000
)

func newEnv(t *testing.T, opts filesystem.Options) *env {
	t.Helper()
	base := t.TempDir()
	etc := filepath.Join(base, "etc")
	home := filepath.Join(base, "home", "user")
	scratch := filepath.Join(base, "scratch")
	for _, d := range []string{etc, home, scratch} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("passwd", fmt.Sprintf("root:x:0:0:root:/root:/bin/bash\nuser:x:%d:%d::%s:/bin/bash\n", userUID, userGID, home))
	write("group", fmt.Sprintf("root:x:0:\nuser:x:%d:\n", userGID))
	opts.Users = account.NewDirectory(filepath.Join(etc, "passwd"))

	svc := filesystem.New(opts)
	mux := http.NewServeMux()
	svc.Handle(mux)
	sock := filepath.Join(base, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	t.Cleanup(func() {
		svc.Close()
		tr.CloseIdleConnections()
		srv.Close()
	})
	client := filesystemconnect.NewFilesystemClient(&http.Client{Transport: tr}, "http://agent", connect.WithProtoJSON())
	return &env{svc: svc, client: client, home: home, dir: scratch}
}

// as makes req act as user, the way the SDKs select one.
func as[T any](user string, req *connect.Request[T]) *connect.Request[T] {
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	return req
}

// wantCode fails t unless err is a Connect error with code want.
func wantCode(t *testing.T, what string, err error, want connect.Code) {
	t.Helper()
	if got := connect.CodeOf(err); err == nil || got != want {
		t.Errorf("%s: err = %v, want code %v", what, err, want)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
