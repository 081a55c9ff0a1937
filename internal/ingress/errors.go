package ingress

import "errors"

// Sentinel errors, matched with errors.Is. The service maps them to its
// own codes at its edge; none of them reaches a sandbox.
var (
	// ErrNotInstalled is a route change for a sandbox that is not
	// installed (never was, or was removed). Routes never resurrect a
	// removed sandbox.
	ErrNotInstalled = errors.New("sandbox is not installed")
	// ErrNotExposed is a listener for a sandbox port that is not exposed
	// with the listener's protocol.
	ErrNotExposed = errors.New("port is not exposed with that protocol")
	// ErrProtocolConflict is an exposure of a port that is already
	// exposed with another protocol.
	ErrProtocolConflict = errors.New("port is exposed with another protocol")
	// ErrHostnameConflict is a custom hostname bound to another sandbox.
	ErrHostnameConflict = errors.New("hostname is bound to another sandbox")
	// ErrInvalidRoute is a malformed sandbox id, port, protocol or
	// hostname.
	ErrInvalidRoute = errors.New("invalid route")
	// ErrHostPortInUse is a host port that another process holds: the
	// bind failed with EADDRINUSE, which the returned error also wraps.
	// The caller releases that candidate and walks on.
	ErrHostPortInUse = errors.New("host port in use")
	// ErrHostPortConflict is a host port this router already listens on
	// for another sandbox port: a bookkeeping bug upstream, never a
	// foreign process.
	ErrHostPortConflict = errors.New("host port already routes elsewhere")
	// ErrL4Unavailable is a failed start of the L4 machinery. Only the
	// call that hit it fails; the next one tries again.
	ErrL4Unavailable = errors.New("L4 listeners unavailable")
	// ErrClosed is a call on a closed router.
	ErrClosed = errors.New("router closed")
)
