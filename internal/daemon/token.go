package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/store"
)

// adminTokenFile is the file, in the data directory, that holds the local
// admin token (mode 0600). The CLI finds it there.
const adminTokenFile = "admin.token"

// tokenLookup adapts the store to auth.TokenLookup.
type tokenLookup struct{ st *store.Store }

func (l tokenLookup) LookupAPITokenByHash(ctx context.Context, hash [32]byte) (auth.StoredToken, error) {
	t, err := l.st.LookupAPITokenByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return auth.StoredToken{}, auth.ErrTokenNotFound
	}
	if err != nil {
		return auth.StoredToken{}, err
	}
	// The row was found by this very hash; the authenticator still
	// compares it in constant time.
	return auth.StoredToken{ID: t.ID, Role: string(t.Role), Owner: t.Owner, SecretSHA256: hash, Revoked: !t.RevokedAt.IsZero(), Quota: auth.Quota(t.Quota)}, nil
}

// ensureAdminToken makes sure <dataDir>/admin.token holds a working admin
// token: it creates one at first start, and re-registers the file's token
// if the database was reset under it. It returns the file's path.
func ensureAdminToken(ctx context.Context, st *store.Store, dataDir string) (string, error) {
	path := filepath.Join(dataDir, adminTokenFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		plain := strings.TrimSpace(string(b))
		id, perr := auth.Parse(plain)
		if perr != nil {
			return "", fmt.Errorf("%s: %w (delete the file to get a new token)", path, perr)
		}
		t := store.APIToken{ID: id, Name: "local admin", Role: store.RoleAdmin, Owner: "admin"}
		if err := st.CreateAPIToken(ctx, &t, auth.Hash(plain)); err != nil && !errors.Is(err, store.ErrIDConflict) {
			return "", err
		}
		return path, nil
	case errors.Is(err, fs.ErrNotExist):
	default:
		return "", err
	}
	plain, tok, hash := auth.Generate(auth.RoleAdmin, "admin")
	t := store.APIToken{ID: tok.ID, Name: "local admin", Role: store.RoleAdmin, Owner: "admin"}
	if err := st.CreateAPIToken(ctx, &t, hash); err != nil {
		return "", err
	}
	// Write then rename, so a crash never leaves a half-written token file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(plain+"\n"), 0o600); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}
