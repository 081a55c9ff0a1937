package auth

import (
	"context"
	"errors"
	"testing"
	"time"
)

// memTokens is a TokenStore in memory whose first collide creates fail
// with ErrTokenIDTaken.
type memTokens struct {
	collide int
	recs    []Record
}

func (m *memTokens) CreateAPIToken(_ context.Context, rec Record, _ [32]byte) (Record, error) {
	if m.collide > 0 {
		m.collide--
		return Record{}, ErrTokenIDTaken
	}
	rec.CreatedAt = time.Unix(int64(len(m.recs)), 0)
	m.recs = append(m.recs, rec)
	return rec, nil
}

func (m *memTokens) ListAPITokens(context.Context) ([]Record, error) { return m.recs, nil }

func (m *memTokens) RevokeAPIToken(_ context.Context, id string) error {
	for i := range m.recs {
		if m.recs[i].ID == id {
			if m.recs[i].RevokedAt.IsZero() {
				m.recs[i].RevokedAt = time.Unix(100, 0)
			}
			return nil
		}
	}
	return ErrTokenNotFound
}

func TestIssuer_IssueListRevoke(t *testing.T) {
	ctx := context.Background()
	m := &memTokens{}
	iss := NewIssuer(m)
	plain, rec, err := iss.Issue(ctx, RoleUser, "team-a", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if id, err := Parse(plain); err != nil || id != rec.ID {
		t.Errorf("Parse(plaintext) = %q, %v; want %q", id, err, rec.ID)
	}
	if rec.Role != RoleUser || rec.Owner != "team-a" || rec.Name != "ci" || rec.CreatedAt.IsZero() {
		t.Errorf("record = %+v", rec)
	}
	if _, _, err := iss.Issue(ctx, RoleAdmin, "admin", "ops"); err != nil {
		t.Fatal(err)
	}
	if err := iss.Revoke(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := iss.Revoke(ctx, rec.ID); err != nil {
		t.Errorf("second revoke: %v, want nil", err)
	}
	if err := iss.Revoke(ctx, "00000000"); !errors.Is(err, ErrTokenNotFound) {
		t.Errorf("revoke unknown: %v, want ErrTokenNotFound", err)
	}
	active, err := iss.Active(ctx)
	if err != nil || len(active) != 1 || active[0].Name != "ops" {
		t.Errorf("Active = %+v, %v; want only ops", active, err)
	}
}

func TestIssuer_IssueRetriesIDCollision(t *testing.T) {
	m := &memTokens{collide: issueAttempts - 1}
	if _, _, err := NewIssuer(m).Issue(context.Background(), RoleAdmin, "admin", "x"); err != nil {
		t.Fatalf("Issue after %d collisions: %v", issueAttempts-1, err)
	}
}

func TestIssuer_IssueGivesUpAfterAttempts(t *testing.T) {
	m := &memTokens{collide: issueAttempts}
	_, _, err := NewIssuer(m).Issue(context.Background(), RoleAdmin, "admin", "x")
	if !errors.Is(err, ErrTokenIDTaken) || len(m.recs) != 0 {
		t.Fatalf("Issue after %d collisions: %v, %d stored; want ErrTokenIDTaken, none", issueAttempts, err, len(m.recs))
	}
}
