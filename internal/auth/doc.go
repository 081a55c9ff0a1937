// Package auth issues and verifies API tokens and carries the caller's
// identity (a [Principal]) through a request's context.
//
// # Tokens
//
// A token is
//
//	sbx_<id>_<secret>
//
// where id is 8 lowercase hex digits (32 random bits) and secret is 64
// lowercase hex digits (32 random bytes). The id is not secret: it names the
// token in listings and revocations. The daemon stores only [Hash], the
// SHA-256 of the whole token, so a database leak does not leak usable
// tokens, and hashing the whole token (not the secret alone) binds the
// secret to its id. 256 random bits need no salt or slow hash: there is
// nothing to guess.
//
// Token ids are random, not unique by construction: the store's primary key
// rejects a colliding id and the caller generates again.
//
// The E2B SDKs require keys matching ^e2b_[0-9a-f]+$, so the E2B facade
// accepts the same token hex-encoded: see [E2BKey] and [FromE2BKey].
//
// # Authentication
//
// An [Authenticator] looks a token up by its hash through [TokenLookup], an
// interface the store adapts to, then checks the stored hash in constant
// time, the id, the revocation flag and the role. Every way a credential can
// be wrong (absent, malformed, unknown, revoked, mismatched) is reported as
// [ErrUnauthenticated]: the client gets one answer and learns nothing about
// which check failed. The wrapped text says which, for the server's log; it
// never contains the token. A failing store is not [ErrUnauthenticated]: it
// is the server's fault, not the client's.
//
// # Authorization
//
// Two roles: [RoleAdmin] sees and manages everything, [RoleUser] sees only
// resources whose owner is the token's owner ([Principal.CanSee]). Edges
// answer 404, not 403, for another owner's resources, so that their
// existence is not revealed.
package auth
