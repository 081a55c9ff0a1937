package mcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// toolError is what a tool returns for a failed call: the SDK makes it a
// tool result with isError set and Error() as its text.
type toolError struct {
	op   string // what failed, in the tool's words: "exec in sb-…"
	code apierr.Code
	msg  string // the API's message, or ours
	hint string // what to do
}

func (e *toolError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s failed (%s): %s", e.op, e.code, strings.TrimSuffix(e.msg, "."))
	if e.hint != "" {
		b.WriteString(". ")
		b.WriteString(e.hint)
	}
	if apierr.Lookup(e.code).Retryable {
		b.WriteString(" This may succeed if retried shortly.")
	}
	return b.String()
}

// hints say what to do about each class of the API's errors (the table
// of internal/api/apierr), in terms of these tools.
var hints = map[apierr.Code]string{
	apierr.InvalidArgument:      "Fix the argument the message names and call again.",
	apierr.Unauthenticated:      "The API token is missing, wrong or revoked: configure the MCP client with a valid sandboxd token (SBX_TOKEN for `sandboxd mcp`, an Authorization: Bearer header for /mcp).",
	apierr.PermissionDenied:     "This token may not do that; use a token with the needed role.",
	apierr.NotFound:             "It does not exist, was destroyed, or is not visible to this token: list_sandboxes shows the sandboxes you can use.",
	apierr.Conflict:             "The sandbox is not in a state that allows this (stopped, paused, or being destroyed): check its state with list_sandboxes.",
	apierr.NameConflict:         "Another sandbox of yours has this name: choose another name, or use the existing sandbox (list_sandboxes).",
	apierr.HostnameConflict:     "That hostname is bound elsewhere.",
	apierr.PayloadTooLarge:      "Send less data in one call.",
	apierr.IdempotencyKeyReused: "This idempotency_key was used with different arguments: use a new key for a different sandbox.",
	apierr.CapacityExhausted:    "Destroy sandboxes you no longer need (list_sandboxes, destroy_sandbox), or ask for less cpu or memory.",
	apierr.Internal:             "The daemon failed unexpectedly; its operator's log has the details.",
	apierr.Unavailable:          "The daemon or one of its dependencies is not answering.",
	apierr.DiskFull:             "Remove files in the sandbox (exec rm) before writing more.",
}

// pathNotFound is not_found's hint for the tools that name a path too.
const pathNotFound = "The sandbox or the path does not exist, or the sandbox is not visible to this token: list_sandboxes shows your sandboxes, list_directory a directory's entries."

// failure turns an error of the API client into a toolError for op.
func failure(op string, err error) error { return failureHint(op, err, "") }

// failureHint is failure with notFound as not_found's hint, when set.
func failureHint(op string, err error, notFound string) error {
	var te *toolError
	if errors.As(err, &te) {
		return te
	}
	var apiErr *sandboxd.APIError
	var opErr *net.OpError
	switch {
	case errors.As(err, &apiErr):
		code := apierr.Lookup(apierr.Code(apiErr.Code)).Code // unknown codes read as internal
		msg := apiErr.Message
		if msg == "" {
			msg = string(apiErr.Code)
		}
		hint := hints[code]
		if code == apierr.NotFound && notFound != "" {
			hint = notFound
		}
		return &toolError{op: op, code: code, msg: msg, hint: hint}
	case errors.Is(err, context.DeadlineExceeded):
		return &toolError{op: op, code: apierr.Unavailable, msg: "the call did not finish in time", hint: hints[apierr.Unavailable]}
	case errors.Is(err, context.Canceled):
		return &toolError{op: op, code: apierr.Unavailable, msg: "the call was cancelled"}
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return &toolError{op: op, code: apierr.Unavailable, msg: "cannot reach the sandboxd daemon: " + leaf(opErr).Error(),
			hint: "Is it running? `sandboxd mcp` calls SBX_API_URL (default " + sandboxd.DefaultBaseURL + ")."}
	}
	return &toolError{op: op, code: apierr.Internal, msg: leaf(err).Error(), hint: hints[apierr.Internal]}
}

// invalid is a toolError for an argument the tool itself refuses.
func invalid(op, format string, args ...any) error {
	return &toolError{op: op, code: apierr.InvalidArgument, msg: fmt.Sprintf(format, args...), hint: hints[apierr.InvalidArgument]}
}

// leaf is the innermost error of err's chain: the cause, without the
// prefixes each layer added.
func leaf(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
