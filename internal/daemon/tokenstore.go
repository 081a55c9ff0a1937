package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/store"
)

// tokenStore adapts the store's api_tokens table to auth.TokenStore, in
// auth's words: store.ErrIDConflict is auth.ErrTokenIDTaken,
// store.ErrNotFound is auth.ErrTokenNotFound.
type tokenStore struct{ st *store.Store }

var _ auth.TokenStore = tokenStore{}

func (t tokenStore) CreateAPIToken(ctx context.Context, rec auth.Record, secretSHA256 [32]byte) (auth.Record, error) {
	row := store.APIToken{ID: rec.ID, Name: rec.Name, Role: store.Role(rec.Role), Owner: rec.Owner, Quota: store.Quota(rec.Quota)}
	err := t.st.CreateAPIToken(ctx, &row, secretSHA256)
	if errors.Is(err, store.ErrIDConflict) {
		return auth.Record{}, fmt.Errorf("%w: %w", auth.ErrTokenIDTaken, err)
	}
	if err != nil {
		return auth.Record{}, err
	}
	return toRecord(row), nil
}

func (t tokenStore) ListAPITokens(ctx context.Context) ([]auth.Record, error) {
	rows, err := t.st.ListAPITokens(ctx)
	if err != nil {
		return nil, err
	}
	recs := make([]auth.Record, len(rows))
	for i, row := range rows {
		recs[i] = toRecord(row)
	}
	return recs, nil
}

func (t tokenStore) RevokeAPIToken(ctx context.Context, id string) error {
	err := t.st.RevokeAPIToken(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("token %q: %w", id, auth.ErrTokenNotFound)
	}
	return err
}

func toRecord(row store.APIToken) auth.Record {
	return auth.Record{
		Token:     auth.Token{ID: row.ID, Role: auth.Role(row.Role), Owner: row.Owner, Name: row.Name, Quota: auth.Quota(row.Quota)},
		CreatedAt: row.CreatedAt,
		RevokedAt: row.RevokedAt,
	}
}
