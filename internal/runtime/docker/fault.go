package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// engineErr classifies err, the error of a call that reached for the
// engine, onto the runtime's fault sentinels: runtime.ErrUnavailable when
// the engine did not answer, runtime.ErrNoSpace when it (or a host
// directory the runtime writes) ran out of space. nil, errors already
// classified, and the agent's own failures (a sandbox whose agent did not
// come up says nothing about the engine) pass unchanged. Every exported
// method of Runtime that talks to the engine returns through it, so the
// service never needs to know an engine error.
func engineErr(err error) error {
	switch {
	case err == nil,
		errors.Is(err, runtime.ErrUnavailable), errors.Is(err, runtime.ErrNoSpace),
		errors.Is(err, runtime.ErrAgentNotReady), errors.Is(err, runtime.ErrAgentImpostor):
		return err
	case engineDown(err):
		return fmt.Errorf("%w: %w", runtime.ErrUnavailable, err)
	case noSpace(err):
		return fmt.Errorf("%w: %w", runtime.ErrNoSpace, err)
	}
	return err
}

// engineDown reports whether err says the engine did not answer. The
// client types every failed round trip (a missing socket, a refused or
// reset connection, a dial timeout) as a connection failure; a stream
// whose connection broke after the answer began surfaces as the
// transport's *url.Error with the errno or EOF under it. A context that
// ended is the caller's, not a fault of the engine: it is not matched.
func engineDown(err error) bool {
	if client.IsErrConnectionFailed(err) || cerrdefs.IsUnavailable(err) {
		return true
	}
	var uerr *url.Error
	return errors.As(err, &uerr) &&
		(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
			errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ENOENT) ||
			errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
}

// noSpace reports whether err is a full disk: ENOSPC or EDQUOT from a
// host call, or the engine's answer for one. The engine sends that error
// as the text of an HTTP 500, with no type that says "no space", so its
// message is the only thing to match; a host errno is matched by value.
func noSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "no space left on device") || strings.Contains(msg, "disk quota exceeded")
}

// Ping asks the engine whether it answers: nil, or an error matching
// runtime.ErrUnavailable (a ping that fails or times out is an engine
// that does not answer). Readiness calls it, rate-limited; the create
// path never does.
func (r *Runtime) Ping(ctx context.Context) error {
	if _, err := r.cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("%w: %w", runtime.ErrUnavailable, err)
	}
	return nil
}
