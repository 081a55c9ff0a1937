package v1

import (
	"context"
	"net/http"
	"strings"
	"unicode"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// Tokens issues, lists and revokes API tokens; *auth.Issuer is one.
type Tokens interface {
	// IssueWithQuota makes and stores a token whose owner may hold at most
	// q, and returns its plaintext, shown once.
	IssueWithQuota(ctx context.Context, role auth.Role, owner, name string, q auth.Quota) (plaintext string, rec auth.Record, err error)
	// Active returns the tokens that are not revoked, oldest first.
	Active(ctx context.Context) ([]auth.Record, error)
	// Revoke revokes a token, idempotently; an id that never existed is
	// auth.ErrTokenNotFound.
	Revoke(ctx context.Context, id string) error
}

var _ Tokens = (*auth.Issuer)(nil)

// reservedOwnerPrefix starts the owners no token can act as: the warm
// pool's idle sandboxes belong to store.PoolOwner.
const reservedOwnerPrefix = "sandboxd:"

// maxTokenLabel bounds a token's name and owner.
const maxTokenLabel = 128

// createToken issues a token: 201 with its description and the secret,
// which is shown this once and never again. A user token needs an owner
// (the tenant whose sandboxes it sees).
func (s *server) createToken(w http.ResponseWriter, r *http.Request) error {
	var body tokenRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	role, err := auth.ParseRole(body.Role)
	if err != nil {
		return fieldError("role", "must be %q or %q", auth.RoleAdmin, auth.RoleUser)
	}
	if err := checkLabel("name", body.Name, true); err != nil {
		return err
	}
	if err := checkLabel("owner", body.Owner, role == auth.RoleUser); err != nil {
		return err
	}
	if strings.HasPrefix(body.Owner, reservedOwnerPrefix) {
		return fieldError("owner", "the %q prefix is reserved for the daemon's own sandboxes (the warm pool's)", reservedOwnerPrefix)
	}
	q, err := s.tokenQuota(role, body.Quota)
	if err != nil {
		return err
	}
	plaintext, rec, err := s.tokens.IssueWithQuota(r.Context(), role, body.Owner, body.Name, q)
	if err != nil {
		return err
	}
	out := toTokenJSON(rec)
	out.Token = plaintext
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// listTokens answers the tokens that still work (not revoked), oldest
// first; never their secrets.
func (s *server) listTokens(w http.ResponseWriter, r *http.Request) error {
	recs, err := s.tokens.Active(r.Context())
	if err != nil {
		return err
	}
	out := listJSON[tokenJSON]{Items: []tokenJSON{}}
	for _, rec := range recs {
		out.Items = append(out.Items, toTokenJSON(rec))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// revokeToken revokes a token: 204, also when it was already revoked (a
// retry succeeds); not_found when it never existed. Requests with it fail
// from then on.
func (s *server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	if err := s.tokens.Revoke(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func toTokenJSON(rec auth.Record) tokenJSON {
	return tokenJSON{ID: rec.ID, Name: rec.Name, Role: string(rec.Role), Owner: rec.Owner, Quota: toQuotaJSON(rec.Quota), CreatedAt: rec.CreatedAt.UTC()}
}

// tokenQuota is the quota a new token gets: the one asked for, else the
// daemon's default; none for an admin token, which is never limited.
func (s *server) tokenQuota(role auth.Role, asked *quotaJSON) (auth.Quota, error) {
	if role == auth.RoleAdmin {
		if asked != nil && asked.toAuth() != (auth.Quota{}) {
			return auth.Quota{}, fieldError("quota", "admin tokens are not limited by a quota")
		}
		return auth.Quota{}, nil
	}
	if asked == nil {
		return s.defaultQuota, nil
	}
	q := asked.toAuth()
	if q.Sandboxes < 0 || q.MilliCPU < 0 || q.MemoryMB < 0 || q.DiskMB < 0 {
		return auth.Quota{}, fieldError("quota", "sandboxes, cpu, memory_mb and disk_mb must not be negative (0 is unlimited)")
	}
	return q, nil
}

// checkLabel validates a token's name or owner: printable, at most
// maxTokenLabel bytes, and present when required.
func checkLabel(field, v string, required bool) error {
	switch {
	case v == "" && required:
		return fieldError(field, "is required")
	case len(v) > maxTokenLabel:
		return fieldError(field, "must be at most %d bytes", maxTokenLabel)
	}
	for _, r := range v {
		if !unicode.IsPrint(r) {
			return fieldError(field, "must be printable text")
		}
	}
	return nil
}
