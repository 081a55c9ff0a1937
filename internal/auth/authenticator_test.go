package auth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sandboxd/sandboxd/internal/auth"
)

// tokenTable is an in-memory TokenLookup. If err is set, every lookup fails
// with it; if override is set, it is returned for any hash (a broken store).
type tokenTable struct {
	byHash   map[[32]byte]auth.StoredToken
	err      error
	override *auth.StoredToken
}

var _ auth.TokenLookup = (*tokenTable)(nil)

func (tt *tokenTable) LookupAPITokenByHash(_ context.Context, hash [32]byte) (auth.StoredToken, error) {
	switch {
	case tt.err != nil:
		return auth.StoredToken{}, tt.err
	case tt.override != nil:
		return *tt.override, nil
	}
	st, ok := tt.byHash[hash]
	if !ok {
		return auth.StoredToken{}, fmt.Errorf("store: no such token: %w", auth.ErrTokenNotFound)
	}
	return st, nil
}

// issue generates a token and stores it as the store would.
func (tt *tokenTable) issue(t *testing.T, role auth.Role, owner string) (string, auth.StoredToken) {
	t.Helper()
	if tt.byHash == nil {
		tt.byHash = make(map[[32]byte]auth.StoredToken)
	}
	plaintext, tok, hash := auth.Generate(role, owner)
	st := auth.StoredToken{ID: tok.ID, Role: string(tok.Role), Owner: tok.Owner, SecretSHA256: hash}
	tt.byHash[hash] = st
	return plaintext, st
}

func request(t *testing.T, authorization ...string) *http.Request {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/sandboxes", nil)
	for _, v := range authorization {
		r.Header.Add("Authorization", v)
	}
	return r
}

func TestAuthenticate_Valid(t *testing.T) {
	var table tokenTable
	a := auth.NewAuthenticator(&table)
	for _, role := range []auth.Role{auth.RoleAdmin, auth.RoleUser} {
		plaintext, st := table.issue(t, role, "team-a")
		want := auth.Principal{TokenID: st.ID, Role: role, Owner: "team-a"}
		for _, header := range []string{"Bearer " + plaintext, "bearer " + plaintext, "Bearer  " + plaintext} {
			got, err := a.Authenticate(t.Context(), request(t, header))
			if err != nil {
				t.Fatalf("Authenticate(%s): %v", role, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Principal (-want +got):\n%s", diff)
			}
		}
		got, err := a.AuthenticateToken(t.Context(), plaintext)
		if err != nil || got != want {
			t.Errorf("AuthenticateToken = %+v, %v; want %+v", got, err, want)
		}
	}
}

func TestAuthenticate_E2BKey(t *testing.T) {
	var table tokenTable
	plaintext, st := table.issue(t, auth.RoleUser, "o")
	token, err := auth.FromE2BKey(auth.E2BKey(plaintext))
	if err != nil {
		t.Fatal(err)
	}
	p, err := auth.NewAuthenticator(&table).AuthenticateToken(t.Context(), token)
	if err != nil || p.TokenID != st.ID {
		t.Errorf("AuthenticateToken = %+v, %v", p, err)
	}
}

// TestAuthenticate_Rejected covers every credential failure: each is
// ErrUnauthenticated, and none leaks the token into the error.
func TestAuthenticate_Rejected(t *testing.T) {
	var table tokenTable
	good, _ := table.issue(t, auth.RoleUser, "o")
	revoked, revokedRow := table.issue(t, auth.RoleUser, "o")
	revokedRow.Revoked = true
	table.byHash[auth.Hash(revoked)] = revokedRow
	badRole, badRoleRow := table.issue(t, auth.RoleUser, "o")
	badRoleRow.Role = "root"
	table.byHash[auth.Hash(badRole)] = badRoleRow
	noRole, _ := table.issue(t, "", "o") // Generate does not validate roles
	unknown, _, _ := auth.Generate(auth.RoleAdmin, "")
	// The right id with another secret.
	wrongSecret := good[:13] + strings.Repeat("0", len(good)-13)

	a := auth.NewAuthenticator(&table)
	tests := []struct {
		name   string
		header []string
	}{
		{"no header", nil},
		{"empty header", []string{""}},
		{"basic scheme", []string{"Basic " + good}},
		{"no scheme", []string{good}},
		{"two headers", []string{"Bearer " + good, "Bearer " + good}},
		{"malformed", []string{"Bearer sbx_nothex"}},
		{"e2b form as bearer", []string{"Bearer " + auth.E2BKey(good)}},
		{"trailing space", []string{"Bearer " + good + " "}},
		{"unknown", []string{"Bearer " + unknown}},
		{"revoked", []string{"Bearer " + revoked}},
		{"wrong secret, right id", []string{"Bearer " + wrongSecret}},
		{"stored role invalid", []string{"Bearer " + badRole}},
		{"stored role empty", []string{"Bearer " + noRole}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := a.Authenticate(t.Context(), request(t, tt.header...))
			if !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("err = %v, want ErrUnauthenticated", err)
			}
			if p != (auth.Principal{}) {
				t.Errorf("principal %+v returned with an error", p)
			}
			for _, tok := range []string{good, revoked, unknown, wrongSecret, good[13:]} {
				if strings.Contains(err.Error(), tok) {
					t.Errorf("error %q contains a token or secret", err)
				}
			}
		})
	}
}

