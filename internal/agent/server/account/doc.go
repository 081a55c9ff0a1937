// Package account resolves the Unix user an agent request acts as, and the
// paths that user names.
//
// E2B's envd protocol selects a user per request: RPC calls carry
// `Authorization: Basic base64("<user>:")`, the /files endpoints carry a
// `username` query parameter. A request that names no user acts as root.
// Users come from a passwd(5) file (the agent is built with CGO_ENABLED=0, so
// this is what os/user would read too); a [Directory] re-reads the file on
// every lookup, so users added inside a running sandbox are seen at once.
//
// Relative paths, "~" and "~/..." are relative to the user's home directory
// ([Resolve]); every resolved path is absolute and clean.
//
// Errors: a name that is not in the passwd file is [ErrUnknownUser]; a path
// with a NUL byte or an unreadable Authorization header is [ErrInvalid].
// Both are caller errors (Connect invalid_argument, HTTP 400); the mapping
// to wire codes is done by the handlers, not here.
package account
