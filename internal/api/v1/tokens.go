package v1

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"unicode"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Tokens is the API token table as the admin routes need it;
// *store.Store implements it.
type Tokens interface {
	// CreateAPIToken stores t with the hash of its secret and sets
	// t.CreatedAt. A taken id fails with store.ErrIDConflict.
	CreateAPIToken(ctx context.Context, t *store.APIToken, secretSHA256 [32]byte) error
	// ListAPITokens returns every token, revoked ones included.
	ListAPITokens(ctx context.Context) ([]store.APIToken, error)
	// RevokeAPIToken revokes a token, idempotently; an id that never
	// existed is store.ErrNotFound.
	RevokeAPIToken(ctx context.Context, id string) error
}

var _ Tokens = (*store.Store)(nil)

// maxTokenLabel bounds a token's name and owner.
const maxTokenLabel = 128

// createTokenAttempts bounds retries on a token id collision (32-bit ids:
// a collision is rare, two in a row rarer still).
const createTokenAttempts = 3

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
	for attempt := 1; ; attempt++ {
		plaintext, tok, hash := auth.Generate(role, body.Owner)
		rec := store.APIToken{ID: tok.ID, Name: body.Name, Role: store.Role(role), Owner: body.Owner}
		err := s.tokens.CreateAPIToken(r.Context(), &rec, hash)
		if errors.Is(err, store.ErrIDConflict) && attempt < createTokenAttempts {
			continue
		}
		if err != nil {
			return fmt.Errorf("create token: %w", err)
		}
		out := toTokenJSON(rec)
		out.Token = plaintext
		writeJSON(w, http.StatusCreated, out)
		return nil
	}
}

// listTokens answers the tokens that still work (not revoked), oldest
// first; never their secrets.
func (s *server) listTokens(w http.ResponseWriter, r *http.Request) error {
	recs, err := s.tokens.ListAPITokens(r.Context())
	if err != nil {
		return err
	}
	out := listJSON[tokenJSON]{Items: []tokenJSON{}}
	for _, rec := range recs {
		if rec.RevokedAt.IsZero() {
			out.Items = append(out.Items, toTokenJSON(rec))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// revokeToken revokes a token: 204, also when it was already revoked (a
// retry succeeds); not_found when it never existed. Requests with it fail
// from then on.
func (s *server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	if err := s.tokens.RevokeAPIToken(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func toTokenJSON(rec store.APIToken) tokenJSON {
	return tokenJSON{ID: rec.ID, Name: rec.Name, Role: string(rec.Role), Owner: rec.Owner, CreatedAt: rec.CreatedAt.UTC()}
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