// TestAuthenticate_StoreMismatch: a store that answers with another token's
// row (a broken adapter) must not authenticate anyone.
func TestAuthenticate_StoreMismatch(t *testing.T) {
	var table tokenTable
	good, _ := table.issue(t, auth.RoleUser, "o")
	_, adminRow := table.issue(t, auth.RoleAdmin, "")

	for name, row := range map[string]auth.StoredToken{
		"other token's row": adminRow,
		"right hash, other id": func() auth.StoredToken {
			r := adminRow
			r.SecretSHA256 = auth.Hash(good)
			return r
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			table.override = &row
			t.Cleanup(func() { table.override = nil })
			_, err := auth.NewAuthenticator(&table).AuthenticateToken(t.Context(), good)
			if !errors.Is(err, auth.ErrUnauthenticated) {
				t.Errorf("err = %v, want ErrUnauthenticated", err)
			}
		})
	}
}

func TestAuthenticate_LookupFailure(t *testing.T) {
	var table tokenTable
	good, _ := table.issue(t, auth.RoleUser, "o")
	storeDown := errors.New("database is locked")
	table.err = storeDown

	_, err := auth.NewAuthenticator(&table).AuthenticateToken(t.Context(), good)
	if !errors.Is(err, storeDown) {
		t.Errorf("err = %v, want it to wrap the store's error", err)
	}
	if errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("a failing store is reported as ErrUnauthenticated: %v", err)
	}
}

func TestPrincipal_CanSee(t *testing.T) {
	admin := auth.Principal{TokenID: "1", Role: auth.RoleAdmin}
	alice := auth.Principal{TokenID: "2", Role: auth.RoleUser, Owner: "alice"}
	ownerless := auth.Principal{TokenID: "3", Role: auth.RoleUser}
	bogus := auth.Principal{TokenID: "4", Role: "root", Owner: "alice"}
	var zero auth.Principal

	tests := []struct {
		p     auth.Principal
		owner string
		want  bool
	}{
		{admin, "alice", true},
		{admin, "bob", true},
		{admin, "", true},
		{alice, "alice", true},
		{alice, "bob", false},
		{alice, "", false},
		{alice, "Alice", false},
		{ownerless, "", false},
		{ownerless, "alice", false},
		{bogus, "alice", false},
		{zero, "", false},
	}
	for _, tt := range tests {
		if got := tt.p.CanSee(tt.owner); got != tt.want {
			t.Errorf("%+v.CanSee(%q) = %t, want %t", tt.p, tt.owner, got, tt.want)
		}
	}
	if !admin.IsAdmin() || alice.IsAdmin() || zero.IsAdmin() {
		t.Error("IsAdmin is wrong")
	}
}

func TestPrincipal_Context(t *testing.T) {
	if _, ok := auth.PrincipalFrom(t.Context()); ok {
		t.Error("PrincipalFrom found a principal in an empty context")
	}
	want := auth.Principal{TokenID: "abcdef01", Role: auth.RoleUser, Owner: "o"}
	got, ok := auth.PrincipalFrom(auth.WithPrincipal(t.Context(), want))
	if !ok || got != want {
		t.Errorf("PrincipalFrom = %+v, %t; want %+v", got, ok, want)
	}
}
