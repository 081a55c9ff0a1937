package auth

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTokenIDTaken is what a [TokenStore] returns (or wraps) when a new
// token's id or secret hash is already registered to another token.
var ErrTokenIDTaken = errors.New("auth: token id taken")

// Record is a stored API token's description; it holds nothing secret.
type Record struct {
	Token
	CreatedAt time.Time
	RevokedAt time.Time // zero: active
}

// TokenStore is the API token table as issuance needs it.
type TokenStore interface {
	// CreateAPIToken stores rec with the hash of its secret and returns
	// it with CreatedAt set. A taken id fails with [ErrTokenIDTaken].
	CreateAPIToken(ctx context.Context, rec Record, secretSHA256 [32]byte) (Record, error)
	// ListAPITokens returns every token, revoked ones included, oldest
	// first.
	ListAPITokens(ctx context.Context) ([]Record, error)
	// RevokeAPIToken revokes a token, idempotently; an id that never
	// existed is [ErrTokenNotFound].
	RevokeAPIToken(ctx context.Context, id string) error
}

// issueAttempts bounds retries on a token id collision (32-bit ids: a
// collision is rare, two in a row rarer still).
const issueAttempts = 3

// Issuer issues, lists and revokes API tokens. It is safe for concurrent
// use if its TokenStore is.
type Issuer struct {
	tokens TokenStore
}

// NewIssuer returns an Issuer that keeps tokens in tokens.
func NewIssuer(tokens TokenStore) *Issuer { return &Issuer{tokens: tokens} }

// Issue makes and stores a new token for owner with role and name, and
// returns its plaintext (show it once, never store or log it) and its
// record. It does not validate its arguments: the edge does ([ParseRole]).
// A colliding id is retried with a fresh one; any other failure stores
// nothing, so the caller may retry.
func (i *Issuer) Issue(ctx context.Context, role Role, owner, name string) (plaintext string, rec Record, err error) {
	return i.IssueWithQuota(ctx, role, owner, name, Quota{})
}

// IssueWithQuota is Issue for a token whose owner may hold at most q (see
// [Token.Quota]; it does not validate q, the edge does).
func (i *Issuer) IssueWithQuota(ctx context.Context, role Role, owner, name string, q Quota) (plaintext string, rec Record, err error) {
	for attempt := 1; ; attempt++ {
		plaintext, tok, hash := Generate(role, owner)
		tok.Name, tok.Quota = name, q
		rec, err := i.tokens.CreateAPIToken(ctx, Record{Token: tok}, hash)
		if errors.Is(err, ErrTokenIDTaken) && attempt < issueAttempts {
			continue
		}
		if err != nil {
			return "", Record{}, fmt.Errorf("issue token: %w", err)
		}
		return plaintext, rec, nil
	}
}

// Active returns the tokens that still work (not revoked), oldest first.
func (i *Issuer) Active(ctx context.Context) ([]Record, error) {
	all, err := i.tokens.ListAPITokens(ctx)
	if err != nil {
		return nil, err
	}
	active := all[:0:0]
	for _, r := range all {
		if r.RevokedAt.IsZero() {
			active = append(active, r)
		}
	}
	return active, nil
}

// Revoke revokes token id, idempotently: revoking a revoked token
// succeeds. An id that never existed is [ErrTokenNotFound]. Requests with
// the token fail from then on.
func (i *Issuer) Revoke(ctx context.Context, id string) error {
	return i.tokens.RevokeAPIToken(ctx, id)
}
