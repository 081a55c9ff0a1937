package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

var (
	// ErrUnauthenticated means the request carries no valid credential:
	// none, malformed, unknown, revoked or mismatched. Answer every case
	// with the same status and message.
	ErrUnauthenticated = errors.New("unauthenticated")

	// ErrTokenNotFound is what a [TokenLookup] returns (or wraps) when no
	// token has the hash.
	ErrTokenNotFound = errors.New("auth: token not found")
)

// StoredToken is what [Authenticator] needs of a stored token.
type StoredToken struct {
	ID           string
	Role         string // "admin" or "user"; anything else never authenticates
	Owner        string
	SecretSHA256 [32]byte // [Hash] of the whole token
	Revoked      bool
	Quota        Quota
}

// TokenLookup finds a stored token by its hash. It returns an error
// matching [ErrTokenNotFound] when there is none; any other error means the
// lookup itself failed.
type TokenLookup interface {
	LookupAPITokenByHash(ctx context.Context, hash [32]byte) (StoredToken, error)
}

// Authenticator verifies API tokens against stored hashes. It is safe for
// concurrent use if its TokenLookup is.
type Authenticator struct {
	tokens TokenLookup
}

// NewAuthenticator returns an Authenticator that finds tokens through tokens.
func NewAuthenticator(tokens TokenLookup) *Authenticator {
	return &Authenticator{tokens: tokens}
}

// Authenticate verifies the token in r's "Authorization: Bearer <token>"
// header; see [Authenticator.AuthenticateToken]. A missing header, several
// Authorization headers or another scheme are [ErrUnauthenticated].
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request) (Principal, error) {
	token, err := bearerToken(r.Header)
	if err != nil {
		return Principal{}, err
	}
	return a.AuthenticateToken(ctx, token)
}

// AuthenticateToken verifies a plaintext token (for edges that take it from
// elsewhere, such as the E2B facade's X-API-KEY after [FromE2BKey]) and
// returns the principal it stands for.
//
// Every credential failure matches [ErrUnauthenticated]; the error text
// names the failed check for logs and never contains the token. An error
// that does not match [ErrUnauthenticated] is a failed lookup: answer it as
// a server error, not 401, so that clients do not discard a good token.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (Principal, error) {
	id, err := Parse(token)
	if err != nil {
		return Principal{}, unauthenticated(err.Error())
	}
	hash := Hash(token)
	st, err := a.tokens.LookupAPITokenByHash(ctx, hash)
	if errors.Is(err, ErrTokenNotFound) {
		return Principal{}, unauthenticated("unknown token " + id)
	}
	if err != nil {
		return Principal{}, fmt.Errorf("auth: look up token %s: %w", id, err)
	}
	// The lookup matched on the hash already; compare again, in constant
	// time, so that correctness does not rest on how the store matches.
	if subtle.ConstantTimeCompare(st.SecretSHA256[:], hash[:]) != 1 || st.ID != id {
		return Principal{}, unauthenticated("stored token does not match token " + id)
	}
	if st.Revoked {
		return Principal{}, unauthenticated("token " + id + " is revoked")
	}
	role, err := ParseRole(st.Role)
	if err != nil {
		return Principal{}, unauthenticated(fmt.Sprintf("token %s has an invalid role: %v", id, err))
	}
	p := Principal{TokenID: st.ID, Role: role, Owner: st.Owner}
	if role == RoleUser {
		p.Quota = st.Quota // admins are unlimited, whatever is stored
	}
	return p, nil
}

func unauthenticated(reason string) error {
	return fmt.Errorf("%w: %s", ErrUnauthenticated, reason)
}

// bearerToken returns the token of the one "Authorization: Bearer" header.
// The scheme is case-insensitive (RFC 9110, section 11.1).
func bearerToken(h http.Header) (string, error) {
	values := h.Values("Authorization")
	switch len(values) {
	case 0:
		return "", unauthenticated("no Authorization header")
	case 1:
	default:
		return "", unauthenticated("more than one Authorization header")
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", unauthenticated("Authorization scheme is not Bearer")
	}
	return strings.TrimLeft(token, " "), nil
}
