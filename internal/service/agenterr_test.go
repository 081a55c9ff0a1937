package service

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// TestAgentErr: what the agent answers about the sandbox's own files is
// the caller's 4xx (it was a 500 for every plain-HTTP answer and for
// permission_denied), keeping the agent's message; the rest stays as is.
func TestAgentErr(t *testing.T) {
	httpErr := func(status int, body string) error {
		return fmt.Errorf("agent: upload /: %w", &agent.HTTPError{StatusCode: status, Message: body})
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
		msg  string
	}{
		{"HTTP400", httpErr(400, `{"code":400,"message":"write /: is a directory"}`), ErrInvalidArgument, "path: write /: is a directory"},
		{"HTTP400NotJSON", httpErr(400, `bad`), ErrInvalidArgument, "path: bad"},
		{"HTTP403", httpErr(403, `{"code":403,"message":"open /root/x: permission denied"}`), ErrPermissionDenied, "open /root/x: permission denied"},
		{"HTTP404", httpErr(404, `{"code":404,"message":"open /x: no such file"}`), ErrNotFound, "open /x: no such file"},
		{"ConnectPermission", connect.NewError(connect.CodePermissionDenied, errors.New("x")), ErrPermissionDenied, ""},
		{"ConnectFailedPrecondition", connect.NewError(connect.CodeFailedPrecondition, errors.New("busy")), ErrInvalidArgument, "busy"},
		// The agent's words once: not the client's "agent: …" context,
		// not Connect's code word, not the sentinel's.
		{"ConnectNotFoundWrapped", fmt.Errorf("agent: list /nope: %w", connect.NewError(connect.CodeNotFound, errors.New("lstat /nope: no such file or directory"))),
			ErrNotFound, "lstat /nope: no such file or directory"},
		{"ConnectInvalidWrapped", fmt.Errorf("agent: start %q: %w", "x", connect.NewError(connect.CodeInvalidArgument, errors.New("cannot start process: x: bad cwd"))),
			ErrInvalidArgument, "cannot start process: x: bad cwd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := agentErr(tc.err)
			if !errors.Is(got, tc.want) {
				t.Fatalf("agentErr = %v, want %v", got, tc.want)
			}
			if tc.msg != "" && got.Error() != tc.msg {
				t.Errorf("message %q, want %q", got.Error(), tc.msg)
			}
		})
	}
	he := httpErr(500, "boom")
	if got := agentErr(he); errors.Is(got, ErrInvalidArgument) || errors.Is(got, ErrNotFound) {
		t.Errorf("a 500 of the agent became %v", got)
	}
}
