package cluster

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Callers test for them with errors.Is; the API edges map
// them to wire codes (ErrUnavailable is 503, retryable).
var (
	// ErrUnavailable is an etcd call that did not finish: no quorum, no
	// leader, an unreachable member, or the call's deadline (OpTimeout)
	// passed. Retry later. A write that fails this way may still have been
	// applied; its error says "outcome unknown", and every write here is
	// safe to retry.
	ErrUnavailable = errors.New("unavailable")
	// ErrNameTaken is a claim whose names/<owner>/<name> names another
	// sandbox.
	ErrNameTaken = errors.New("name taken")
	// ErrHostnameTaken is a claim whose hostnames/<host> names another
	// sandbox.
	ErrHostnameTaken = errors.New("hostname taken")
	// ErrNotFound is a key that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is a compare-and-swap that lost: the key changed under
	// the caller (a placement moved, or is held by another node).
	ErrConflict = errors.New("conflict")
	// ErrTemplateInUse is a template delete refused because a placement
	// made from the template exists.
	ErrTemplateInUse = errors.New("template in use")
	// ErrTemplateGone is a placement claim made from a template whose
	// record is gone (deleted meanwhile).
	ErrTemplateGone = errors.New("template deleted")
	// ErrCorrupt is a sealed blob that fails to open: altered, truncated,
	// sealed with other associated data or with another cluster secret.
	ErrCorrupt = errors.New("sealed blob corrupt")
	// ErrInvalidArgument is a call whose arguments can never succeed
	// (an empty id, a too-short secret, a too-large value).
	ErrInvalidArgument = errors.New("invalid argument")
)

// unavailable classifies an etcd error: a failure of the cluster (no
// quorum, timeout, connection) becomes ErrUnavailable; a request etcd
// refuses on its merits (too large, invalid) does not. what names the call.
func unavailable(what string, err error) error {
	if err == nil {
		return nil
	}
	if permanent(err) {
		return fmt.Errorf("%s: %w: %w", what, ErrInvalidArgument, err)
	}
	return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
}

// unknownOutcome is unavailable for a write: the request may have been
// applied before the deadline passed, so the error says so.
func unknownOutcome(what string, err error) error {
	if err == nil {
		return nil
	}
	if permanent(err) {
		return unavailable(what, err)
	}
	return fmt.Errorf("%s: outcome unknown: %w: %w", what, ErrUnavailable, err)
}

// permanent reports whether etcd refused a request on its merits, so that
// retrying it unchanged can never succeed.
func permanent(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var code codes.Code
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
	} else {
		return false
	}
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.OutOfRange,
		codes.PermissionDenied, codes.Unauthenticated, codes.AlreadyExists:
		return true
	}
	return false
}
