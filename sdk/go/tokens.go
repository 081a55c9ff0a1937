package sandboxd

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Role is what an API token may do.
type Role string

// The roles of an API token.
const (
	// RoleAdmin may do everything, including managing tokens.
	RoleAdmin Role = "admin"
	// RoleUser sees and manages only its owner's sandboxes.
	RoleUser Role = "user"
)

// CreateTokenRequest describes an API token to create.
type CreateTokenRequest struct {
	Name string `json:"name"`
	Role Role   `json:"role"`
	// Owner is the tenant whose sandboxes a user token manages; empty
	// lets the daemon choose.
	Owner string `json:"owner,omitempty"`
	// Quota bounds what a user token's owner may hold at once; nil gives
	// the daemon's default (--default-quota, unlimited unless set).
	Quota *Quota `json:"quota,omitempty"`
}

// Quota is what a user token's owner may hold at once across its running
// sandboxes; a zero field is unlimited. Past it, creates and starts fail
// with ErrCapacityExhausted and a message naming the quota.
type Quota struct {
	Sandboxes int64   `json:"sandboxes,omitempty"`
	CPU       float64 `json:"cpu,omitempty"` // cores
	MemoryMB  int64   `json:"memory_mb,omitempty"`
	// DiskMB bounds the sum of the owner's sandboxes' disk limits.
	DiskMB int64 `json:"disk_mb,omitempty"`
}

// Token is an API token. Secret is set only in the result of CreateToken.
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Role      Role      `json:"role"`
	Owner     string    `json:"owner,omitempty"`
	Quota     *Quota    `json:"quota,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Secret is the bearer token itself. The daemon stores only its hash
	// and never shows it again.
	Secret string `json:"token,omitempty"`
}

// CreateToken creates an API token (admin only) and returns it with its
// Secret. It is not retried: a retry after a lost answer would create a
// second token whose secret nobody saw.
func (c *Client) CreateToken(ctx context.Context, req CreateTokenRequest) (*Token, error) {
	var t Token
	r := &request{method: http.MethodPost, segs: []string{"v1", "tokens"}, retry: retryNever}
	if err := c.do(ctx, r, req, &t); err != nil {
		return nil, fmt.Errorf("create token: %w", err)
	}
	return &t, nil
}

// ListTokens returns every API token, without secrets (admin only).
func (c *Client) ListTokens(ctx context.Context) ([]Token, error) {
	var out struct {
		Items []Token `json:"items"`
	}
	r := &request{method: http.MethodGet, segs: []string{"v1", "tokens"}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &out); err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out.Items, nil
}

// RevokeToken revokes an API token (admin only): requests bearing it fail
// with ErrUnauthenticated from then on. It fails with ErrNotFound for an
// unknown id; as with DestroySandbox, a retry that finds the token gone
// after an attempt that may have reached the daemon succeeds.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	r := &request{method: http.MethodDelete, segs: []string{"v1", "tokens", id}, retry: retryDelete}
	if err := c.do(ctx, r, nil, nil); err != nil {
		return fmt.Errorf("revoke token %q: %w", id, err)
	}
	return nil
}
